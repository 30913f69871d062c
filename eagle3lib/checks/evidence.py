"""The replay evidence the checks cite, under the names checks/context, checks/rope and checks/drift import; it
lives in `replay.evidence` (the draft run through `replay.loop.draft_run`): these are one-line calls of it."""
from __future__ import annotations

import pandas as pd

from ..replay import evidence
from ..replay.run import ReplaySetup


def load_replay(draft_path, target_path, device: str = "cpu") -> ReplaySetup:
    """`replay.evidence.load_replay`."""
    return evidence.load_replay(draft_path, target_path, device)


def acc0(setup: ReplaySetup, data, n: int = 8, seed: int = 0, **changes) -> float:
    """`replay.evidence.acc0`."""
    return evidence.acc0(setup, data, n, seed, **changes)


def accuracy_by_position(setup: ReplaySetup, data, n: int = 8, seed: int = 0, buckets=evidence.POSITION_BUCKETS,
                         progress: bool = False) -> pd.DataFrame:
    """`replay.evidence.accuracy_by_position`."""
    return evidence.accuracy_by_position(setup, data, n, seed, buckets, progress)
