"""Throughput: is speculation paying off, and what would make it pay? (A real vLLM served and measured:
`eagle3lib.vllm_engine.serve`.)

- `benchparse` structured outputs into records (`/server_info`, bench_serving JSON, Prometheus metrics), and any
               file by its content (`parse_file`: an engine's decode log is read by its home).
(`RunRecord`, one measured run as data: `engine_kit.records`.)
- `costmodel`  tau, speedup, the fitted draft cost c, break-even accept length, best num_steps.
- `treecost`   chain vs tree: round cost per (steps, topk, ndt), fitted or timed; best setting, break-even.
- `plots`      matplotlib Figures from records and cost-model results.
"""
