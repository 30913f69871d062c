"""Test-only: put on the PYTHONPATH of a vLLM process to make it see AMX tiles on a host without them (vLLM 0.32
platforms/cpu.py:152-155 asks torch.cpu._is_amx_tile_supported), so the AMX route's start-up (the AMX_MLA backend
and its weight packing) runs on the real engine anywhere; on an AMX host it changes nothing. Then vLLM's native
RoPE, as the mla world serves (eagle3lib/vllm_engine/inside/native_rope). Says so on stderr, which the log keeps."""
import runpy
import sys
from pathlib import Path

try:
    import torch

    torch.cpu._is_amx_tile_supported = lambda: True
    print("eagle3lib amx_claim: torch.cpu._is_amx_tile_supported -> True", file=sys.stderr, flush=True)
except Exception as e:  # noqa: BLE001 - a process without torch runs on unchanged
    print(f"eagle3lib amx_claim: not applied ({type(e).__name__}: {e})", file=sys.stderr, flush=True)
runpy.run_path(str(Path(__file__).resolve().parents[3] / "eagle3lib" / "vllm_engine" / "inside" / "native_rope" /
                   "sitecustomize.py"))
