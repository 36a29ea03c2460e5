"""One model's whole endpoint, instantiated once per manifest entry, and what every
worker service (a model's own or a pool's) is given: its environment and access."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.api import Api
from stacks.cloud import (
    APPCONFIG_POLL_SECONDS,
    ROUTER_MEMORY_MB,
    WORKER_READY_FILE,
    Deployment,
)
from stacks.compute import Compute, ServiceWork, WorkerService
from stacks.configuration import ModelRouting, RoutingConfiguration
from stacks.data import (
    WORKER_RESULTS_ACTIONS,
    PredictionLog,
    Storage,
    grant_items,
    grant_objects,
    grant_registry_read,
    grant_router_reads,
)
from stacks.functions import FunctionCode, PlatformFunction, settings_environment
from stacks.models import ModelsStack
from stacks.observability import ModelDashboard, NamedAlarms, PoolView
from stacks.queues import ModelQueues, NamedQueues
from switchyard.manifest import MODEL_TAG, ModelSpec
from switchyard.settings import RouterSettings, WorkerSettings

# Why routers may read and write any object of these buckets (cdk-nag's IAM5).
PAYLOADS_REASON = (
    "Claim-check payloads are keyed by request id, made per request; the router "
    "writes large inputs and reads large outputs."
)
ARTIFACTS_READ_REASON = (
    "A generation model's router counts prompt tokens with the tokenizer.json of the "
    "version it routes to, read where the registry says (beside the artifact, checked "
    "by sha256); versions, and so keys, are registered after deploy."
)


def generates(spec: ModelSpec) -> bool:
    """A generative model: its router streams tokens and serves /generate."""
    return spec.generates


@dataclass(frozen=True)
class SharedServing:
    """What every endpoint plugs into: the API, the cluster, AppConfig, code, state."""

    api: Api
    compute: Compute
    configuration: RoutingConfiguration
    code: FunctionCode
    storage: Storage
    prediction_log: PredictionLog


def worker_environment(
    scope: Construct,
    *,
    deployment: Deployment,
    shared: SharedServing,
    queues: Mapping[str, ModelQueues],
    **service: Any,
) -> dict[str, str]:
    """A worker service's environment (``WorkerSettings``): the queues of every model
    it serves, and ``service``, whose it is (``worker_model`` for a model's own;
    ``worker_pool``, ``worker_models`` and the pool's budgets for a pool)."""
    storage = shared.storage
    return {
        **settings_environment(
            scope,
            WorkerSettings,
            deployment=deployment,
            storage=storage,
            queues={model: model_queues.urls() for model, model_queues in queues.items()},
            service="worker",
            artifacts_bucket=storage.artifacts_bucket.bucket_name,
            prediction_log_stream=shared.prediction_log.stream_name,
            ready_file=WORKER_READY_FILE,
            jobs_table=storage.jobs_table.table_name,
            cost_rates=deployment.manifest.cost_rates(
                service.get("worker_pool") or service["worker_model"]
            ).model_dump(),
            **deployment.manifest.worker_settings_values(),
            **service,
        ),
        "HF_HUB_OFFLINE": "1",
    }


def grant_worker(
    role: iam.IRole,
    *,
    deployment: Deployment,
    shared: SharedServing,
    queues: Mapping[str, ModelQueues],
    generates: bool,
) -> None:
    """What a worker service's tasks may do: take the work of the queues of the
    models it serves (no other model's), and read and write what a worker does."""
    storage = shared.storage
    names = deployment.names
    for model_queues in queues.values():
        for queue in model_queues.queues.values():
            queue.grant_consume_messages(role)  # receive, delete, change visibility
    grant_registry_read(storage.registry_table, role)
    grant_items(storage.results_table, role)
    storage.results_table.grant(role, *WORKER_RESULTS_ACTIONS)
    if generates:
        # A worker that takes over a stream whose worker died reads the tokens
        # already written (the request's chunk items, in order, with a Query).
        storage.results_table.grant(role, "dynamodb:Query")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["firehose:PutRecord", "firehose:PutRecordBatch"],
            resources=[shared.prediction_log.stream_arn],
        )
    )
    grant_objects(
        names.payloads_bucket,
        role,
        ["s3:GetObject", "s3:PutObject"],
        "Workers read claim-checked inputs and write large outputs under per-request "
        "keys of the payloads bucket.",
    )
    # Batch jobs: a chunk's result is counted on its job (one transaction), and
    # the worker that answers a job's last chunk writes its output beside its file.
    grant_items(storage.jobs_table, role)
    grant_objects(
        names.batch_drop_bucket,
        role,
        ["s3:PutObject", "s3:AbortMultipartUpload"],
        "A job's output is written beside its dropped file (<key>.out), under the "
        "tenant's prefix the file came from.",
    )
    grant_objects(
        names.artifacts_bucket,
        role,
        ["s3:GetObject"],
        "Workers load any registered version's artifact; the registry holds its key "
        "and sha256, checked at load.",
    )


class ModelEndpoint(Construct):
    """Queues, router function, routing profile, worker service, alarms and
    dashboard of one model (its queues and alarms made in the models stack,
    ``stacks.models``). Adding a model to the manifest adds all of them. A
    model that names a pool has no worker service of its own: the pool's serves
    it (``stacks.pools.PoolWorkers``), and its dashboard comes with the pool's
    (:meth:`add_dashboard`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        model: str,
        spec: ModelSpec,
        shared: SharedServing,
        models: ModelsStack,
    ) -> None:
        super().__init__(scope, construct_id)
        storage = shared.storage
        names = deployment.names
        budget = deployment.settings.concurrency
        # Its queues and alarms are the models stack's, found here by their names.
        self.queues: ModelQueues = NamedQueues(self, "Queues", deployment=deployment, model=model)
        self.alarms = NamedAlarms(self, "Alarms", alarms=models.alarms[model])
        self.routing = ModelRouting(
            self,
            "Routing",
            deployment=deployment,
            configuration=shared.configuration,
            model=model,
            spec=spec,
            canary_alarms=self.alarms.canary,
        )
        own_queues = {model: self.queues.urls()}
        # A generation model's router streams (its every route: see RouterServing).
        self.generates = generates(spec)
        serving = shared.code.router_serving(stream=self.generates)

        self.router = PlatformFunction(
            self,
            "Router",
            deployment=deployment,
            code=shared.code.router,
            description=f"Switchyard router for {model}: validate, route, enqueue, wait",
            environment={
                **settings_environment(
                    self,
                    RouterSettings,
                    deployment=deployment,
                    storage=storage,
                    queues=own_queues,
                    service="router",
                    tenant_keys=shared.api.tenant_keys,
                    routing_source="appconfig-extension",
                    appconfig_application=deployment.names.appconfig_application,
                    appconfig_environment=self.routing.environment_name,
                    **deployment.manifest.router_settings_values(),
                ),
                "AWS_APPCONFIG_EXTENSION_PREFETCH_LIST": self.routing.extension_path,
                "AWS_APPCONFIG_EXTENSION_POLL_INTERVAL_SECONDS": str(APPCONFIG_POLL_SECONDS),
                **serving.environment,
            },
            layers=[shared.code.core_layer, shared.code.appconfig_extension, *serving.layers],
            handler=serving.handler,
            timeout=serving.timeout,
            memory_size=ROUTER_MEMORY_MB,
            # None for a pooled model's router while pooled_predict is unset: no
            # reservation (the account's unreserved share), never 0, which stops it.
            reserved_concurrency=budget.router_reservation(spec),
        )
        router_role = self.router.role
        for queue in self.queues.queues.values():
            queue.grant_send_messages(router_role)
        grant_registry_read(storage.registry_table, router_role)
        grant_items(storage.results_table, router_role)
        grant_router_reads(storage.results_table, router_role)
        self.routing.grant_read(router_role)
        grant_objects(
            names.payloads_bucket, router_role, ["s3:GetObject", "s3:PutObject"], PAYLOADS_REASON
        )
        shared.api.add_predict_route(model, spec, self.router.function, stream=serving.stream)
        if self.generates:
            # Streamed tokens are chunk items beside the request's result, read in
            # order with a Query, or each stream's next chunk by its key with one
            # BatchGetItem; prompts are counted with the version's tokenizer.
            storage.results_table.grant(router_role, "dynamodb:Query", "dynamodb:BatchGetItem")
            grant_objects(
                names.artifacts_bucket, router_role, ["s3:GetObject"], ARTIFACTS_READ_REASON
            )
            shared.api.add_generate_route(model, self.router.function)

        self.deployment, self.model, self.spec = deployment, model, spec
        self.worker: WorkerService | None = None
        if spec.pool is not None:
            return
        own = {model: self.queues}
        self.worker = WorkerService(
            self,
            "Worker",
            deployment=deployment,
            compute=shared.compute,
            service=model,
            compute_class=spec.compute,
            capacity=shared.compute.capacity[spec.compute],
            policy=deployment.scaling_policy(model),
            work=ServiceWork.of_model(model, self.queues),
            environment=worker_environment(
                self, deployment=deployment, shared=shared, queues=own, worker_model=model
            ),
            tag=(MODEL_TAG, model),
        )
        grant_worker(
            self.worker.task_definition.task_role,
            deployment=deployment,
            shared=shared,
            queues=own,
            generates=self.generates,
        )
        self.add_dashboard(self.worker.service)

    def add_dashboard(self, service: ecs.BaseService, pool: PoolView | None = None) -> None:
        """The model's dashboard, with the tasks of the service that serves it (its
        own, or its pool's, with a row for the pool)."""
        ModelDashboard(
            self,
            "Dashboard",
            deployment=self.deployment,
            model=self.model,
            spec=self.spec,
            queues=self.queues,
            service=service,
            alarms=self.alarms,
            pool=pool,
        )
