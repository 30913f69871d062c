"""Throughput: is speculation paying off, and what would make it pay? (A real vLLM served and measured:
`eagle3lib.vllm_driver.serve`.)

- `records`    `RunRecord`, one measured serving run as data; JSON-lines I/O, DataFrame view.
- `logparse`   SGLang / vLLM text logs into records.
- `benchparse` structured outputs into records: `/server_info`, bench_serving JSON, Prometheus metrics.
- `costmodel`  tau, speedup, the fitted draft cost c, break-even accept length, best num_steps.
- `treecost`   chain vs tree: round cost per (steps, topk, ndt), fitted or timed; best setting, break-even.
- `plots`      matplotlib Figures from records and cost-model results.
"""
