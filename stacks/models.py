"""Each model's queues and alarms: a stack of their own, deployed before the serving
stack.

CloudFormation takes at most 500 resources in a stack. A model's queues (two lanes,
each with its DLQ and their policies) and its alarms (on its queues and on the
routers' metrics) are about half of its endpoint and need nothing of the serving
stack, so they live here, and the serving stack holds twice the models it could
alone (docs/deploying.md, "Pools" has the figures). The serving stack refers to
them by their names, which are fixed (``ResourceNames``; ``queues.NamedQueues``,
``observability.NamedAlarms``), not through CloudFormation exports: a model taken
out of the manifest leaves no export that the serving stack still imports, which
would stop the deploy.
"""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.cloud import Deployment
from stacks.observability import ModelAlarms
from stacks.queues import MadeQueues


class ModelsStack(Stack):
    """Every model's queues and alarms, as the manifest lists its models."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.queues: dict[str, MadeQueues] = {}
        self.alarms: dict[str, ModelAlarms] = {}
        for model, spec in deployment.manifest.models.items():
            scope_of_model = Construct(self, f"Model-{model}")
            self.queues[model] = MadeQueues(
                scope_of_model, "Queues", deployment=deployment, model=model, spec=spec
            )
            self.alarms[model] = ModelAlarms(
                scope_of_model,
                "Alarms",
                deployment=deployment,
                model=model,
                spec=spec,
                queues=self.queues[model],
            )
