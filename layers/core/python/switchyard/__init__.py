"""Switchyard's shared core: schemas, registry and results access, queue protocol,
routing and settings. Deployed once as a Lambda layer and imported by the router
function, the workers and the local platform alike. Nothing here imports torch."""

SCHEMA_VERSION = 1
