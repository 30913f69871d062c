"""The investigations in the notebooks' order, written once: each is a part (`steps.part.Part`) its step module's
`run(case, earlier)` makes. The diagnosis loops over `PARTS`; nothing else lists the order.

Notebook 01 makes two parts (its serving settings, then the served runs against the replay, which need the
first). Two parts are their notebook's only (`diagnosed=False`): notebook 00's checks are run by notebook 01's part
in the diagnosis, once, with the engine the launch names (part 00 runs them without an engine: its notebook's
view), so that each check judges a diagnosis once; notebook 04's part (throughput) decides no cause (its demo
sweep is timed runs and charts, nothing the diagnosis combines).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from . import checkpoint_audit, diffing, discovery, sample_replay, served_prediction, throughput_runs


@dataclass(frozen=True)
class Step:
    """One part of the investigation. A part runs on the demo world, or on a user's draft when every input of
    `needs` is given (else `module.not_run(inputs)`, when the module has it, gives its not-checked findings) and
    the part `after` names ran. `needs_draft`: it loads the draft, so an unreadable draft skips it. `diagnosed`:
    the diagnosis runs it (False: a notebook's own part, which decides no cause)."""
    notebook: str                  # the notebook's stem
    name: str                      # the part's name (its findings are filed under it)
    module: ModuleType             # the step module: run(case, earlier) -> Part
    needs_draft: bool = False
    needs: tuple[str, ...] = ()    # steps.part.Inputs fields
    after: str = ""                # the part whose result it reads
    diagnosed: bool = True         # False: only its notebook runs it (its checks run elsewhere, or decide no cause)


NOTEBOOKS = (("00_checkpoint_audit", checkpoint_audit), ("01_config_override_discovery", discovery),
             ("02_training_sample_replay", sample_replay), ("03_hidden_state_diffing", diffing),
             ("04_throughput_charts", throughput_runs))

PARTS = (Step(NOTEBOOKS[0][0], checkpoint_audit.NAME, checkpoint_audit, diagnosed=False),
         Step(NOTEBOOKS[1][0], discovery.NAME, discovery),
         Step(NOTEBOOKS[1][0], served_prediction.NAME, served_prediction, needs_draft=True, after=discovery.NAME),
         Step(NOTEBOOKS[2][0], sample_replay.NAME, sample_replay, needs_draft=True, needs=("train_data",)),
         Step(NOTEBOOKS[3][0], diffing.NAME, diffing, needs_draft=True, needs=("target", "train_data")),
         Step(NOTEBOOKS[4][0], throughput_runs.NAME, throughput_runs, diagnosed=False))
