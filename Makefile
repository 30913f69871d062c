# Two commands on a fresh machine (Python 3.10+ and pip):
#   make report   # all notebooks on the embedded demo world -> reports/*.html + reports/index.html
#   make test     # the whole test suite
# PARAMS=params/gpu-box.yaml make report   points the notebooks at real artifacts.
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.eagle3lib-installed

.PHONY: report test setup clean-reports

$(STAMP): pyproject.toml tools/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash tools/bootstrap.sh

setup: $(STAMP)

report: $(STAMP)
	$(VENV)/bin/python -m eagle3lib.report $(if $(PARAMS),-f $(PARAMS),)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

clean-reports:
	rm -rf reports
