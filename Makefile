# Two commands on a fresh machine (Python 3.10+ and pip):
#   make report   # all notebooks on the embedded demo world -> reports/*.html + reports/index.html
#   make test     # the whole test suite
# make report PARAMS=params/gpu-box.yaml   points the notebooks at real artifacts.
# make report REPORT_ARGS="--only 02 --timeout 600"   passes more options to python -m eagle3lib.report.
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.eagle3lib-installed

.PHONY: report test setup clean-reports

$(STAMP): pyproject.toml tools/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash tools/bootstrap.sh

setup: $(STAMP)

report: $(STAMP)
	$(VENV)/bin/python -m eagle3lib.report $(if $(PARAMS),-f $(PARAMS),) $(REPORT_ARGS)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

clean-reports:
	rm -rf reports
