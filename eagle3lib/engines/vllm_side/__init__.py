"""Standalone scripts run by the vLLM venv's python (`engines.vllm_env.run_script`), never imported by eagle3lib:
they import only vLLM, torch, safetensors and the standard library, and print one JSON object as their last line.

- `dump`   the offline engine in-process, one request at a time: the drafter's prefill inputs (token ids, positions,
          the (T, k*H) aux states), the fc input and the draft's first-step logits per request (`engines.vllm_dump`).
"""
