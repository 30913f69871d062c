"""What each notebook calls: a notebook's parameters resolved once into the case (empty path = the demo world's
artifact is decided there and only there), then the library called in the notebook's order. Each notebook's step
module has `run(case, earlier) -> Part`: the notebook displays the part, the diagnosis loops over the parts.

- `part`       `Inputs` (what every investigation is given, one set) and `Part` (its findings, tables, figures,
  notes, problems and the results they were made from).
- `case`       `Case`, `case_of(inputs)`: the inputs resolved once (the demo world fills what is empty only when
  no draft is given), the one object every part, notebook and the diagnosis take; each step's `run` is
  `reads_once`: it runs inside the case's reads (`Case.reading`), so a notebook reads each input once too; so does
  each step a notebook calls beside its part (notebook 00's audit, layer table and preview, 01's corrected command,
  02's position accuracy and token view): a notebook holds no `with` block of its own.
- `order`      the notebooks and their parts in order, written once (`NOTEBOOKS`, `PARTS`): what the diagnosis
  loops over (a part marked `diagnosed=False` only its notebook runs: 00, whose checks part 01 runs in the
  diagnosis with the engine, and 04, which decides no cause).

- `given`      every input a user gives, read once before use: one that cannot be read is a `Problem` naming
  the parameter, the path or text, the error and what was expected (the diagnosis and the report runner).
- `checkpoint_audit` notebook 00: the artifact checks, and the forward preview on one training sample (when given).
- `discovery`  notebook 01: everything shown for one launch command, from every source given.
- `served_prediction` notebook 01 §11 and the diagnosis: each served τ beside the replay under the setting it ran
  (a vLLM deployment: beside the draft replayed as trained and as the engine loads it).
- `served_view` the draft as the serving engine loads it: the tables, overruled by what the running engine said as
  its home reads it (`EngineHome.said`: the vLLM probe and log, SGLang's log and its hook's load).
- `sample_replay` notebook 02: the draft replayed on its training and held-out samples under each layout there is
  evidence of, its verdicts and searches.
- `trained_config` notebook 02 and the diagnosis: is the shipped config what was trained? (the counterfactual
  search with the target's / training config's values as candidates).
- `diffing`    notebook 03: training slots and a serving dump compared with the target's own boundaries.
- `throughput_runs` notebook 04: the served runs read from the files / server given (the seed's sample log only
  on the demo world), the demo engine's sweep and its chain-vs-tree replay and timing only when asked
  (`run_demo_sweep`), as tables and figures (a part with no finding: it decides no cause).
"""
