"""Where the real SGLang lives and how eagle3lib talks to it: a separate virtualenv, reached only by subprocess.

The project venv never imports SGLang. `sglang_python()` finds the SGLang venv's interpreter: ``$EAGLE3LIB_SGLANG_PYTHON``,
else ``<repo>/.venv-sglang/bin/python`` once ``make sglang`` finished (its stamp says "cpu <version>" or "cuda
<version>"). `unavailable_reason()` says in one line why it cannot run here: no venv (and how to make one), or a CPU
build on a CPU without the instructions its kernels need (the host rows of `engines.facts`: avx512_bf16, not AMX).
`flavour()` is "cpu" or "cuda"; `cpu_flags_for_launch()` the flags a CPU build needs on its command line, from the
same rows (device cpu, the intel_amx attention backend, bfloat16).
"""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from ..engines.facts import fact
from ..engines.host import cpu_flags

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_DIR = REPO_ROOT / ".venv-sglang"
PYTHON_ENV = "EAGLE3LIB_SGLANG_PYTHON"
STAMP = VENV_DIR / ".eagle3lib-sglang-installed"    # written by tools/bootstrap_sglang.sh once `import sglang` works
HOOK_DIR = Path(__file__).resolve().parent / "inside" / "hook"     # its sitecustomize (the in-process hook)
MAKE_HINT = ("run `make sglang` (builds .venv-sglang: the CPU build of shared/engines/sglang-cpu, or the registry's "
             "SGLang on a CUDA host), or set $EAGLE3LIB_SGLANG_PYTHON")
KERNEL_ISA = "avx512_bf16"      # the host row cpu_kernels_need:<isa> names it (engines/facts_target.py)


def sglang_python() -> Path | None:
    """The SGLang venv's python, or None when there is none (.venv-sglang counts once `make sglang` finished)."""
    given = os.environ.get(PYTHON_ENV, "").strip()
    cand = Path(given) if given else VENV_DIR / "bin" / "python"
    if not given and not STAMP.is_file():
        return None
    return cand if cand.is_file() and os.access(cand, os.X_OK) else None


def flavour() -> str:
    """"cpu" or "cuda": what the stamp says was installed (a venv given by $EAGLE3LIB_SGLANG_PYTHON: cpu unless
    nvidia-smi lists a GPU)."""
    try:
        return STAMP.read_text().split()[0]
    except (OSError, IndexError):
        return "cuda" if _gpu_listed() else "cpu"


def _gpu_listed() -> bool:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.lstrip().startswith("GPU")


def host_reason(flags: frozenset[str] | None = None) -> str:
    """Why SGLang's CPU build cannot run on this CPU ("" when it can), from the host row that says what its kernels
    need."""
    row = fact("sglang", "host", f"cpu_kernels_need:{KERNEL_ISA}")
    flags = cpu_flags() if flags is None else flags
    if row is None or KERNEL_ISA in flags:
        return ""
    return (f"this CPU has no {KERNEL_ISA}: SGLang's CPU kernels cannot load here ({row.source}); "
            "the SGLang engine tests need an x86 CPU with AVX-512 BF16 (AMX not needed)")


def unavailable_reason() -> str:
    """Why the real SGLang cannot run here ("" when it can)."""
    py = sglang_python()
    if py is not None:
        return host_reason() if flavour() == "cpu" else ""
    if not _gpu_listed() and host_reason():
        return host_reason()
    given = os.environ.get(PYTHON_ENV, "").strip()
    where = (f"${PYTHON_ENV}={given} is not an executable" if given else
             f"{VENV_DIR.name}/ in {REPO_ROOT} is not finished (no {STAMP.name})" if VENV_DIR.is_dir() else
             f"no {VENV_DIR.name}/ in {REPO_ROOT}")
    return f"the real SGLang is not installed ({where}): {MAKE_HINT}"


def side_env(extra: dict | None = None) -> dict:
    """The environment the SGLang side runs in: this one, without the project venv leaking into it; the CPU build
    is told to take its CPU engine."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if flavour() == "cpu":
        env.update(cpu_env())
    env.update(extra or {})
    return env


def cpu_env() -> dict[str, str]:
    """The variables a CPU build is started with (shared/engines/sglang-cpu README's serve command)."""
    return {"SGLANG_USE_CPU_ENGINE": "1"}


def cpu_flags_for_launch(dtype: str = "bfloat16") -> list[str]:
    """The launch flags a CPU build needs: the CPU device, the one attention backend that serves EAGLE there, the
    dtype (bfloat16: the host rows say float32 is refused and `auto` turns a float32 model into float16)."""
    return ["--device", "cpu", "--attention-backend", "intel_amx", "--dtype", dtype]


@functools.lru_cache(maxsize=4)
def engine_version(python: str | None = None) -> str | None:
    """The version the SGLang venv reports (`sglang.__version__`; a source build says 0.0.0.dev0), None when it
    cannot be asked."""
    py = python or (str(sglang_python()) if sglang_python() else None)
    if not py:
        return None
    try:
        out = subprocess.run([py, "-c", "import sglang; print(sglang.__version__)"], capture_output=True, text=True,
                             timeout=120, env=side_env(), cwd=str(REPO_ROOT))
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[-1].strip() if out.returncode == 0 and lines else None
