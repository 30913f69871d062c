"""Shared bits of the benchmark scripts: machine description, timing, result records (last line = JSON)."""
from __future__ import annotations

import json
import math
import os
import platform
import resource
import statistics
import subprocess
import time
from pathlib import Path

import torch

# where result records go; EAGLE3LIB_BENCH_RESULTS redirects them (the smoke tests do, so they never touch results/)
RESULTS = Path(os.environ.get("EAGLE3LIB_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = platform.processor() or ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = None
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "python": platform.python_version(), "commit": commit,
            "bf16_cpu": torch.backends.mkldnn.is_available() and "avx512_bf16" in open("/proc/cpuinfo").read()
            if os.path.exists("/proc/cpuinfo") else None}


def timeit(fn, repeats: int = 5, warmup: int = 1) -> float:
    """Median seconds of fn() after warm-up (synchronising CUDA around each call)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def finish(name: str, table: list[dict], summary: dict) -> None:
    """Print the table, save the record under benchmarks/results/, and print it as the last line (JSON)."""
    if table:
        cols = list(table[0])
        widths = [max(len(str(c)), *(len(_fmt(r.get(c))) for r in table)) for c in cols]
        print("  ".join(str(c).rjust(w) for c, w in zip(cols, widths)))
        for r in table:
            print("  ".join(_fmt(r.get(c)).rjust(w) for c, w in zip(cols, widths)))
    record = _clean({"benchmark": name, "machine": machine(), "rows": table, **summary})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, separators=(",", ":")))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
