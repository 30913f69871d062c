"""The diagnosis: every check's findings combined into one ranked answer.

- `combine`  `diagnose(findings)` -> `Diagnosis`: per cause confirmed / conflict / suspected / ruled out /
             not checked, ranked; "no fault found" on a healthy run; table, text and JSON views.
- `run`      the notebooks' checks (00 artifacts, 01 serving settings, 02 replay, 03 hidden states) on one set of
             artifacts, through the same step functions; a missing input narrows, never fails.
- `cli`      `python -m eagle3lib.diagnose --draft D --target T [--data] [--launch] [--log] [--dump] ...`.
"""
