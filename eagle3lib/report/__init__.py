"""Reports: notebooks -> executed notebooks and HTML -> one index a team reads.

- `runner`    `python -m eagle3lib.report`: jupytext -> papermill -> nbconvert per notebook, atomic writes,
              partial output kept on failure; parameters from YAML.
- `index`     `reports/index.json` (data) and `reports/index.html`.
- `readable`  a notebook's findings as the index shows them: short sentences and small tables.
- `findings`  `record(key, value)`: the headline findings a notebook leaves for the index.
"""
