"""Training data: the samples a draft was trained on, read and written in every tool's format.

- `sample`   `Sample` (tokens, loss mask, aux slots, optional final state) and the per-sample checks behind it.
- `readers`  `open_dataset`: SpecForge `.ckpt[.gz]`, seed jsonl + safetensors, speculators `hs_<i>`, ModelOpt `.pt`;
             a lazy `Dataset` that streams from disk.
- `prefetch`  `ahead(iterable, depth, weight=)`: read and prepare samples in a background thread, a budget (replay: tokens) ahead of the forward.
- `writers`  writers for the same formats (the tests and the demo world produce data through them).
"""
