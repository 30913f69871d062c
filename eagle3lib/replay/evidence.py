"""Replay evidence the checks cite: step-0 accuracy on a few training samples as configured vs with config fields
changed (a flag an engine drops, the target's RoPE), and step-0 accuracy by position bucket.

``as_served.variant(setup.model, rope_theta=1e6)`` runs the same weights under other config values; ``acc0(setup,
data, n=8, norm_before_fc=False)`` is that run's step-0 accuracy; ``step0_acc(setup, samples, layout=lay)`` the
step-0 accuracy in a layout (stored or recaptured states, another rendering); the draft runs through `loop.draft_run`.
"""
from __future__ import annotations


import pandas as pd
import torch
from matplotlib.figure import Figure

from ..progress import track
from .as_served import variant
from .loop import draft_run
from .run import load_setup, replay
from .items import as_samples, prepared_items, requested_layout
from .stats import ReplaySetup

POSITION_BUCKETS = (0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def load_replay(draft_path, target_path, device: str = "cpu", dtype="auto") -> ReplaySetup:
    """The replay setup of a draft (embedding and lm_head from the target), on `device` in `dtype` ("auto": float32
    on CPU; a diagnosis passes its --device and --dtype): `run.load_setup`, shared within a case."""
    return load_setup(draft_path, target_path, device=device, dtype=dtype)


def step0_acc(setup: ReplaySetup, data, *, layout=None, n: int | None = None, fill: str | None = None) -> float:
    """Step-0 accuracy (teacher-forced, no drafting simulated) of the draft on `data` (a dataset, a path or
    samples; `n` of them, all when None) in `layout` (None: the setup's training layout; `fill` "zeros": a slot
    never captured fed as zeros): the replay a check cites beside another."""
    kw = {"layout": layout} if layout is not None else {}
    kw.update({"fill": fill} if fill is not None else {})
    return float(replay(setup, data, n=n, num_steps=1, simulate=False, progress=False, **kw).acc0)


def acc_steps(setup: ReplaySetup, data, n: int = 8, seed: int = 0, num_steps: int = 2, **changes) -> list[float]:
    """Teacher-forced accuracy per step (acc_0, acc_1, ...) on `n` training samples under config `changes`."""
    with variant(setup.model, **changes):
        res = replay(setup, data, n=n, seed=seed, num_steps=num_steps, simulate=False, progress=False)
    return [float(a) for a in res.per_step.acc]


def acc0(setup: ReplaySetup, data, n: int = 8, seed: int = 0, **changes) -> float:
    """Step-0 accuracy of the draft on `n` training samples (in its training layout) under config `changes`."""
    return acc_steps(setup, data, n, seed, 1, **changes)[0]


def accuracy_by_position(setup: ReplaySetup, data, n: int = 8, seed: int = 0, buckets=POSITION_BUCKETS,
                         progress: bool = False) -> pd.DataFrame:
    """Step-0 accuracy per position bucket [lo, hi): columns bucket, lo, hi, positions, acc."""
    edges = list(buckets) + [10 ** 9]
    right = torch.zeros(len(edges) - 1)
    total = torch.zeros(len(edges) - 1)
    samples, _, count = as_samples(data, n, seed)
    layout = requested_layout(setup)                 # the training layout (None: each sample's declared one)
    items = prepared_items(track(samples, total=count, desc="accuracy by position", progress=progress,
                                 unit="sample"), setup, layout)
    for r in draft_run(setup.model, items, num_steps=1, simulate=False, only_scored=False, batch_tokens=0):
        sc = r.scored
        pos = torch.arange(sc.valid.shape[1])
        which = torch.bucketize(pos, torch.tensor(edges[1:]), right=True)   # position -> bucket index
        v = sc.valid[0]
        total += torch.bincount(which[v], minlength=len(total))[:len(total)].float()
        right += torch.bincount(which[sc.correct[0]], minlength=len(total))[:len(total)].float()
    rows = [{"bucket": f"{lo}-{hi}" if hi < 10 ** 9 else f"{lo}+", "lo": lo, "hi": hi, "positions": int(t),
             "acc": float(r / t) if t else float("nan")}
            for lo, hi, r, t in zip(edges[:-1], edges[1:], right.tolist(), total.tolist())]
    df = pd.DataFrame(rows, columns=["bucket", "lo", "hi", "positions", "acc"])
    return df[df.positions > 0].reset_index(drop=True)


def position_plot(table: pd.DataFrame, max_position: int | None = None) -> Figure:
    """Step-0 accuracy by position bucket (bars), with the draft's max_position_embeddings marked."""
    fig = Figure(figsize=(6, 3.2))
    ax = fig.subplots()
    ax.bar(range(len(table)), table.acc, color="tab:blue")
    ax.set_xticks(range(len(table)), table.bucket, rotation=30, fontsize=8)
    ax.set_xlabel("position bucket (tokens)")
    ax.set_ylabel("step-0 accuracy")
    ax.set_ylim(0, 1)
    title = "draft accuracy by position"
    if max_position is not None:
        title += f" (draft max_position_embeddings {max_position})"
        past = [i for i, lo in enumerate(table.lo) if lo >= max_position]
        if past:
            ax.axvline(past[0] - 0.5, color="tab:red", ls="--", label="past the draft's context")
            ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
