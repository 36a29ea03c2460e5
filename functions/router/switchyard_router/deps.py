"""What the router app is built over: its services and stores, wired once per
process (``switchyard_router.wiring.build_deps``) and handed to every route."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.auth import TenantDirectory
from switchyard.engines import EngineBoard
from switchyard.generation import TokenStream
from switchyard.results import ResultStore
from switchyard_router.jobs_api import JobsApi
from switchyard_router.logic import PredictService
from switchyard_router.streaming import StreamHub


@dataclass
class RouterDeps:
    service: PredictService
    tenants: TenantDirectory
    max_body_bytes: int
    jobs: JobsApi | None = None  # batch jobs, where the router has the jobs table
    # Generation: the token streams workers write, and the results they end in.
    stream: TokenStream | None = None
    results: ResultStore | None = None
    hub: StreamHub | None = None  # reads every stream of this process together
    # Which engine runs each version, as its workers say (the protocol's ``platform``).
    engines: EngineBoard | None = None
