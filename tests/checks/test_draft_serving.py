"""Check 11 (how the engine runs and verifies the draft): rejection method, adaptive / lossy depth, a quantized
drafter under CUDA graphs, the KV-cache dtype; raised only by what the user's launch or draft config shows."""
from __future__ import annotations

import pytest

from eagle3lib.checks.draft_serving import check_draft_serving, draft_quantization
from eagle3lib.checks.inputs import read_artifacts
from tests.checks.world import TARGET, draft_raw, write_draft, write_target

SG = ("python -m sglang.launch_server --model-path t --speculative-draft-model-path d "
      "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
      "--speculative-num-draft-tokens 4")
VL_SPEC = "vllm serve t {top} --speculative-config '{{\"method\": \"eagle3\", \"model\": \"d\"{extra}}}'"
NVFP4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}


def vl(extra: str = "", top: str = "") -> str:
    """A vLLM EAGLE-3 launch with extra --speculative-config keys and top-level flags."""
    return VL_SPEC.format(top=top, extra=(", " + extra) if extra else "")


def _f(tmp_path, launch, raw=None) -> dict:
    art = read_artifacts(draft=write_draft(tmp_path, raw or draft_raw()), launch=launch)
    found = check_draft_serving(art)
    assert len({x.cause for x in found}) == len(found) == 8
    return {x.cause: x for x in found}


@pytest.mark.parametrize("launch", [SG, vl('"num_speculative_tokens": 3')])
def test_clean_launch_raises_nothing(tmp_path, launch):
    """An unquantized draft, default KV cache, fixed depth: nothing raised; vLLM's unset rejection method is not
    checked and names the greedy-vs-sampled served accept lengths."""
    f = _f(tmp_path, launch)
    assert not any(x.raised for x in f.values())
    for c in ("adaptive_depth", "quantized_draft_graphs", "kv_cache_dtype"):
        assert f[c].status == "ruled out", c
    r = f["rejection_method"]
    assert r.status == ("ruled out" if launch == SG else "not checked")
    assert launch == SG or ("temperature 0" in r.needs and "model runner" in r.needs)


def test_rejection_methods(tmp_path):
    """synthetic (vLLM) or SGLANG_SIMULATE_ACC_LEN: confirmed; strict: suspected; standard: ruled out."""
    f = _f(tmp_path, vl('"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.2'))
    assert f["rejection_method"].status == "confirmed" and f["rejection_method"].evidence[
        "synthetic_acceptance_length"] == 3.2
    assert _f(tmp_path, "SGLANG_SIMULATE_ACC_LEN=2.5 " + SG)["rejection_method"].status == "confirmed"
    f = _f(tmp_path, "VLLM_USE_V2_MODEL_RUNNER=1 " + vl('"rejection_sample_method": "strict"'))["rejection_method"]
    assert f.status == "suspected" and "35461" in f.source and f.evidence["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert _f(tmp_path, vl('"rejection_sample_method": "standard"'))["rejection_method"].status == "ruled out"
    f = _f(tmp_path, "SGLANG_SIMULATE_ACC_LEN=lots " + SG)["rejection_method"]
    assert f.status == "not checked" and "SGLANG_SIMULATE_ACC_LEN" in f.summary


def test_adaptive_and_lossy_depth(tmp_path):
    """--speculative-adaptive: suspected (not comparable); FLy verification: confirmed (lossy by design)."""
    f = _f(tmp_path, SG + " --speculative-adaptive --speculative-adaptive-config /c.json")["adaptive_depth"]
    assert f.status == "suspected" and "21599" in f.source and f.evidence["speculative_adaptive_config"] == "/c.json"
    f = _f(tmp_path, vl('"rejection_sample_method": "fly"'))
    assert f["adaptive_depth"].status == "confirmed" and f["rejection_method"].status == "ruled out"


def test_quantized_drafter_under_cuda_graphs(tmp_path):
    """A draft quantization_config with graphs on: suspected on both engines; --enforce-eager /
    cudagraph_mode NONE / --disable-cuda-graph: ruled out; SGLang's inherited --quantization counts."""
    raw = draft_raw(quantization_config=NVFP4)
    assert draft_quantization(raw) == "compressed-tensors"
    for launch in (SG, vl()):
        f = _f(tmp_path, launch, raw)["quantized_draft_graphs"]
        assert f.status == "suspected" and "54997" in f.source
    for launch in (SG + " --disable-cuda-graph", vl(top="--enforce-eager"),
                   vl(top="--compilation-config '{\"cudagraph_mode\": \"NONE\"}'")):
        assert _f(tmp_path, launch, raw)["quantized_draft_graphs"].status == "ruled out", launch
    f = _f(tmp_path, SG + " --quantization fp8")["quantized_draft_graphs"]
    assert f.status == "suspected" and "28196" in f.summary
    f = _f(tmp_path, SG + " --quantization fp8 --speculative-draft-model-quantization unquant")
    assert f["quantized_draft_graphs"].status == "ruled out"
    assert _f(tmp_path, vl(top="--quantization fp8"))["quantized_draft_graphs"].status == "ruled out"


def test_quantized_drafter_without_launch_names_it(tmp_path):
    """Only the draft config: not checked, the summary says the draft is quantized, the input is the launch."""
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw(quantization_config=NVFP4)))
    f = {x.cause: x for x in check_draft_serving(art)}["quantized_draft_graphs"]
    assert f.status == "not checked" and "compressed-tensors" in f.summary and "launch" in f.needs


def test_kv_cache_dtype(tmp_path):
    """An fp8 KV cache the draft shares: suspected; a draft KV dtype of its own (vLLM): ruled out; an MLA draft
    on the default cache: not checked (pool bounds show only in served accept lengths)."""
    assert _f(tmp_path, SG + " --kv-cache-dtype fp8_e4m3")["kv_cache_dtype"].status == "suspected"
    f = _f(tmp_path, vl(top="--kv-cache-dtype fp8"))["kv_cache_dtype"]
    assert f.status == "suspected" and "1012" in f.source
    assert _f(tmp_path, vl('"kv_cache_dtype": "auto"', top="--kv-cache-dtype fp8"))["kv_cache_dtype"].status == \
        "ruled out"
    mla = draft_raw(architectures=["Eagle3DeepseekV2ForCausalLM"], kv_lora_rank=16)
    f = _f(tmp_path, SG, mla)["kv_cache_dtype"]
    assert f.status == "not checked" and "cold start" in f.needs


def test_garbled_values_are_named(tmp_path):
    """A --speculative-config that is not JSON, or a switch with a word for value: not checked naming the flag."""
    f = _f(tmp_path, "vllm serve t --speculative-config '{method: eagle3}'")
    spec_readers = ("rejection_method", "adaptive_depth", "kv_cache_dtype")    # the causes that read it
    assert all(f[c].status == "not checked" and "--speculative-config" in f[c].summary for c in spec_readers)
    f = _f(tmp_path, SG + " --speculative-adaptive=often")["adaptive_depth"]
    assert f.status == "not checked" and "--speculative-adaptive" in f.needs
    f = _f(tmp_path, SG + " --disable-cuda-graph=nah")["quantized_draft_graphs"]
    assert f.status == "not checked" and "--disable-cuda-graph" in f.summary


def test_without_speculation_or_launch(tmp_path):
    """No speculation: ruled out; no launch at all: not checked naming the launch command."""
    f = _f(tmp_path, "vllm serve t")
    assert {x.status for x in f.values()} == {"ruled out"}
    f = check_draft_serving(read_artifacts())
    assert {x.status for x in f} == {"not checked"} and all("launch" in x.needs for x in f)


@pytest.mark.parametrize("var", ["SGLANG_SIMULATE_ACC_LEN=3.2", "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=2"])
def test_simulated_acceptance_in_the_launch_environment_is_confirmed(tmp_path, var):
    """A simulated / forced accept length in the launch's env prefix: confirmed, naming the variable; unset (or 0):
    ruled out."""
    f = _f(tmp_path, f"{var} {SG}")["simulated_acceptance"]
    assert f.status == "confirmed" and var.split("=")[0] in f.fix
    assert _f(tmp_path, SG)["simulated_acceptance"].status == "ruled out"
    assert _f(tmp_path, f"SGLANG_SIMULATE_ACC_LEN=0 {SG}")["simulated_acceptance"].status == "ruled out"


def test_fp8_kv_cache_on_the_target(tmp_path):
    """--kv-cache-dtype fp8_e4m3: suspected (vllm PR#55557); auto: ruled out; a target kv_cache_scheme: suspected."""
    f = _f(tmp_path, SG + " --kv-cache-dtype fp8_e4m3")["fp8_kv_target"]
    assert f.status == "suspected" and "55557" in f.source
    assert _f(tmp_path, vl('"num_speculative_tokens": 3', top="--kv-cache-dtype auto"))["fp8_kv_target"].status == \
        "ruled out"
    target = {**TARGET, "quantization_config": {"quant_method": "compressed-tensors",
                                                "kv_cache_scheme": {"num_bits": 8, "type": "float"}}}
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, target), launch=SG)
    f = {x.cause: x for x in check_draft_serving(art)}["fp8_kv_target"]
    assert f.status == "suspected" and f.evidence["target_kv_cache_scheme"]["num_bits"] == 8


def test_draft_attention_backend_and_kv_scheme(tmp_path):
    """vLLM with a forced attention backend: suspected (the draft picks its own, vllm#44879); a draft
    kv_cache_scheme: suspected (vLLM reads the draft's own quantization config); neither: ruled out."""
    f = _f(tmp_path, vl(top="--attention-backend FLASHINFER"))["draft_attention_backend"]
    assert f.status == "suspected" and "44879" in f.source and f.evidence["attention_backend"] == "FLASHINFER"
    f = _f(tmp_path, vl(top="--attention-config '{\"backend\": \"CPU_MLA\"}'"))["draft_attention_backend"]
    assert f.status == "suspected" and f.evidence["attention_backend"] == "CPU_MLA"
    raw = draft_raw(quantization_config={"quant_method": "compressed-tensors",
                                         "kv_cache_scheme": {"num_bits": 8, "type": "float"}})
    f = _f(tmp_path, vl(), raw)["draft_attention_backend"]
    assert f.status == "suspected" and "utils.py:985" in f.source
    assert _f(tmp_path, vl())["draft_attention_backend"].status == "ruled out"
    assert _f(tmp_path, SG + " --attention-backend triton")["draft_attention_backend"].status == "ruled out"


def test_greedy_verify_platform(tmp_path):
    """SGLang --device npu: suspected (sglang PR#37134); --device cuda: ruled out; no --device: not checked (ROCm
    also says cuda); vLLM: not checked (the platform is the build's)."""
    f = _f(tmp_path, SG + " --device npu")["greedy_verify_platform"]
    assert f.status == "suspected" and "37134" in f.source and "temperature" in f.needs
    assert _f(tmp_path, SG + " --device cuda")["greedy_verify_platform"].status == "ruled out"
    assert _f(tmp_path, SG)["greedy_verify_platform"].status == "not checked"
    assert _f(tmp_path, vl())["greedy_verify_platform"].status == "not checked"


def test_a_finding_cites_its_row_of_the_table(monkeypatch, tmp_path):
    """Recipe (b): the behaviours check 11 rests on are rows of engines.facts; a row's new source and note are
    what the finding cites and says (here vLLM's synthetic rejection method and SGLang's inherited quantization)."""
    import dataclasses

    from eagle3lib.engines import facts
    new = {("vllm", "rejection_synthetic"): dict(source="vllm PR#99999", note="synthetic, as the row says now"),
           ("sglang", "draft_inherits_quantization"): dict(source="sglang PR#88888")}
    monkeypatch.setattr(facts, "FACTS", tuple(
        dataclasses.replace(f, **new.get((f.engine, f.subject), {})) if f.topic == "serving" else f
        for f in facts.FACTS))
    f = _f(tmp_path, vl('"rejection_sample_method": "synthetic"'))["rejection_method"]
    assert f.source == "vllm PR#99999" and f.summary == "synthetic, as the row says now"
    f = _f(tmp_path, SG + " --quantization fp8")["quantized_draft_graphs"]
    assert f.status == "suspected" and "inherited from --quantization (sglang PR#88888)" in f.summary
    assert "sglang PR#88888" in f.source and "28196" not in f.source
