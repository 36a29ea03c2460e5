#!/bin/sh
# The router function's command under the AWS Lambda Web Adapter (the functions
# that stream: generation and the OpenAI-compatible API). The adapter forwards
# each API Gateway event to this server as HTTP and streams the response back.
export PYTHONPATH="${LAMBDA_TASK_ROOT:-/var/task}:/opt/python${PYTHONPATH:+:$PYTHONPATH}"
exec python -m uvicorn --factory switchyard_router.served:create_served_app \
    --host 127.0.0.1 --port "${PORT:-8080}" --no-access-log
