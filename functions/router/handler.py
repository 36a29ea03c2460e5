"""Lambda entry point: the router's FastAPI app behind Mangum.

Settings are read and the app is wired at init, so a missing or malformed
``SWITCHYARD_*`` variable fails the cold start with its name, not each request.
The init runs with the cyclic collector held off (``init_phase``).
"""

from switchyard.init_phase import init_phase

with init_phase():
    from mangum import Mangum

    from switchyard.settings import RouterSettings, get_settings
    from switchyard_router.app import create_app
    from switchyard_router.wiring import build_deps

    handler = Mangum(
        create_app(build_deps(get_settings(RouterSettings))),
        lifespan="off",
        api_gateway_base_path="/",
    )
