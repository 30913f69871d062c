"""What one investigation hands on: its inputs (`Inputs`, one set for every notebook and the diagnosis) and its
result (`Part`: the findings, the tables and figures a notebook shows, and what they were made from).

Each notebook's step module has `run(case, earlier) -> Part` (`steps.case`: the inputs resolved once); the notebook displays the part, the diagnosis
(`eagle3lib.diagnose.parts`) loops over `steps.order.PARTS` and keeps each part's findings. `earlier` holds the
parts already run, by name (a part that needs another's result reads it there, e.g. the served runs need the
discovered serving settings).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..causes import Finding, findings_frame


@dataclass(frozen=True)
class Inputs:
    """What the investigations are given (paths as strings; "" = not given). The first block is what
    ``python -m eagle3lib.diagnose`` takes (one flag per field); the second holds the notebooks' own settings,
    whose defaults are what the diagnosis runs with."""
    draft: str = ""
    target: str = ""
    train_data: str = ""
    heldout_data: str = ""
    launch: str = ""
    sglang_version: str = ""
    server_log: str = ""
    served_log: str = ""
    served_traffic: str = ""
    server_url: str = ""
    serving_dump: str = ""
    serving_layout: str = ""
    serving_engine: str = ""
    recorded_acc: float = -1.0
    training_log: str = ""
    n: int = 32
    num_steps: int = 3
    drift_samples: int = 4
    device: str = "cpu"
    dtype: str = "float32"
    # notebooks' settings (not flags of the diagnosis)
    fixed_command: str = ""            # 01: a corrected command to compare with (narrative only)
    server_info: str = ""              # 01: a saved /server_info JSON (else server_url is asked)
    served_data: str = ""              # 01: samples of the prompts the served τ was measured on ("" = heldout)
    train_format: str = ""             # 02: the training data's format ("" = detect)
    new_prompt_data: str = ""          # 02: samples of new / served prompts
    serving_version: str = ""          # 02: the serving engine's version for its capture rules ("" = sglang_version)
    n_search: int = 8                  # 02: samples per candidate of the layout search
    seed: int = 0                      # 02: the sample draw
    recapture: bool = True             # 02: the target model may capture other layers (the trained layout)
    search_recapture: bool = False     # 02: ... and the layout search's candidates
    sample_index: int = 0              # 03: the training sample compared
    dump_request: int = 0              # 03: the dumped request compared
    proof_samples: int | None = None   # 03: samples replayed for the proof of fix (None: n, at most 16)
    served_samples: int | None = None  # 01: samples per served-vs-replay prediction (None: n, at most 16)
    target_dtype: str = ""             # 03: the target's dtype for the reference capture ("" = as it loads)
    run_demo_sweep: bool = False       # 04: measure the demo engine over sweep_num_steps, correct vs seed capture
    sweep_num_steps: tuple[int, ...] = (1, 2, 3, 4, 6)   # 04: draft steps per round in the demo sweep
    sweep_repeats: int = 3             # 04: timed repeats per setting (the median is kept)
    tree_replay_samples: int = 8       # 04: held-out samples the chain-vs-tree replay drafts from (0: skip)
    baseline_tok_s: float = 0.0        # 04: tok/s without speculation for the served runs (0: the records' own)


@dataclass(frozen=True, eq=False)
class Part:
    """One investigation's result. `findings` are what the diagnosis combines; `tables` and `figures` are what
    the notebook shows (title -> a DataFrame / Figure, or the sentence saying why there is none); `results`
    holds the objects they were made from (for the notebook's narrative cells and for later parts); `problems`
    are (message, error class) of what it could not read and went on without."""
    name: str
    findings: list[Finding] = field(default_factory=list)
    tables: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()
    results: dict[str, Any] = field(default_factory=dict)

    def frame(self):
        """The findings, one row each (causes.findings_frame): what a notebook shows as its causes."""
        return findings_frame(self.findings)
