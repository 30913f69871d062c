"""Training data: the samples a draft was trained on, read and written in every tool's format.

- `sample`   `Sample` (tokens, loss mask, aux slots, optional final state) and the per-sample checks behind it.
- `readers`  `open_dataset`: SpecForge `.ckpt[.gz]`, seed jsonl + safetensors, speculators `hs_<i>`, ModelOpt `.pt`;
             a lazy `Dataset` that streams from disk.
- `prefetch`  `ahead(iterable, depth, weight=)`: read and prepare samples in a background thread, a budget (replay: tokens) ahead of the forward.
- `distance` how far served sequences are from the training samples: tokens and bigrams seen, template (opening,
             answer header), prompt and answer lengths.
- `writers`  writers for the same formats (the tests and the demo world produce data through them).
"""
