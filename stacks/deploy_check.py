"""`make deploy-check`: what `cdk deploy` will do, checked before it does it.

It synthesizes every stage of the manifest (no AWS call, no credentials), asks
pip to resolve the worker image's pins for the image's Python and platform
(:mod:`stacks.image`), lints each template with cfn-lint, and prints what a
deploy creates, the account quotas it needs, and what must be in place first. It
exits 1 on anything that would stop a deploy: pins that do not resolve, a
cfn-lint finding, a quota the manifest's own budget does not fit, a region
without the pinned layers.

The infra test tier runs the same report on the templates it synthesizes
(tests/infra/test_deploy_check.py), and the image's resolution
(tests/infra/test_image.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stacks.cloud import APPCONFIG_EXTENSION_LAYER
from switchyard.manifest import UNRESERVED_CONCURRENCY_MINIMUM, Manifest, load_manifest
from switchyard.quotas import (
    API_GATEWAY_RATE_DEFAULT,
    INSTANCE_VCPUS,
    LAMBDA_CONCURRENCY_DEFAULT,
    Quota,
    host_quota,
)


@dataclass
class StageReport:
    stage: str
    resources: dict[str, Counter[str]]  # stack -> resource type -> count
    quotas: list[Quota]
    lint: dict[str, list[str]]  # stack -> cfn-lint findings
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"== stage {self.stage}"]
        for stack, types in self.resources.items():
            out.append(f"{stack}: {sum(types.values())} resources")
            for kind, count in sorted(types.items(), key=lambda item: (-item[1], item[0])):
                out.append(f"  {count:4d}  {kind}")
        out.append("quotas:")
        out += [f"  {quota.line()}" for quota in self.quotas]
        for stack, findings in self.lint.items():
            out.append(f"cfn-lint {stack}: {len(findings)} findings")
            out += [f"  {finding}" for finding in findings]
        out += [f"PROBLEM: {problem}" for problem in self.problems]
        return out


def cfn_lint_findings(template: dict[str, Any], region: str) -> list[str]:
    """cfn-lint's findings on one template (every rule, warnings included), one line
    each: rule, message, where."""
    from cfnlint.api import ManualArgs, lint

    matches = lint(json.dumps(template), config=ManualArgs(regions=[region]))
    return [
        f"{match.rule.id} {match.message} (at {'/'.join(map(str, match.path))})"
        for match in matches
        if match.rule.id[0] in "EW"
    ]


def _resources(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        resource.get("Properties", {})
        for resource in template.get("Resources", {}).values()
        if resource.get("Type") == kind
    ]


def stage_quotas(
    manifest: Manifest, stage: str, templates: dict[str, dict[str, Any]]
) -> tuple[list[Quota], list[str]]:
    """The quotas a stage's templates need, and the problems that a deploy would
    meet with the manifest's own figures."""
    budget = manifest.stages[stage].concurrency  # type: ignore[index]
    problems: list[str] = []
    functions = [f for t in templates.values() for f in _resources(t, "AWS::Lambda::Function")]
    reserved = sum(int(f.get("ReservedConcurrentExecutions", 0)) for f in functions)
    unreserved = sum(1 for f in functions if "ReservedConcurrentExecutions" not in f)
    # Pooled models' routers reserve nothing unless pooled_predict is set: they share
    # what the reservations leave of the account's concurrency.
    sharing = sum(1 for s in manifest.models.values() if budget.router_reservation(s) is None)
    shared = f", {sharing} of them pooled models' routers" if sharing else ""
    quotas = [
        Quota(
            "Lambda concurrent executions",
            "L-B99A9384",
            reserved + UNRESERVED_CONCURRENCY_MINIMUM,
            LAMBDA_CONCURRENCY_DEFAULT,
            f"{reserved} reserved by {len(functions) - unreserved} functions, plus Lambda's "
            f"unreserved minimum for the other {unreserved}{shared} (the manifest assumes "
            f"account_limit {budget.account_limit}, which leaves them "
            f"{budget.account_limit - reserved})",
        ),
        Quota(
            "API Gateway throttle rate per account and region (requests/s)",
            "L-8A5B8E43",
            int(budget.throttle_rate),
            API_GATEWAY_RATE_DEFAULT,
            f"the stage's throttle_rate (burst {budget.throttle_burst})",
        ),
    ]
    if reserved + UNRESERVED_CONCURRENCY_MINIMUM > budget.account_limit:
        problems.append(
            f"Lambda: {reserved} reserved leaves less than {UNRESERVED_CONCURRENCY_MINIMUM} "
            f"of account_limit {budget.account_limit}"
        )
    keys = sum(len(_resources(t, "AWS::ApiGateway::ApiKey")) for t in templates.values())
    plans = sum(len(_resources(t, "AWS::ApiGateway::UsagePlan")) for t in templates.values())
    quotas.append(
        Quota(
            "API Gateway usage plans per account and region",
            None,
            plans,
            300,
            f"one per tier; and {keys} API keys (one per tenant, of 10,000)",
        )
    )
    hosts: dict[tuple[str, str], tuple[int, list[str]]] = {}
    for template in templates.values():
        for group in _resources(template, "AWS::AutoScaling::AutoScalingGroup"):
            overrides = (
                group.get("MixedInstancesPolicy", {}).get("LaunchTemplate", {}).get("Overrides", [])
            )
            types = [o["InstanceType"] for o in overrides if "InstanceType" in o]
            unknown = [t for t in types if t not in INSTANCE_VCPUS]
            if not types or unknown:
                problems.append(
                    f"hosts of types {types or '?'}: vCPUs unknown for {unknown or types} "
                    "(add them to switchyard.quotas.INSTANCE_VCPUS)"
                )
                continue
            vcpus = int(group["MaxSize"]) * max(INSTANCE_VCPUS[t] for t in types)
            key = host_quota(types)
            count, seen = hosts.get(key, (0, []))
            hosts[key] = (count + vcpus, seen + types)
    for (name, code), (vcpus, types) in hosts.items():
        quotas.append(
            Quota(
                name,
                code,
                vcpus,
                None,
                f"every worker host at once ({', '.join(dict.fromkeys(types))})"
                + ("; a new account often has 0 of it" if code == "L-DB2E81BA" else ""),
            )
        )
    return quotas, problems


def stage_report(
    manifest: Manifest, stage: str, templates: dict[str, dict[str, Any]]
) -> StageReport:
    """What a deploy of ``stage`` creates, needs, and what cfn-lint finds in it."""
    region = manifest.platform.region
    resources = {
        stack: Counter(r.get("Type", "?") for r in template.get("Resources", {}).values())
        for stack, template in templates.items()
    }
    lint = {stack: cfn_lint_findings(template, region) for stack, template in templates.items()}
    quotas, problems = stage_quotas(manifest, stage, templates)
    problems += [f"cfn-lint: {len(found)} findings in {s}" for s, found in lint.items() if found]
    return StageReport(stage, resources, quotas, lint, problems)


def prerequisites(manifest: Manifest) -> tuple[list[str], list[str]]:
    """What must be in place before `cdk deploy` (lines), and what is missing for
    this manifest whatever the machine (problems)."""
    region = manifest.platform.region
    lines = [
        "Docker with buildx, able to build linux/amd64 images: `cdk deploy` builds the "
        "worker image (gpu_workers/Dockerfile) and pushes it"
        + ("" if shutil.which("docker") else " (no docker on this machine)"),
        "Node.js >= 20 and `npm ci` (the CDK CLI pinned in package.json)",
        f"`npx cdk bootstrap aws://<account>/{region}`: its bucket holds the Lambda "
        "assets, its ECR repository the worker image",
        "AWS credentials for the account, allowed to deploy CloudFormation stacks",
        "the EC2 vCPU quotas above, raised in Service Quotas before the first GPU host starts",
    ]
    problems = []
    layer = APPCONFIG_EXTENSION_LAYER.get(region)
    if layer:
        lines.append(f"region {region}: the AppConfig extension layer is pinned ({layer})")
    else:
        problems.append(
            f"region {region}: no pinned AppConfig extension layer (pinned for "
            f"{', '.join(sorted(APPCONFIG_EXTENSION_LAYER))}); deploy with "
            "`-c appconfig_extension_arn=<the layer's ARN in that region>`"
        )
    return lines, problems


def synthesize(manifest: Manifest, stage: str, outdir: Path) -> dict[str, dict[str, Any]]:
    """The stage's templates as `cdk synth -c stage=<stage>` writes them (cdk-nag
    included), by stack name."""
    from aws_cdk import App, Validations
    from cdk_nag import AwsSolutionsChecks

    from stacks.app import add_platform, app_context

    app = App(context=app_context(stage=stage), outdir=str(outdir))
    platform = add_platform(app, manifest)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    assembly = app.synth()
    return {
        stack.stack_name: assembly.get_stack_by_name(stack.stack_name).template
        for stack in (platform.data, platform.models, platform.serving)
    }


def main(argv: list[str] | None = None) -> int:
    from stacks.assets import MANIFEST_FILE
    from stacks.image import ImageUnresolvable, image_target, resolve

    parser = argparse.ArgumentParser(prog="python -m stacks.deploy_check", description=__doc__)
    parser.add_argument("--manifest", default=str(MANIFEST_FILE))
    parser.add_argument("--stage", action="append", help="a stage (default: every stage)")
    args = parser.parse_args(argv)
    manifest = load_manifest(args.manifest)
    problems: list[str] = []
    target = image_target()
    try:
        packages = resolve(target)
        print(f"== worker image: {len(packages)} packages resolve for {target.describe()}")
    except ImageUnresolvable as exc:
        print(f"== worker image\n{exc}")
        problems.append("the worker image's pins do not resolve")
    with tempfile.TemporaryDirectory(prefix="switchyard-deploy-check-") as scratch:
        for stage in args.stage or list(manifest.stages):
            templates = synthesize(manifest, stage, Path(scratch) / stage)
            report = stage_report(manifest, stage, templates)
            print("\n".join(report.lines()))
            problems += [f"{stage}: {p}" for p in report.problems]
    needed, missing = prerequisites(manifest)
    print("== before `cdk deploy`")
    print("\n".join(f"  {line}" for line in needed))
    problems += missing
    if problems:
        print("== would stop a deploy\n" + "\n".join(f"  {p}" for p in problems))
        return 1
    print("== nothing found that would stop a deploy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
