"""Shared bits of the benchmark scripts: machine description, timing, result records (last line = JSON)."""
from __future__ import annotations

import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
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
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "torch": torch.__version__, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "python": platform.python_version(), "commit": commit,
            "bf16_cpu": torch.backends.mkldnn.is_available() and "avx512_bf16" in open("/proc/cpuinfo").read()
            if os.path.exists("/proc/cpuinfo") else None}


# Dense (no sparsity) peak matmul rates of GPUs, TFLOP/s, from the vendors' datasheets: bf16 on tensor cores and
# fp32 on CUDA cores (torch runs fp32 matmuls without TF32 unless told to). Matched by substring of
# torch.cuda.get_device_name, first match wins (so "H100 PCIe" comes before "H100").
DEVICE_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.2}),
    ("H100", {"bfloat16": 989.4, "float16": 989.4, "float32": 66.9}),       # SXM5 (HBM3)
    ("H200", {"bfloat16": 989.4, "float16": 989.4, "float32": 66.9}),
    ("H20", {"bfloat16": 148.0, "float16": 148.0, "float32": 44.0}),
    ("A100", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
    ("L40S", {"bfloat16": 362.1, "float16": 362.1, "float32": 91.6}),
    ("L4", {"bfloat16": 121.0, "float16": 121.0, "float32": 30.3}),
    ("A10G", {"bfloat16": 70.0, "float16": 70.0, "float32": 31.2}),
    ("A10", {"bfloat16": 125.0, "float16": 125.0, "float32": 31.2}),
)


def device_peak_flops(device_name: str | None, dtype: str) -> float | None:
    """The datasheet peak FLOP/s of this GPU for matmuls in dtype ("bfloat16", "float32"), None when unknown."""
    for key, peaks in DEVICE_PEAKS:
        if device_name and key.lower() in device_name.lower():
            return peaks.get(dtype, 0.0) * 1e12 or None
    return None


def pick_device(name: str) -> str:
    """'cpu' or 'cuda' as asked; exit with a clear message when CUDA is asked for and absent."""
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device cuda: no CUDA device here (torch {torch.__version__}, cuda build "
                 f"{torch.version.cuda or 'none'}); run it on a GPU machine or use --device cpu")
    return name


def sync(device: str) -> None:
    """Wait for the device's queued work (no-op on CPU): timings then end when the work does."""
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    """Start a new peak-memory window: torch.cuda peak statistics, and this process's peak RSS (VmHWM)."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        with open("/proc/self/clear_refs", "w") as f:     # "5" resets VmHWM to the current RSS (Linux)
            f.write("5")
    except OSError:
        pass


def peak_bytes(device: str) -> int | None:
    """Peak memory since reset_peak: torch.cuda.max_memory_allocated on CUDA, VmHWM (peak RSS) on CPU."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    try:
        return next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("VmHWM"))
    except (OSError, StopIteration):
        return None


def clocked(fn, device: str = "cpu") -> float:
    """Seconds of one fn() call, synchronising the device before and after."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def machine_line(device: str = "cpu") -> str:
    """One line saying what the numbers are measured on (printed before a table)."""
    m = machine()
    where = m["cuda"] if device == "cuda" else f"{m['cpu']}, {m['cores']} cores"
    return (f"machine: {where}; torch {m['torch']}, {m['torch_threads']} threads; load average "
            f"{' / '.join(str(x) for x in m['load_avg'])} (1/5/15 min); commit {m['commit']}")


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


def finish(name: str, table: list[dict], summary: dict, columns: list[str] | None = None) -> None:
    """Print the table (only `columns` when given), save the record under benchmarks/results/, and print it as
    the last line (JSON)."""
    if table:
        cols = columns or list(table[0])
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
