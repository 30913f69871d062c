"""The embedded demo world: a miniature, fully real version of the seed's failure that runs on CPU.

- `world`        where its artifacts live (`paths()`: ``data/demo/`` or ``$EAGLE3LIB_DEMO_DIR``) and
                 `ensure_world()`, which restores the shipped artifacts (or builds them) when missing.
- `build`        the build: corpus, tokenizer, target, captured training data, vocab map, draft; artifact export.
- `corpus`       the code-generated chat corpus and its BPE tokenizer.
- `train_target` the target: a small transformers `LlamaForCausalLM` trained on the corpus.
- `train_draft`  the hidden-state capture and the EAGLE-3 draft trained on it (SpecForge objective).
- `deployments`  the demo draft deployed on vLLM: healthy and broken copies, each with the cause it must show
                 (the mla world: its retrained draft healthy, the seed's draft with the embedding slot broken).
- `faults`       the generated fault matrix: the healthy deployment with each engine-read field perturbed, its
                 tensors (d2t, lm_head, embedding) swapped, the served prompts, the target or the launch changed,
                 alone and in pairs, each with the seed's verdict it must reach (tests/demo/test_faults.py).
- `fault_inputs` what those faults change beside the draft: other-template served prompts, a drifted or another
                 target of the same shape, launches that cap τ (written once under ``<world>/faults/``).
- `vllm_world`   those deployments served by the real vLLM and dumped, once, under ``data/demo_vllm/<name>/``
                 (``data/demo_vllm_mla/<name>/`` for the mla world).
- `sglang_world` the seed's story served by the real SGLang (`sglang_driver`) and dumped by its hook, once, under
                 ``data/demo_sglang/<name>/``: ``seed`` (the ndt rewrite, no embedding slot) and ``healthy``.
- `portable`     shipped files hold no machine path: the repo root made relative, $HOME made ``~``; a served
                 deployment's record written relative to its folder (and read back), its draft's stamp.
- `sweep`        the demo world loaded for serving; the demo engine swept over num_steps into `RunRecord`s.
`python -m eagle3lib.demo [--force] [--from-scratch]` builds it and prints the timing table.
The planted-bug suite's cases (a user's folder with one defect planted in a copy of this world) are test code:
tests/planted.py.
"""
