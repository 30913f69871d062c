"""A target's safetensors read tensor by tensor: every tensor as safetensors itself reads it (single file and
sharded), fp8 block scales applied per block in fp32 and rounded once, and each refusal naming key and cause."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3lib.errors import CheckpointError, ConfigError
from eagle3lib.hidden.weights import TargetWeights, block_size, dequantize_blocks
from tests.tiny_targets import quantize_fp8_blocks, save_fp8_target, save_tiny_target, tiny_target


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_target("deepseek_v3", tmp_path_factory.mktemp("v3"))


def test_every_tensor_reads_as_safetensors_reads_it(tiny, tmp_path):
    """One file and a sharded save (index + several shards) give the same tensors, dtypes and bytes counted."""
    ref = load_file(str(tiny / "model.safetensors"))
    w = TargetWeights(tiny)
    assert set(w.entries) == set(ref) and w.nbytes == sum(t.numel() * t.element_size() for t in ref.values())
    for k, t in ref.items():
        got = w.read(k)
        assert got.dtype == t.dtype and torch.equal(got, t), k
    assert w.read("model.norm.weight", torch.bfloat16).dtype == torch.bfloat16
    assert w.nbytes_under("model.layers.1.") == sum(t.numel() * 4 for k, t in ref.items()
                                                     if k.startswith("model.layers.1."))
    tiny_target("deepseek_v3").save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    sharded = TargetWeights(tmp_path / "sharded")
    assert len(sharded.files) > 2 and set(sharded.entries) == set(ref)
    assert all(torch.equal(sharded.read(k), t) for k, t in ref.items())
    w.close()


def _naive(q, s, block, dtype):
    """W[i, j] = float(q[i, j]) * s[i // bn, j // bk], one block at a time."""
    out = torch.empty(q.shape, dtype=torch.float32)
    bn, bk = block
    for a in range(s.shape[0]):
        for b in range(s.shape[1]):
            out[a * bn:(a + 1) * bn, b * bk:(b + 1) * bk] = q[a * bn:(a + 1) * bn, b * bk:(b + 1) * bk].float() * s[a, b]
    return out.to(dtype)


@pytest.mark.parametrize("shape,block", [((48, 32), (16, 16)), ((20, 33), (16, 16)), ((130, 300), (128, 128)),
                                         ((9000, 40), (128, 32))])
def test_block_dequantization_is_the_engines_formula(shape, block):
    """Partial edge blocks, one block, and more rows than one fp32 chunk: the same bits as the per-block formula;
    the round trip of a per-block e4m3 quantization stays within e4m3's relative step."""
    w = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    q, s = quantize_fp8_blocks(w, block)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
    got = dequantize_blocks(q, s, block, torch.bfloat16)
    assert torch.equal(got, _naive(q, s, block, torch.bfloat16))
    assert float((got.float() - w).norm() / w.norm()) < 0.05
    with pytest.raises(CheckpointError, match="block scales do not tile the weight"):
        dequantize_blocks(q, s[:, :1], block, torch.bfloat16)


def test_fp8_checkpoint_reads_dequantized_and_refusals_name_the_cause(tiny, tmp_path):
    """e4m3 + weight_scale_inv read back as bf16 weights; the config's block size, the scales' absence, another
    quantization and a missing tensor are each refused with where and why."""
    src = load_file(str(tiny / "model.safetensors"))
    fp8 = save_fp8_target(tiny, tmp_path / "fp8", block=(16, 16))
    w = TargetWeights(fp8)
    assert w.block == (16, 16)
    key = "model.layers.1.self_attn.q_b_proj.weight"
    assert w.raw(key).dtype == torch.float8_e4m3fn
    got = w.read(key, torch.bfloat16)
    assert got.dtype == torch.bfloat16 and float((got.float() - src[key]).norm() / src[key].norm()) < 0.05
    assert torch.equal(w.read("model.norm.weight"), src["model.norm.weight"])         # not quantized: as stored
    with pytest.raises(CheckpointError, match="'model.layers.9.mlp.gate.weight' is not in the checkpoint"):
        w.read("model.layers.9.mlp.gate.weight")
    tensors = load_file(str(fp8 / "model.safetensors"))
    del tensors[key + "_scale_inv"]
    save_file(tensors, str(fp8 / "model.safetensors"))
    with pytest.raises(CheckpointError, match="fp8 weight without its block scales"):
        TargetWeights(fp8).read(key, torch.bfloat16)
    assert block_size({}) is None and block_size({"quantization_config": {"quant_method": "fp8",
                                                                          "weight_block_size": [128, 128]}}) == (128, 128)
    with pytest.raises(ConfigError, match="cannot dequantize.*found awq"):
        block_size({"quantization_config": {"quant_method": "awq"}})
    with pytest.raises(ConfigError, match="weight_block_size: not a block size"):
        block_size({"quantization_config": {"quant_method": "fp8"}})
    cfg = json.loads((fp8 / "config.json").read_text())
    del cfg["quantization_config"]
    (fp8 / "config.json").write_text(json.dumps(cfg))
    tensors[key + "_scale_inv"] = torch.ones(3, 1)
    save_file(tensors, str(fp8 / "model.safetensors"))
    with pytest.raises(ConfigError, match="no block size"):
        TargetWeights(fp8).read(key, torch.bfloat16)


def test_a_truncated_shard_is_a_checkpoint_error(tiny, tmp_path):
    """A cut file is refused at the header, naming the tensor that runs past its end."""
    import shutil

    shutil.copytree(tiny, tmp_path / "cut")
    f = tmp_path / "cut" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="runs past the end of the file"):
        TargetWeights(tmp_path / "cut")


def test_the_config_is_the_cases_one_parse(tiny, tmp_path):
    """Inside a case the streamed target's config.json is the case's one parse (`model.config.read_config_json`):
    opened once beside the checks' read of it; a config that is not JSON names the file and its line."""
    from eagle3lib import opened
    from eagle3lib.model.config import read_config_json
    from eagle3lib.once import case_reads
    with opened.counting() as opens, case_reads():
        read_config_json(tiny, "target")
        w = TargetWeights(tiny)
    assert opens[str((tiny / "config.json").resolve())] == 1 and w.config["model_type"] == "deepseek_v3"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "llama",\n  oops}')
    with pytest.raises(ConfigError, match=r"config.json.*line 2"):
        TargetWeights(bad)
