"""The diagnosis: every check's findings combined into one ranked answer.

- `combine`  `diagnose(findings, problems, not_given, undecided)` -> `Diagnosis`: per cause confirmed / conflict /
             suspected / ruled out / not checked, ranked; "no fault found" only on evidence (no unreadable input,
             the core inputs given, each given input deciding something); table, text and JSON views.
- `answer`   the answer read in 30 seconds, for the terminal and the index: alarms whole (one evidence line per
             check, the whole fix), the causes ruled out by name, those not checked by the input (flag and YAML
             key) that would check them; wrapped to the terminal's width, never cut.
- `decision` the seed's decision, first: the training samples (recorded, replayed as shipped, restored), held-out
             samples, served traffic, served τ against the replay's prediction, and the verdict (wiring/loading,
             generalization gap, ceiling, healthy, or not checked naming the input); its text, markdown and HTML.
- `parts`    the notebooks' checks (00 artifacts, 01 serving settings, 02 replay, 03 hidden states) on one set of
             artifacts, through the same step functions; every given input read first (`steps.given`), one that
             cannot be read a problem no part sees; a missing input narrows, never fails.
- `cli`      `python -m eagle3lib.diagnose --draft D --target T [--train-data] [--launch] [--server-log]
             [--serving-dump] [--json FILE] ...`; exit code 0 read, 1 broke, 2 arguments, 3 an input unreadable.
"""
