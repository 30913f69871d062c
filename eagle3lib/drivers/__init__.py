"""Drivers: what running a real engine server takes whatever the engine (each engine's own driver is
`eagle3lib.vllm_driver` / `eagle3lib.sglang_driver`).

- `process`  one server as a child process group on 127.0.0.1: start, health, HTTP, stop by the id it started.
- `prompts`  the prompts sent to a real engine: a prompts .jsonl, or a dataset's user turns (`write_prompts`).
"""
