# Two commands on a fresh machine (Python 3.10+ and pip):
#   make report   # all notebooks on the embedded demo world -> reports/*.html + reports/index.html
#   make test     # the quick suite a newcomer runs to see the install works (one real report; times: docs/testing.md)
#   make test-all # the full suite: slow, planted, engine (what .ci/run runs; ~30 min on 2 cores)
# make report PARAMS=params/gpu-box.yaml   points the notebooks at real artifacts.
# make report REPORT_ARGS="--only 02 --timeout 600"   passes more options to python -m eagle3lib.report.
# make vllm     # the real vLLM in its own venv (.venv-vllm; CPU or CUDA build by nvidia-smi), for the engine tests
# make sglang   # the real SGLang in its own venv (.venv-sglang; the CPU build needs avx512_bf16 and Python 3.11)
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.eagle3lib-installed
TEST_STAMP := $(VENV)/.eagle3lib-test-installed
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.eagle3lib-vllm-installed
SGLANG_VENV ?= .venv-sglang
SGLANG_STAMP := $(SGLANG_VENV)/.eagle3lib-sglang-installed

.PHONY: report test test-all setup vllm sglang clean-reports

$(STAMP): pyproject.toml tools/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash tools/bootstrap.sh

setup: $(STAMP)

# the test-only peers (pytest, Playwright, SpecForge and speculators without their pins): tests and CI only
$(TEST_STAMP): $(STAMP)
	PYTHON=$(PYTHON) VENV=$(VENV) bash tools/bootstrap.sh --test

$(VLLM_STAMP): requirements/vllm-cpu.txt requirements/vllm-cuda.txt tools/bootstrap_vllm.sh
	PYTHON=$(PYTHON) VLLM_VENV=$(VLLM_VENV) bash tools/bootstrap_vllm.sh

vllm: $(VLLM_STAMP)

$(SGLANG_STAMP): requirements/sglang-cuda.txt tools/bootstrap_sglang.sh
	SGLANG_VENV=$(SGLANG_VENV) bash tools/bootstrap_sglang.sh

sglang: $(SGLANG_STAMP)

# GNU make exits 2 whatever code a recipe failed with: the recipe names eagle3lib's own code (0 ok, 1 a notebook broke,
# 2 the run could not start, 3 an input could not be read; docs/cli.md) before make's own line.
report: $(STAMP)
	@$(VENV)/bin/python -m eagle3lib.report $(if $(PARAMS),-f $(PARAMS),) $(REPORT_ARGS); rc=$$?; \
	if [ $$rc -ne 0 ]; then echo "eagle3lib report exit code $$rc (docs/cli.md, Exit codes); make reports any" \
	"failure as 2: run .venv/bin/python -m eagle3lib.report for the code itself" >&2; fi; exit $$rc

QUICK := (not slow and not engine) or e2e

test: $(TEST_STAMP)
	$(VENV)/bin/python -m pytest -q -m "$(QUICK)" $(PYTEST_ARGS)

test-all: $(TEST_STAMP)
	$(VENV)/bin/python -m pytest -q --durations=25 $(PYTEST_ARGS)

clean-reports:
	rm -rf reports
