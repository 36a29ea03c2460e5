"""The IAM policies the CDK app synthesizes for each role, resolved to the local
platform's resources, and the emulator's users that hold them.

Each component of the local platform runs with an access key of its own whose one
policy is its deployed role's (``credentials``): a call that the role could not make
in AWS is refused here, once the emulator enforces IAM (``moto_iam``). The stage is
synthesized by the CDK app itself (in a subprocess: the CDK's runtime is heavy), and
what a platform start needs of it is cached under ``build/role-policies`` by the
content of what shapes the policies: ``stacks/``, ``app.py``, ``cdk.json``, the core
layer's manifest module and the manifest the platform runs.

Roles and what runs with them locally:

- ``router:<model>``, ``openai``, ``requests``, ``key-authorizer``: the functions
  API Gateway calls. Locally one router process serves all of them, so it holds
  each of their policies (one inline policy per role).
- ``splitter``: the batch splitter function.
- ``worker:<service>``: a worker service's ECS task role (a model's own, or a
  pool's), for its worker processes (:func:`worker_roles` says what a pool's hold
  where an app has no role for it).
- ``drop:<tenant>``: what a tenant's data team assumes to drop files.

The CloudFormation intrinsics in the statements (``Ref``, ``Fn::GetAtt``,
``Fn::Join``, ``Fn::Sub``, ``Fn::GetStackOutput``, ``Fn::ImportValue``) are resolved
to the local resources' names and ARNs (account :data:`ACCOUNT`, the manifest's
region); a bucket's cloud name (``<name>-<account>-<region>``) becomes its local
name. A resource with no local counterpart (a log group, an AppConfig environment
whose data the local stand-in serves) is kept as an ARN of its own that names
nothing here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacks.assets import BUILD_DIR, MANIFEST_FILE, REPO_ROOT
from switchyard import aws
from switchyard.manifest import Manifest, ResourceNames

ACCOUNT = "123456789012"  # the emulator's
CACHE_DIR = BUILD_DIR / "role-policies"
# What shapes the synthesized policies, beside the manifest the platform runs.
_INPUTS = ("stacks", "app.py", "cdk.json", "layers/core/python/switchyard/manifest.py")
ADMIN = "operator"
ROUTER_ROLES = ("openai", "requests", "key-authorizer")
Statement = dict[str, Any]
_SUB = re.compile(r"\$\{([^}!][^}]*)\}")


@dataclass(frozen=True)
class Synthesized:
    """The stage's templates (stack name -> template) and where each component's role
    is in them (role name -> (stack name, logical id))."""

    templates: dict[str, dict[str, Any]]
    roles: dict[str, tuple[str, str]]


def synthesized(manifest: Manifest, stage: str = "dev") -> Synthesized:
    """The stage synthesized from ``manifest``, from the cache when its inputs are
    unchanged. What the policies depend on (the names, the region, the models and the
    tenants, and the concurrency budget their checks depend on) is ``manifest``'s; the
    other numbers (timeouts, windows, scaling) are the project manifest's, since a
    local run may shorten them below what AWS takes."""
    from switchyard.manifest import load_manifest

    project = load_manifest(MANIFEST_FILE)
    naming = {"prefix": manifest.platform.prefix, "region": manifest.platform.region}
    # The run's concurrency budget: the checks on it depend on the run's models (a
    # run of eight models with a service each reserves more than the project's).
    stages = {
        name: settings.model_copy(update={"concurrency": manifest.stages[name].concurrency})
        if name in manifest.stages
        else settings
        for name, settings in project.stages.items()
    }
    shaped = project.model_copy(
        update={
            "platform": project.platform.model_copy(update=naming),
            "stages": stages,
            "models": manifest.models,
            "pools": manifest.pools,
            "tenants": manifest.tenants,
            "tiers": manifest.tiers,
        }
    )
    text = shaped.model_dump_json(by_alias=True)
    key = hashlib.sha256(f"{stage}\n{text}".encode())
    for path in _input_files():
        key.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    cached = CACHE_DIR / f"{stage}-{key.hexdigest()[:16]}.json"
    if not cached.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            out, given = Path(scratch) / "synthesized.json", Path(scratch) / "manifest.json"
            given.write_text(text)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "switchyard_local.role_policies",
                    str(given),
                    stage,
                    str(out),
                ],
                check=True,
                cwd=REPO_ROOT,
                env={
                    **os.environ,
                    "PYTHONPATH": _python_path(),
                    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
                },
                stdout=subprocess.DEVNULL,
            )
            os.replace(out, cached)  # whole or not at all
    body = json.loads(cached.read_text())
    return Synthesized(body["templates"], {k: (v[0], v[1]) for k, v in body["roles"].items()})


def _input_files() -> Iterator[Path]:
    for name in _INPUTS:
        path = REPO_ROOT / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        yield from (f for f in files if "__pycache__" not in f.parts)


def _python_path() -> str:
    here = Path(__file__).resolve().parent.parent
    paths = [str(REPO_ROOT), str(REPO_ROOT / "layers" / "core" / "python"), str(here)]
    return os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])


def _synthesize(manifest_path: Path, stage: str, out: Path) -> None:
    """Run in a subprocess: synthesize the app as ``app.py`` does (no bundling: the
    policies do not depend on the code) and write the templates and roles."""
    from aws_cdk import App, Stack

    from stacks.app import add_platform, app_context

    with tempfile.TemporaryDirectory() as outdir:
        context = app_context(stage=stage, **{"aws:cdk:bundling-stacks": []})
        app = App(context=context, outdir=outdir)
        platform = add_platform(app, Manifest.model_validate_json(manifest_path.read_text()))
        serving = platform.serving
        roles: dict[str, Any] = {
            "openai": serving.openai.role,
            "requests": serving.requests.role,
            "key-authorizer": serving.shared.api.key_authorizer.function.role,
            "splitter": serving.batch.splitter.role,
        }
        for model, endpoint in serving.endpoints.items():
            roles[f"router:{model}"] = endpoint.router.role
            if endpoint.worker is not None:  # a model's own service, not a pool's model
                roles[f"worker:{model}"] = endpoint.worker.task_definition.task_role
        for pool, workers in serving.pools.items():
            roles[f"worker:{pool}"] = workers.worker.task_definition.task_role
        for tenant, role in platform.data.storage.drop_roles.items():
            roles[f"drop:{tenant}"] = role
        where = {}
        for name, role in roles.items():
            stack = Stack.of(role)
            where[name] = [stack.stack_name, stack.resolve(role.node.default_child.logical_id)]
        assembly = app.synth()
        templates = {s.stack_name: s.template for s in assembly.stacks}
    out.write_text(json.dumps({"templates": templates, "roles": where}))


def role_statements(synth: Synthesized, role: str) -> list[Statement]:
    """The statements of ``role``'s policies as synthesized (intrinsics unresolved):
    its inline policies and every ``AWS::IAM::Policy`` attached to it."""
    stack, logical_id = synth.roles[role]
    resources = synth.templates[stack]["Resources"]
    statements: list[Statement] = []
    for policy in resources[logical_id]["Properties"].get("Policies", []):
        statements += policy["PolicyDocument"]["Statement"]
    for resource in resources.values():
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": logical_id} in resource[
            "Properties"
        ].get("Roles", []):
            statements += resource["Properties"]["PolicyDocument"]["Statement"]
    return statements


class Resolver:
    """CloudFormation's intrinsics, answered with the local resources' names."""

    def __init__(self, synth: Synthesized, names: ResourceNames, region: str) -> None:
        self._templates = synth.templates
        self._region = region
        buckets = (
            names.artifacts_bucket,
            names.payloads_bucket,
            names.batch_drop_bucket,
            names.prediction_logs_bucket,
        )
        self._buckets = {ResourceNames.cloud_bucket(b, ACCOUNT, region): b for b in buckets}

    def statements(self, stack: str, statements: Iterable[Statement]) -> list[Statement]:
        resolved = [{k: self.value(stack, v) for k, v in s.items()} for s in statements]
        for statement in resolved:
            if "Resource" in statement:
                statement["Resource"] = self._arns(statement["Resource"])
        return resolved

    def _arns(self, resource: Any) -> Any:
        """A resource that resolved to no ARN (it has no local counterpart) as one that
        names nothing here: IAM takes only ARNs and ``*``."""
        if isinstance(resource, list):
            return [self._arns(r) for r in resource]
        if resource == "*" or resource.startswith("arn:"):
            return resource
        return f"arn:aws:cloudformation:{self._region}:{ACCOUNT}:{resource}"

    def value(self, stack: str, value: Any) -> Any:
        if isinstance(value, list):
            return [self.value(stack, v) for v in value]
        if isinstance(value, str):
            return self._local(value)
        if not isinstance(value, dict):
            return value
        if len(value) != 1 or not next(iter(value)).startswith(("Ref", "Fn::")):
            return {k: self.value(stack, v) for k, v in value.items()}
        ((function, args),) = value.items()
        return self._local(self._intrinsic(stack, function, args))

    def _local(self, text: str) -> str:
        for cloud, local in self._buckets.items():
            text = text.replace(cloud, local)
        return text

    def _intrinsic(self, stack: str, function: str, args: Any) -> str:
        if function == "Ref":
            return self._ref(stack, args)
        if function == "Fn::GetAtt":
            logical_id, attribute = args if isinstance(args, list) else args.split(".", 1)
            return self._attribute(stack, logical_id, attribute)
        if function == "Fn::Join":
            separator, parts = args
            return separator.join(str(self.value(stack, p)) for p in parts)
        if function == "Fn::Select":
            index, items = args
            return str(self.value(stack, items)[int(index)])
        if function == "Fn::Sub":
            template, variables = (args, {}) if isinstance(args, str) else args
            given = {k: str(self.value(stack, v)) for k, v in variables.items()}

            def sub(match: re.Match[str]) -> str:
                name = match.group(1)
                if name in given:
                    return given[name]
                if "." in name:
                    return self._attribute(stack, *name.split(".", 1))
                return self._ref(stack, name)

            return _SUB.sub(sub, template)
        if function == "Fn::GetStackOutput":
            other = args["StackName"]
            output = self._templates[other]["Outputs"][args["OutputName"]]["Value"]
            return str(self.value(other, output))
        if function == "Fn::ImportValue":
            wanted = self.value(stack, args)
            for other, template in self._templates.items():
                for output in template.get("Outputs", {}).values():
                    export = output.get("Export", {}).get("Name")
                    if export is not None and self.value(other, export) == wanted:
                        return str(self.value(other, output["Value"]))
        return self._nothing_here(json.dumps({function: args}, sort_keys=True))

    def _ref(self, stack: str, name: str) -> str:
        pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": self._region,
            "AWS::AccountId": ACCOUNT,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack,
        }
        if name in pseudo:
            return pseudo[name]
        kind, props = self._resource(stack, name)
        named = {
            "AWS::DynamoDB::Table": "TableName",
            "AWS::S3::Bucket": "BucketName",
            "AWS::Logs::LogGroup": "LogGroupName",
            "AWS::KinesisFirehose::DeliveryStream": "DeliveryStreamName",
        }
        if kind in named and named[kind] in props:
            return str(self.value(stack, props[named[kind]]))
        if kind == "AWS::SQS::Queue" and "QueueName" in props:
            queue = self.value(stack, props["QueueName"])
            return f"http://sqs.{self._region}.localhost/{ACCOUNT}/{queue}"
        if kind == "AWS::SecretsManager::Secret" and "Name" in props:
            # moto's ARN ends in a random suffix of its own
            secret = self.value(stack, props["Name"])
            return f"arn:aws:secretsmanager:{self._region}:{ACCOUNT}:secret:{secret}-*"
        return self._nothing_here(name)

    def _attribute(self, stack: str, logical_id: str, attribute: str) -> str:
        kind, props = self._resource(stack, logical_id)
        if attribute == "Arn":
            region, account = self._region, ACCOUNT
            if kind == "AWS::DynamoDB::Table":
                table = self.value(stack, props["TableName"])
                return f"arn:aws:dynamodb:{region}:{account}:table/{table}"
            if kind == "AWS::SQS::Queue" and "QueueName" in props:
                return f"arn:aws:sqs:{region}:{account}:{self.value(stack, props['QueueName'])}"
            if kind == "AWS::S3::Bucket" and "BucketName" in props:
                return f"arn:aws:s3:::{self.value(stack, props['BucketName'])}"
            if kind == "AWS::Logs::LogGroup" and "LogGroupName" in props:
                group = self.value(stack, props["LogGroupName"])
                return f"arn:aws:logs:{region}:{account}:log-group:{group}:*"
            if kind == "AWS::KinesisFirehose::DeliveryStream":
                stream = self.value(stack, props["DeliveryStreamName"])
                return f"arn:aws:firehose:{region}:{account}:deliverystream/{stream}"
        return self._nothing_here(f"{logical_id}.{attribute}")

    def _resource(self, stack: str, logical_id: str) -> tuple[str, dict[str, Any]]:
        resource = self._templates[stack]["Resources"].get(logical_id, {})
        return resource.get("Type", ""), resource.get("Properties", {})

    def _nothing_here(self, what: str) -> str:
        """An ARN that names no local resource, for one that has no counterpart here."""
        return "not-local-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", what).strip("-")


def resolved_policies(manifest: Manifest, stage: str, region: str) -> dict[str, list[Statement]]:
    """Every component role's statements, resolved to the local resources (a role
    for each pool's workers among them: :func:`worker_roles`)."""
    synth = synthesized(manifest, stage)
    resolver = Resolver(synth, manifest.names(stage), region)
    resolved = {
        role: resolver.statements(synth.roles[role][0], role_statements(synth, role))
        for role in synth.roles
    }
    return worker_roles(resolved, {pool: manifest.pool_models(pool) for pool in manifest.pools})


def worker_roles(
    roles: dict[str, list[Statement]], pools: Mapping[str, Iterable[str]]
) -> dict[str, list[Statement]]:
    """``roles`` with a role for each pool's workers: the pool service's own where
    the app has one, else (a synthesized app with no pool services) the statements
    of its models' worker roles together, which is what the pool's workers do."""
    out = dict(roles)
    for pool, models in pools.items():
        if f"worker:{pool}" not in out:
            out[f"worker:{pool}"] = [s for m in models for s in roles.get(f"worker:{m}", [])]
    return out


def local_principals(roles: dict[str, list[Statement]]) -> dict[str, dict[str, list[Statement]]]:
    """What each local process holds (user name -> role name -> statements): the
    router process every function API Gateway calls, the others their own role."""
    router = {r: s for r, s in roles.items() if r.startswith("router:") or r in ROUTER_ROLES}
    users: dict[str, dict[str, list[Statement]]] = {"router": router}
    for role, statements in roles.items():
        if role not in router:
            users[role.replace(":", "-")] = {role: statements}
    return users


@dataclass(frozen=True)
class Credentials:
    aws_access_key_id: str
    aws_secret_access_key: str

    def environment(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.aws_access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.aws_secret_access_key,
        }

    def as_dict(self) -> dict[str, str]:
        return {
            "aws_access_key_id": self.aws_access_key_id,
            "aws_secret_access_key": self.aws_secret_access_key,
        }

    def use(self) -> None:
        """From now on this process's AWS clients (``switchyard.aws``'s, and the
        adapters built after) call with these keys."""
        os.environ.update(self.environment())
        aws.reset_clients()


# Where a local platform's record (``platform.json``) keeps the operator's keys.
OPERATOR_KEYS = "admin_credentials"


def act_as_operator(record: Mapping[str, Any]) -> None:
    """Act as the operator of the local platform whose record (``platform.json``) is
    ``record``: its emulator enforces IAM, and the operator may do anything. A
    record without the operator's keys (an emulator without IAM, which takes any
    key) leaves the keys in use as they are."""
    keys = record.get(OPERATOR_KEYS)
    if keys:
        Credentials(**keys).use()


ADMIN_POLICY: list[Statement] = [{"Effect": "Allow", "Action": "*", "Resource": "*"}]


def create_users(
    iam: Any, principals: dict[str, dict[str, list[Statement]]], operator: bool = True
) -> dict[str, Credentials]:
    """One IAM user per principal, with one inline policy per role it holds, and an
    access key each; plus (``operator``) the operator, :data:`ADMIN`, who may do
    anything."""
    keys = {}
    everyone = {ADMIN: {"admin": ADMIN_POLICY}, **principals} if operator else principals
    for user, policies in everyone.items():
        iam.create_user(UserName=user)
        for role, statements in policies.items():
            document = {"Version": "2012-10-17", "Statement": statements}
            iam.put_user_policy(
                UserName=user,
                PolicyName=re.sub(r"[^\w+=,.@-]", "-", role),
                PolicyDocument=json.dumps(document),
            )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = Credentials(key["AccessKeyId"], key["SecretAccessKey"])
    return keys


def iam_wanted() -> bool:
    """Whether the emulator enforces IAM: yes, unless ``SWITCHYARD_LOCAL_IAM=0`` (to
    tell a missing permission from another fault, not for everyday use)."""
    return os.environ.get("SWITCHYARD_LOCAL_IAM", "1") != "0"


def enforce_iam(emulator_url: str, on: bool = True) -> None:
    """Turn the emulator's IAM on (every call from now on evaluated) or off."""
    import urllib.request

    request = urllib.request.Request(
        f"{emulator_url}/moto-api/reset-auth",
        data=b"0" if on else b"inf",
        headers={"Content-Type": "text/plain"},  # a form's body would be parsed away
        method="POST",
    )
    urllib.request.urlopen(request).close()  # noqa: S310 - the local emulator


if __name__ == "__main__":
    _synthesize(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
