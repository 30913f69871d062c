"""Own throughput measurements: the demo engine over num_steps and captures, plus the baseline, as `RunRecord`s.

`run_demo_sweep([1, 3, 5, (5, 4, 8)])` serves the demo world's prompts (held-out, training or shifted domain) with
the correct capture and the seed's wrong one; each configuration gets a warm-up, then `repeats` timed passes over
all prompts, interleaved across configurations so machine load drifts hit all alike; tok/s is the median pass. An
int K is the chain (K, 1, K+1); a (num_steps, topk, num_draft_tokens) triple is launched as given (a tree when
topk > 1; all None = SGLang's auto choice for the target, (5, 4, 8) for the demo's Llama). Accept length and
per-position acceptance come from the engine's own counters (greedy: the same in every pass).
"""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..engine_kit.capturespec import CaptureSpec
from ..errors import DataError, MissingFileError
from ..layout import to_ids
from ..engine_kit.records import RunRecord
from ..engines.versions import DEFAULT_VERSION
from ..progress import bar

PROMPT_SETS = ("heldout", "train", "shifted")
SOURCE = "eagle3lib demo engine"


@dataclass(frozen=True, eq=False)
class Demo:
    """The loaded demo world: target, draft, their paths and the draft's training layout."""
    target: torch.nn.Module
    draft: torch.nn.Module
    paths: object               # eagle3lib.demo.shipped.DemoPaths
    num_layers: int
    training_layout: tuple[str, ...]


def series_of(capture: str) -> str:
    """The RunRecord series of a demo capture's runs ("correct" -> "correct capture")."""
    return f"{capture} capture"


def load_demo(device: str = "cpu", root=None) -> Demo:
    """Load the demo world's target and draft, building the world first when missing (demo.ensure_world)."""
    from . import world as demo
    from ..hidden.capture import load_target_model
    from ..replay.run import load_setup

    p = demo.paths(root)
    present = (p.target / "config.json").exists() and (p.draft / "config.json").exists()
    if root is None or not present:      # the default world is rebuilt when outdated; a given root is taken as is
        if not hasattr(demo, "ensure_world"):
            raise MissingFileError(str(p.root), "the demo world is not built and this eagle3lib has no builder",
                                   expected="target/ and draft/ under the demo root", found="nothing",
                                   cause="eagle3lib.demo.ensure_world is missing")
        p = demo.ensure_world(root)
    target = load_target_model(p.target, device=device)
    # the draft as stored (float32: the builder trains it so), the very setup a diagnosis's replays share (once)
    draft = load_setup(p.draft, p.target, device=device, dtype=torch.float32).model
    L = int(target.config.num_hidden_layers)
    layout = draft.cfg.aux_layout(L) or draft.cfg.default_layout(L)
    return Demo(target, draft, p, L, tuple(layout))


def demo_capture(name, world: Demo, version: str = DEFAULT_VERSION) -> CaptureSpec:
    """'correct' (the training layout), 'seed' ([low, mid, high] via SGLang ids, zero-padded) or a CaptureSpec."""
    if isinstance(name, CaptureSpec):
        return name
    lay = world.training_layout
    if name == "correct":
        return CaptureSpec.from_layout(lay, label=f"correct: training layout [{', '.join(lay)}]")
    if name == "seed":                         # the seed's server: no embedding slot, 3 states into the 4-slot fc
        ids = to_ids([n for n in lay if n != "embed"], "output", world.num_layers)
        return CaptureSpec.sglang(ids, version, pad_policy="zeros",
                                  label=f"seed: SGLang ids {ids} (no embed), zero-padded into the {len(lay)}-slot fc")
    raise DataError(f"capture {name!r}", "unknown demo capture", expected="'correct', 'seed' or a CaptureSpec",
                    found=repr(name))


def demo_prompts(which: str = "heldout", n: int = 8, world: Demo | None = None, root=None) -> list[list[int]]:
    """Prompts from the demo data: each sample's tokens before its first assistant (loss_mask = 1) token."""
    from . import world as demo
    from ..samples.readers import open_dataset

    if which not in PROMPT_SETS:
        raise DataError(f"prompts {which!r}", "unknown prompt set", expected=PROMPT_SETS, found=which)
    p = world.paths if world is not None else demo.paths(root)
    ds = open_dataset({"heldout": p.heldout_data, "train": p.seed_data, "shifted": p.shifted_data}[which])
    out = []
    for s in ds:
        first = torch.nonzero(s.loss_mask).flatten()
        if len(first) and int(first[0]) > 0:
            out.append(s.input_ids[:int(first[0])].tolist())
        if len(out) == n:
            break
    if not out:
        raise DataError(f"demo {which} data", "no sample with a prompt before an assistant span",
                        expected="loss_mask = 1 on assistant tokens after a prompt", found=f"{len(ds)} samples")
    return out


def hardware(device: str) -> str:
    """A short description of where the sweep ran."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}"
    return (f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads), "
            f"torch {torch.__version__}")


def _pass(engine, prompts, max_new: int, settings) -> dict:
    """One timed pass over all prompts: decode tokens and seconds, acceptance counters, draft / verify seconds."""
    agg = {"tokens": 0, "decode_s": 0.0, "draft_s": 0.0, "verify_s": 0.0, "taus": [], "per_pos": None}
    for ids in prompts:
        r = engine.generate(ids, max_new, settings)
        agg["tokens"] += len(r.output_ids) - 1
        for k in ("decode_s", "draft_s", "verify_s"):
            agg[k] += getattr(r, k)
        agg["taus"] += list(r.accept_lengths)
        pp = list(r.accepted_per_position)
        agg["per_pos"] = pp if agg["per_pos"] is None else [a + b for a, b in zip(agg["per_pos"], pp)]
        agg["eff"] = r.effective
    return agg


def run_demo_sweep(num_steps, captures=("correct", "seed"), repeats: int = 3, device: str = "cpu",
                   prompts: str = "heldout", max_new_tokens: int = 48, num_prompts: int = 6,
                   version: str = DEFAULT_VERSION, root=None, threads: int | None = None, clock: str = "wall",
                   progress: bool = False) -> list[RunRecord]:
    """Baseline + every (capture, num_steps) on the demo world: median tok/s of `repeats` passes, own counters.

    clock="wall" times with perf_counter; clock="cpu" with this thread's CPU time (torch forced to 1 thread), which
    a machine shared with other jobs inflates far less. threads sets torch's intra-op threads for the sweep only.
    """
    if repeats < 1 or not num_steps:
        raise DataError("run_demo_sweep", "nothing to measure", expected="repeats >= 1 and some num_steps",
                        found=f"repeats={repeats}, num_steps={list(num_steps)}")
    if clock not in ("wall", "cpu"):
        raise DataError(f"run_demo_sweep(clock={clock!r})", "unknown clock", expected=("wall", "cpu"), found=clock)
    if clock == "cpu" and str(device) != "cpu":
        raise DataError(f"run_demo_sweep(clock='cpu', device={device!r})", "a CPU clock cannot time a GPU",
                        expected="device 'cpu' or clock 'wall'", found=device)
    old = torch.get_num_threads()
    torch.set_num_threads(1 if clock == "cpu" else threads or old)
    try:
        return _sweep(num_steps, captures, repeats, device, prompts, max_new_tokens, num_prompts, version, root,
                      time.thread_time if clock == "cpu" else time.perf_counter, progress)
    finally:
        torch.set_num_threads(old)


def _sweep(num_steps, captures, repeats, device, prompts, max_new_tokens, num_prompts, version, root, clock,
           progress) -> list[RunRecord]:
    from ..sglang_engine.emulator import SpecEngine
    from ..sglang_engine.emulator_settings import SpecSettings
    from ..sglang_engine.resolver import accept_rate

    world = load_demo(device, root)
    ids = demo_prompts(prompts, num_prompts, world)
    plan = [("baseline", SpecEngine(world.target, model_path=str(world.paths.target), clock=clock),
             None, SpecSettings.baseline(version))]
    for name in captures:
        spec = demo_capture(name, world, version)
        eng = SpecEngine(world.target, world.draft, spec, model_path=str(world.paths.target),
                         draft_path=str(world.paths.draft), clock=clock)
        plan += [(name if isinstance(name, str) else spec.label, eng, spec,
                  SpecSettings(*k, version) if isinstance(k, (tuple, list)) else SpecSettings(k, 1, k + 1, version))
                 for k in num_steps]
    for _, eng, _, st in plan:                                      # warm-up (allocator, kernels), untimed
        eng.generate(ids[0], min(8, max_new_tokens), st)
    runs = [[] for _ in plan]
    meter = bar(total=repeats * len(plan), desc="demo sweep", progress=progress, unit="run")
    for _ in range(repeats):                                        # interleaved: load drifts hit every config
        for i, (_, eng, _, st) in enumerate(plan):
            runs[i].append(_pass(eng, ids, max_new_tokens, st))
            meter.update(1)
    meter.close()
    hw, stamp, records = hardware(device), time.strftime("%Y-%m-%d %H:%M:%S"), []
    base_step = statistics.median(r["decode_s"] / max(r["tokens"], 1) for r in runs[0])   # s per target decode step
    for (series, _, spec, st), passes in zip(plan, runs):
        first, eff = passes[0], passes[0]["eff"]
        tok_s = statistics.median(r["tokens"] / r["decode_s"] for r in passes)
        common = dict(engine="demo", engine_version=f"eagle3lib engine emulating SGLang {eff.version}",
                      tok_s=tok_s, batch_size=1, hardware=hw, source=SOURCE, time=stamp, repeats=repeats)
        where = (f"{prompts} prompts x {len(ids)}, {max_new_tokens} new tokens, {device}, "
                 f"{'thread CPU' if clock is time.thread_time else 'wall'} clock")
        if not eff.speculative:
            records.append(RunRecord(num_steps=0, series="baseline", label="baseline (no speculation)",
                                     notes=f"{where}; {base_step * 1e3:.2f} ms per target decode step", **common))
            continue
        rounds, taus = len(first["taus"]), first["taus"]
        tau = sum(taus) / rounds
        rate, rate_def = accept_rate(eff.version, tau, eff.num_steps, eff.num_draft_tokens)
        draft_step = statistics.median(r["draft_s"] / (len(r["taus"]) * eff.num_steps) for r in passes)
        verify = statistics.median(r["verify_s"] / len(r["taus"]) for r in passes)
        same = all(r["taus"] == taus for r in passes)
        records.append(RunRecord(
            num_steps=eff.num_steps, topk=eff.topk, num_draft_tokens=eff.num_draft_tokens, accept_length=tau,
            per_position=tuple(c / rounds for c in first["per_pos"]), drafted=rounds * (eff.num_draft_tokens - 1),
            accepted=sum(taus) - rounds, rounds=rounds, accept_rate=rate, accept_rate_definition=rate_def,
            series=series_of(series), label=f"{series_of(series)}, num_steps={eff.num_steps}" + (
                f", topk={eff.topk}, ndt={eff.num_draft_tokens}" if eff.topk > 1 else ""),
            notes=(f"{where}; capture {spec.label}; draft step {draft_step * 1e3:.2f} ms = "
                   f"{draft_step / base_step:.2f} x a target decode step; verify {verify * 1e3:.2f} ms"
                   + ("" if same else "; WARNING: acceptance differed between repeats")), **common))
    return records


def demo_serving_dump(out_dir: str | Path, capture_name: str = "seed", prompts: str = "train", n: int = 2,
                      max_new_tokens: int = 32, device: str = "cpu") -> Path:
    """Serve demo prompts with the demo engine under `capture_name` and dump what it fed the draft."""
    from ..sglang_engine.emulator import SpecEngine
    from ..sglang_engine.emulator_settings import SpecSettings

    world = load_demo(device)
    eng = SpecEngine(world.target, world.draft, demo_capture(capture_name, world))
    settings = SpecSettings(num_steps=3, topk=1, num_draft_tokens=4)
    results = [eng.generate(p, max_new_tokens, settings, keep_aux=True)
               for p in demo_prompts(prompts, n=n, world=world)]
    return Path(eng.save_dump(results, out_dir))


def ensure_serving_dump(capture_name: str = "seed", device: str = "cpu", root=None) -> Path:
    """The demo world's serving dump under `capture_name` ("seed": what the demo world's server feeds, the seed's
    capture), made once under the world's root and reused."""
    from . import world as demo

    out = Path(demo.paths(root).root) / f"serving_dump_{capture_name}"
    if (out / "manifest.json").is_file():
        return out
    return demo_serving_dump(out, capture_name, device=device)
