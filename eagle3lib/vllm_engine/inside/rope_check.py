"""Run in the vLLM venv: does this vLLM's rotary kernel rotate a (tokens, heads, dim) query as its own PyTorch code?

DeepSeek's MLA layer (vllm/model_executor/layers/mla.py:219-230) hands its RotaryEmbedding a 3-D query
``q[..., qk_nope_head_dim:]`` (tokens, heads, qk_rope_head_dim) and ``k_pe.unsqueeze(1)``; the Llama layers hand it
2-D (tokens, heads * dim). This builds the RoPE the MLA layer builds (``get_rope(..., is_neox_style=False)``),
runs the kernel forward of this platform (``forward_cpu`` on a CPU build, ``forward_cuda`` elsewhere) on MLA's
views, a contiguous 3-D query and a 2-D one, and compares each with ``forward_native``. Prints one JSON line: the
max |kernel - native| per case.
    python rope_check.py [--heads 4] [--dim 64] [--tokens 13]
"""
import argparse
import json
import sys


def main(a):
    import torch
    import vllm
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    torch.manual_seed(0)
    with set_current_vllm_config(VllmConfig()):
        rope = get_rope(a.dim, max_position=512, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        is_neox_style=False)
    from vllm.platforms import current_platform
    # the kernel path an eager engine takes (custom ops on); a bare VllmConfig would dispatch to forward_native
    forward = rope.forward_cpu if current_platform.is_cpu() else rope.forward_cuda
    T, nh, d = a.tokens, a.heads, a.dim
    pos = torch.arange(T)
    out = {}
    # as mla.py slices them: q (T, nh, nope + d)[..., nope:], k_pe (T, latent + d)[:, latent:].unsqueeze(1)
    q_mla, kv_mla = torch.randn(T, nh, 32 + d), torch.randn(T, 512 + d)
    cases = {"mla_views": (q_mla[..., 32:], kv_mla[:, 512:].unsqueeze(1)),
             "3d_query": (torch.randn(T, nh, d), torch.randn(T, 1, d)),
             "2d_query": (torch.randn(T, nh * d), torch.randn(T, d))}
    for name, (q, k) in cases.items():
        ref_q, ref_k = rope.forward_native(pos, q.clone(), k.clone())
        got_q, got_k = forward(pos, q, k)                                # in place on the views, as the layer does
        out[name] = {"query": (got_q - ref_q).abs().max().item(), "key": (got_k - ref_k).abs().max().item()}
    return {"ok": True, "version": vllm.__version__, "forward": getattr(forward, "__name__", str(forward)),
            "heads": nh, "dim": d, "tokens": T, **out}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=13)
    try:
        print(json.dumps(main(ap.parse_args())))
    except Exception as e:  # noqa: BLE001 - the caller reads the JSON line
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}))
        sys.exit(1)
