"""The AWS account quotas a deploy runs into, and the instance facts they count in.

Two readers: ``make deploy-check`` (``stacks.deploy_check``) compares what a
synthesized stage needs with them, and ``switchyard plan`` (``switchyard.planning``)
compares what a traffic profile needs. Both read the figures here, so the two
reports agree on what a new account has.

Defaults are a new account's in us-east-1, as AWS documents them (Service Quotas,
and each service's quota page); an account's own may be higher. ``code`` is the
Service Quotas code where this module knows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.manifest import API_ACCOUNT_BURST, API_ACCOUNT_RATE

# vCPUs of the instance types a manifest or a profile may name (EC2's on-demand
# quotas count vCPUs). A type missing here is reported, not guessed.
INSTANCE_VCPUS = {
    "g4dn.xlarge": 4,
    "g4dn.2xlarge": 8,
    "g5.xlarge": 4,
    "g5.2xlarge": 8,
    "g5.4xlarge": 16,
    "g6.xlarge": 4,
    "g6.2xlarge": 8,
    "g6.4xlarge": 16,
    "c7i.large": 2,
    "c7i.xlarge": 4,
    "c7i.2xlarge": 8,
    "m7i.xlarge": 4,
    "m7i.2xlarge": 8,
}

# A new account's defaults, for the comparisons in the reports.
LAMBDA_CONCURRENCY_DEFAULT = 1_000  # concurrent executions per region (L-B99A9384)
API_GATEWAY_RATE_DEFAULT = API_ACCOUNT_RATE  # requests/s per account and region (L-8A5B8E43)
API_GATEWAY_BURST_DEFAULT = API_ACCOUNT_BURST
# On-demand tables: read and write request units per second, per table.
DYNAMODB_TABLE_UNITS_DEFAULT = 40_000
# Messages received and not yet deleted, per standard queue.
SQS_IN_FLIGHT_DEFAULT = 120_000
# A Direct PUT Firehose stream in us-east-1, us-west-2 and eu-west-1 (the three scale
# together when one is raised).
FIREHOSE_RECORDS_PER_SECOND_DEFAULT = 500_000
FIREHOSE_REQUESTS_PER_SECOND_DEFAULT = 2_000
FIREHOSE_MIB_PER_SECOND_DEFAULT = 5

GPU_HOSTS_QUOTA = ("EC2 Running On-Demand G and VT instances (vCPUs)", "L-DB2E81BA")
STANDARD_HOSTS_QUOTA = ("EC2 Running On-Demand Standard instances (vCPUs)", "L-1216C47A")


@dataclass(frozen=True)
class Quota:
    """One account quota a deploy needs: its name and code in Service Quotas, what
    is needed of it, what a new account has, and why."""

    name: str
    code: str | None  # None where Service Quotas has no code for it here
    needs: int
    default: int | None  # None: set per account
    why: str

    @property
    def to_raise(self) -> bool:
        """Whether a new account must ask for more (always, where it has no default)."""
        return self.default is None or self.needs > self.default

    def line(self) -> str:
        default = "set per account" if self.default is None else f"default {self.default:,}"
        code = f" ({self.code})" if self.code else ""
        return f"{self.name}{code}: needs {self.needs:,} ({default}): {self.why}"


def host_quota(instance_types: list[str] | tuple[str, ...]) -> tuple[str, str]:
    """The EC2 on-demand quota (name, code) that instances of these types count in."""
    if all(t.split(".")[0][0] in "gv" for t in instance_types):
        return GPU_HOSTS_QUOTA
    return STANDARD_HOSTS_QUOTA
