"""Standalone scripts run by the vLLM venv's python (`vllm_engine.env.run_script`), never imported by eagle3lib:
they import only vLLM, torch, safetensors and the standard library, and print one JSON object as their last line.

- `probe`   vLLM's engine config and both models built on the meta device for a list of (draft, target) jobs:
            runner, method, aux ids per runner, fc as built, the draft's own load_weights on meta tensors,
            embedding / lm_head sharing, vocab and lengths (`vllm_engine.probe` is its caller).
- `accept`  one draft served by the offline engine (`vllm.LLM`), greedy, per prompt group: vLLM's own
            speculative counters and the mean acceptance length (benchmarks/bench_vllm_facts.py).
- `dump`   the offline engine in-process, one request at a time: the drafter's prefill inputs (token ids, positions,
          the (T, k*H) aux states), the fc input and the draft's first-step logits per request (`vllm_engine.dump`).
- `draft_calls` the offline engine in-process, greedy, one request at a time: every forward call of the draft in a
          served generation (step 0 over the prompt, step 0 after each verification, steps 1..K-1), its inputs,
          attention metadata and logits, and what each proposal was handed (`vllm_engine.dump.draft_calls`).
- `in_process` not a script: how dump and draft_calls run (one JSON line out, the engine's log to --log).
- `rope_check` this platform's rotary kernel against vLLM's own forward_native on MLA's 3-D query views and a 2-D
          query (tests/engines/test_vllm_mla.py; the CPU kernel rotates the 3-D ones wrongly, engines/facts.py).
- `native_rope/sitecustomize.py` not a script: a folder put on a vLLM server's PYTHONPATH by
          `vllm_engine.serve.serve(..., native_rope=True)`, which swaps the CPU rotary kernel for vLLM's own
          forward_native in every vLLM process (a workaround for measuring MLA on CPU, named in the launch command).
"""
