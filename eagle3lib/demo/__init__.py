"""The embedded demo world: a miniature, fully real version of the seed's failure that runs on CPU, restored from
the artifacts shipped with the repository (the builder that trains them, ``eagle3demo``, lives beside the library
in a source checkout and is not installed with it).

- `world`     where its artifacts live (`paths()`: ``data/demo/`` or ``$EAGLE3LIB_DEMO_DIR``; `select_world`), and
              `ensure_world()`, which restores the shipped artifacts when missing; `world_table`, what a world is;
              `add_world_arguments`, the choice of a world on a command line.
- `shipped`   the shipped artifacts (``data/demo_artifacts*``) and the builder versions they must match
              (`BUILDER_VERSIONS`, `artifacts_current`); `DemoPaths`: where each artifact of a world lies.
- `restore`   the restore: the trained target and draft copied, the corpus regenerated, the training data
              recaptured with the shipped target; the world's layouts, sizes and splits.
- `corpus`    the code-generated chat corpus, its special tokens and chat template, its encoding.
- `shipped_served` the shipped served deployments (``data/demo_vllm*``, ``data/demo_sglang``), read and judged current.
- `sweep`     the demo world loaded for serving; the demo engine swept over num_steps into `RunRecord`s.
`python -m eagle3lib.demo [--world mla] [--force]` restores it (when needed) and prints what it is.
"""
