"""The demo world's builder: a project beside the library, in a source checkout only (``pip install .`` ships
``eagle3lib`` alone). It trains what the library's demo world restores (``eagle3lib.demo``: the shipped artifacts
in ``data/demo_artifacts*``, the served deployments in ``data/demo_vllm*`` and ``data/demo_sglang``) and plants the
faults the tests diagnose. It imports eagle3lib only through public names; eagle3lib never imports it.

- `build`        the build: corpus, tokenizer, target, captured training data, vocab map, draft (`build_world`,
                 world.json); `export_artifacts` writes the trained models to the shipped artifacts.
- `tokenizer`    the corpus's BPE tokenizer, trained and saved beside the target.
- `train_target` the target: a small transformers `LlamaForCausalLM` (or `DeepseekV3ForCausalLM`) trained on the
                 corpus, its residual rescale.
- `train_draft`  the EAGLE-3 draft trained on the captured hidden states (SpecForge objective), its config.
- `deployments`  the demo draft deployed on vLLM: healthy and broken copies, each with the cause it must show
                 (the mla world: its retrained draft healthy, the seed's draft with the embedding slot broken).
- `faults`       the generated fault matrix: the healthy deployment with each engine-read field perturbed, its
                 tensors (d2t, lm_head, embedding) swapped, the served prompts, the target or the launch changed,
                 alone and in pairs, each with the seed's verdict it must reach (tests/demo/test_faults.py).
- `fault_inputs` what those faults change beside the draft: other-template served prompts, a drifted or another
                 target of the same shape, launches that cap τ (written once under ``<world>/faults/``).
- `vllm_world`   those deployments served by the real vLLM and dumped, once, under ``data/demo_vllm/<name>/``
                 (``data/demo_vllm_mla/<name>/`` for the mla world).
- `sglang_world` the seed's story served by the real SGLang (`sglang_engine`) and dumped by its hook, once, under
                 ``data/demo_sglang/<name>/``: ``seed`` (the ndt rewrite, no embedding slot) and ``healthy``.
- `portable`     shipped files hold no machine path: the repo root made relative, $HOME made ``~``; a served
                 deployment's record written relative to its folder.
`python -m eagle3demo [--force] [--from-scratch] [--export] [--vllm NAME ...] [--sglang NAME ...]` builds the world,
prints its timing table, exports it and serves its deployments. The planted-bug suite's cases (a user's folder
with one defect planted in a copy of the world) are test code: tests/planted.py.
"""
