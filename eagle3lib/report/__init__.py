"""Reports: notebooks -> executed notebooks and HTML -> one index a team reads.

- `runner`    `python -m eagle3lib.report`: jupytext -> papermill -> nbconvert per notebook, atomic writes,
              partial output kept on failure.
- `params`    the notebooks' parameters: parameters cells, the YAML file (top level + notebook sections), the
              template, and what a file asks to exist first (`vllm_demo`, `sglang_demo`: shipped served deployments).
- `export`    a notebook -> one self-contained HTML page (template `templates/eagle3lib_offline`, nothing
              loaded from the network), its heading anchors, its index figure, finding -> evidence section.
- `static_widgets`  widget views -> static HTML of their saved state (the offline page has no kernel).
- `problems`  what stands between the notebooks and "no fault found": parameters that cannot be read (the
              notebook is not run), a notebook that stopped on an input or broke, core inputs not given; exit code.
- `index`     `reports/index.json` (data) and `reports/index.html`: this run's answer first, its notebooks, the
              stale rows of earlier runs (never combined); paths relative to the inputs.
- `page`      the index page's HTML: the answer (alarms whole, ruled out and not checked folded, layer names as
              the engines write them), the notebooks' rows, the stale rows; fits a 1400 px window.
- `readable`  a notebook's findings as the index shows them: short sentences and small tables.
- `findings`  `record(key, value)`: the headline findings a notebook leaves for the index.

A page opened as a reader offline does (the system Chromium under Playwright, network off) is test-only code:
tests/browser.py, used by tests/report/test_offline_html.py and tests/test_lab_e2e.py.
"""
