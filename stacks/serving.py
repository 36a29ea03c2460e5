"""What serves requests: API, functions, AppConfig, cluster, one endpoint per model,
and the functions behind the routes that belong to no one model."""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.api import Api
from stacks.batch import BatchIngest
from stacks.cloud import ROUTER_MEMORY_MB, ROUTER_TIMEOUT, Deployment
from stacks.compute import Compute
from stacks.configuration import EveryModelRouting, RoutingConfiguration
from stacks.data import (
    DataStack,
    grant_budget_reads,
    grant_items,
    grant_objects,
    grant_registry_read,
)
from stacks.endpoint import (
    ARTIFACTS_READ_REASON,
    PAYLOADS_REASON,
    ModelEndpoint,
    SharedServing,
)
from stacks.functions import FunctionCode, PlatformFunction, settings_environment
from stacks.models import ModelsStack
from stacks.observability import BudgetAlarms
from stacks.pools import PoolWorkers
from stacks.queues import every_models_queues
from switchyard.manifest import Manifest
from switchyard.settings import RouterSettings


class ServingStack(Stack):
    """Stateless side of one stage; reads and writes the data stack's resources."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        data: DataStack,
        models: ModelsStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        # The models' queues and alarms are found by name: deployed first.
        self.add_stack_dependency(models)
        storage = data.storage
        code = FunctionCode(self, "Code", deployment=deployment)
        self.shared = SharedServing(
            api=Api(self, "Api", deployment=deployment, authorizer_code=code.key_authorizer),
            compute=Compute(self, "Compute", deployment=deployment),
            configuration=RoutingConfiguration(self, "Routing", deployment=deployment),
            code=code,
            storage=storage,
            prediction_log=data.prediction_log,
        )
        self.endpoints = {
            model: ModelEndpoint(
                self,
                f"Model-{model}",
                deployment=deployment,
                model=model,
                spec=spec,
                shared=self.shared,
                models=models,
            )
            for model, spec in deployment.manifest.models.items()
        }
        # A pool's service serves the models that name it; each of them shows the
        # pool's tasks and a row for the pool on its dashboard.
        manifest = deployment.manifest
        self.pools = {
            pool: PoolWorkers(
                self,
                f"Pool-{pool}",
                deployment=deployment,
                pool=pool,
                spec=spec,
                shared=self.shared,
                queues={m: self.endpoints[m].queues for m in manifest.pool_models(pool)},
                overflow_queues={
                    m: self.endpoints[m].queues for m in manifest.overflow_models(pool)
                },
            )
            for pool, spec in manifest.pools.items()
        }
        for model in manifest.models:
            pool_name = manifest.models[model].pool
            if pool_name is not None:
                pool_workers = self.pools[pool_name]
                self.endpoints[model].add_dashboard(pool_workers.worker.service, pool_workers.view)
        self.routing = EveryModelRouting(
            deployment, [endpoint.routing for endpoint in self.endpoints.values()]
        )
        self.requests = self._requests_function(deployment)
        self.budget_alarms = BudgetAlarms(self, "Budgets", deployment=deployment)
        self.openai = self._openai_function(deployment)
        self._update_workers_first(manifest)
        self.batch = BatchIngest(
            self,
            "Batch",
            deployment=deployment,
            code=self.shared.code,
            storage=storage,
            queues={model: endpoint.queues for model, endpoint in self.endpoints.items()},
            routing=self.routing,
        )
        # Whoever ends a job asks the splitter, through its queue, for the job's
        # callback: the workers (a job's last chunk) and the jobs API (a cancel).
        self.batch.takes_job_ends_from(self.requests.function, self.requests.role)
        workers = [e.worker for e in self.endpoints.values() if e.worker is not None]
        workers += [pool.worker for pool in self.pools.values()]
        for worker in workers:
            self.batch.takes_job_ends_from(worker.container, worker.task_definition.task_role)

    def _update_workers_first(self, manifest: Manifest) -> None:
        """A function that sends a model's work is updated only once every worker
        service that reads the model's queues is (its own, its pool's, a CPU pool's
        that takes it on overflow): the model's router after those, the OpenAI and
        Open Inference Protocol function after every one. An ECS service's update
        ends when its old tasks are gone, and a rollback undoes the functions first.
        So a message form that a release's routers start to send (a tensor's rows as
        one block of numbers, ``QueueMessage.tensor``) never reaches a worker of the
        release before, which would refuse it."""
        every = []
        for model, endpoint in self.endpoints.items():
            readers = [endpoint.worker] if endpoint.worker is not None else []
            readers += [
                pool.worker
                for name, pool in self.pools.items()
                if name == manifest.models[model].pool or model in manifest.overflow_models(name)
            ]
            for reader in readers:
                endpoint.router.function.node.add_dependency(reader.service)
            every += [r for r in readers if r not in every]
        for reader in every:
            self.openai.function.node.add_dependency(reader.service)

    def _requests_function(self, deployment: Deployment) -> PlatformFunction:
        """The router app for routes that belong to no one model: the catalog, async
        status and batch jobs. It sends nothing; it knows every model's queues only to
        list them, and reads every model's routing document to run a job on the
        model's stable version."""
        storage = self.shared.storage
        names = deployment.names
        function = PlatformFunction(
            self,
            "Requests",
            deployment=deployment,
            code=self.shared.code.router,
            description="Switchyard router for GET /v1/models and /v1/requests/{id}",
            environment=settings_environment(
                self,
                RouterSettings,
                deployment=deployment,
                storage=storage,
                **every_models_queues(self, deployment, self.endpoints),
                service="router",
                tenant_keys=self.shared.api.tenant_keys,
                jobs_table=storage.jobs_table.table_name,
                batch_drop_bucket=storage.batch_drop_bucket.bucket_name,
                **self.routing.settings,
                **deployment.manifest.router_settings_values(),
            )
            | self.routing.environment,
            layers=[self.shared.code.core_layer, self.shared.code.appconfig_extension],
            timeout=ROUTER_TIMEOUT,
            memory_size=ROUTER_MEMORY_MB,
            reserved_concurrency=deployment.settings.concurrency.jobs,
        )
        grant_registry_read(storage.registry_table, function.role)
        self.routing.grant_read(function.role)
        # Async status reads results; a job submitted with an Idempotency-Key claims
        # the key's item in the results table (a conditional put) and gives it back
        # (an update) if the job is not recorded (switchyard.idempotency).
        grant_items(storage.results_table, function.role)
        grant_budget_reads(storage.results_table, function.role, deployment.manifest)
        grant_objects(
            names.payloads_bucket,
            function.role,
            ["s3:GetObject"],
            "Async status returns claim-checked outputs stored under per-request keys.",
        )
        # Batch jobs: kept in the jobs table; submitted inputs become a file in the
        # drop bucket under the tenant's prefix (its notification starts the split).
        grant_items(storage.jobs_table, function.role)
        # GET /v1/jobs: a tenant's jobs are one partition of the table.
        storage.jobs_table.grant(function.role, "dynamodb:Query")
        grant_objects(
            names.batch_drop_bucket,
            function.role,
            ["s3:GetObject", "s3:PutObject"],
            "A tenant's submitted inputs are written as a file under its own prefix, and a "
            "submitted file's size and ETag are read there (HeadObject).",
        )
        self.shared.api.add_platform_routes(function.function)
        return function

    def _openai_function(self, deployment: Deployment) -> PlatformFunction:
        """The router app for the OpenAI-compatible API (``/openai/v1``) and the Open
        Inference Protocol v2 (``/v2``): the model is named in each body (or path),
        so one function serves every model, with each model's
        realtime queue, routing document and results (streamed chunks included).
        Streamed through the Lambda Web Adapter, like a generation model's router."""
        storage = self.shared.storage
        code = self.shared.code
        names = deployment.names
        serving = code.router_serving(stream=True)
        function = PlatformFunction(
            self,
            "OpenAI",
            deployment=deployment,
            code=code.router,
            description="Switchyard router for the OpenAI-compatible API under /openai/v1",
            environment={
                **settings_environment(
                    self,
                    RouterSettings,
                    deployment=deployment,
                    storage=storage,
                    **every_models_queues(self, deployment, self.endpoints),
                    service="router",
                    tenant_keys=self.shared.api.tenant_keys,
                    **self.routing.settings,
                    **deployment.manifest.router_settings_values(),
                ),
                **self.routing.environment,
                **serving.environment,
            },
            layers=[code.core_layer, code.appconfig_extension, *serving.layers],
            handler=serving.handler,
            timeout=serving.timeout,
            memory_size=ROUTER_MEMORY_MB,
            reserved_concurrency=deployment.settings.concurrency.openai,
        )
        role = function.role
        # Synchronous and streamed requests only: the realtime lane of every model.
        self.routing.grant_read(role)
        for endpoint in self.endpoints.values():
            endpoint.queues.realtime.grant_send_messages(role)
        grant_registry_read(storage.registry_table, role)
        # Requests recorded as queued, their results read, and a generation's streamed
        # chunks read in order (a Query over the request's chunk keys, or every
        # stream's next chunk by its key in one BatchGetItem).
        grant_items(storage.results_table, role)
        storage.results_table.grant(role, "dynamodb:Query", "dynamodb:BatchGetItem")
        grant_objects(
            names.payloads_bucket, role, ["s3:GetObject", "s3:PutObject"], PAYLOADS_REASON
        )
        grant_objects(names.artifacts_bucket, role, ["s3:GetObject"], ARTIFACTS_READ_REASON)
        self.shared.api.add_openai_routes(function.function)
        # The Open Inference Protocol v2 names its model in the path, any model.
        self.shared.api.add_protocol_routes(function.function)
        return function
