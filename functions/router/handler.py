"""Lambda entry point: the router's FastAPI app behind Mangum.

Settings are read and the app is wired at init, so a missing or malformed
``SWITCHYARD_*`` variable fails the cold start with its name, not each request.

The collector is off while the init runs: the imports and the app make ~140,000
objects that live as long as the instance, and Python's cyclic collector traversed
them ~200 times on the way (~40 ms of a ~450 ms cold start). Once the app is built
they are frozen (the collector never looks at them again: no full collection pauses
a warm request to traverse them) and the collector is turned back on. What the init
left as garbage stays frozen with them (~0.7 MiB).
"""

import gc

gc.disable()

from mangum import Mangum  # noqa: E402

from switchyard.settings import RouterSettings, get_settings  # noqa: E402
from switchyard_router.app import create_app  # noqa: E402
from switchyard_router.wiring import build_deps  # noqa: E402

handler = Mangum(
    create_app(build_deps(get_settings(RouterSettings))),
    lifespan="off",
    api_gateway_base_path="/",
)
gc.freeze()
gc.enable()
