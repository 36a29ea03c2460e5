"""Lambda entry point: the router's FastAPI app behind Mangum."""

from mangum import Mangum

from switchyard_router.app import app

handler = Mangum(app, lifespan="off", api_gateway_base_path="/")
