"""The SGLang rows of the engine table, checked on the running engine (the real SGLang, `make sglang`): the demo draft
and variants of it served by `sglang_engine.serve` with the in-process hook, each answer against the row that
predicts it. Slow: one server start per variant (~40 s each on 2 cores); skipped with the reason where SGLang
cannot run (no .venv-sglang, or a CPU without avx512_bf16)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eagle3lib.demo.world import ensure_world
from eagle3lib.engine_kit.prompts import Prompt, prompts_from_dataset
from eagle3lib.engines import facts
from eagle3lib.engines.advice import captured_by
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.sglang_engine.ids import sglang_ids
from eagle3lib.sglang_engine.resolver import resolve
from eagle3lib.engines.engine_errors import known_failure, log_lines, root_error, scan_errors
from eagle3lib.hidden.compare import dump_boundaries
from eagle3lib.model.checkpoint import save_draft
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.samples.readers import open_dataset
from eagle3lib.serving.launch import parse_launch
from eagle3lib.sglang_engine.dump import dump_from_hook, load_events
from eagle3lib.sglang_engine.env import engine_version, unavailable_reason
from eagle3lib.sglang_engine.serve import serve

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "SGLang runs here")]

N = 16


@pytest.fixture(scope="module")
def world():
    return ensure_world(progress=False)


def long_prompts(world, n: int = 6) -> list[Prompt]:
    """Multi-turn prompts past the mpe64 variant's 64 positions: two whole held-out conversations, then a question."""
    convs = [s.input_ids.tolist() for _, s in zip(range(2 * n), open_dataset(world.heldout_data))]
    asks = prompts_from_dataset(world.heldout_data, 3 * n)[2 * n:]
    out = [Prompt(f"long-{i}", token_ids=tuple(convs[2 * i] + convs[2 * i + 1][1:] + list(a.token_ids[1:])))
           for i, a in enumerate(asks)]
    assert min(len(p.token_ids) for p in out) > 64 + 8
    return out


def wide_draft(world, out: Path) -> Path:
    """The demo draft's shape at width 192 over the 128-wide target (6 heads of 32), random weights, the demo's d2t and
    t2d, saved without embed_tokens as SpecForge saves a draft: the embedding it runs is whatever SGLang gives it."""
    from safetensors.torch import load_file
    raw = dict(json.loads((Path(world.draft) / "config.json").read_text()), hidden_size=192, num_attention_heads=6)
    torch.manual_seed(0)
    model = Eagle3Draft(DraftConfig.from_dict(raw))
    shipped = load_file(str(Path(world.draft) / "model.safetensors"))
    model.d2t.copy_(shipped["d2t"])
    model.t2d.copy_(shipped["t2d"])
    return save_draft(model, raw, out)


@pytest.fixture(scope="module")
def served(world, tmp_path_factory):
    """name -> (SglangRun, SglangLoad): the demo draft and its variants, each served on the same held-out prompts."""
    root = tmp_path_factory.mktemp("sglang_facts")
    emb = torch.randn(2685, 128) * 0.02
    variants = {
        "base": dict(draft=world.draft),
        # its own (random) embedding and a key no SGLang module names: both must leave τ as it is
        "own_parts": dict(draft=edited_copy(world.draft, root / "own_parts_draft",
                                            add={"embed_tokens.weight": emb, "extra_proj.weight": torch.ones(4, 4)})),
        # no lm_head, draft_vocab_size set: SGLang builds a fresh lm_head and borrows nothing
        "no_lm_head": dict(draft=edited_copy(world.draft, root / "no_lm_head_draft", drop=["lm_head.weight"])),
        # the seed's launch: 16 draft tokens with one step and topk 1
        "ndt16": dict(draft=world.draft, steps=1, topk=1, ndt=16),
        # a draft context of 64 positions, served on prompts past it
        "mpe64": dict(draft=edited_copy(world.draft, root / "mpe64_draft", config={"max_position_embeddings": 64}),
                      prompts=long_prompts(world)),
        "mpe64_allowed": dict(draft=root / "mpe64_draft", prompts=long_prompts(world),
                              env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}),
        "base_long": dict(draft=world.draft, prompts=long_prompts(world)),
        # num_key_value_heads 4 in the config over k/v trained for 2 (the demo target's)
        "kv_heads_4": dict(draft=edited_copy(world.draft, root / "kv_heads_4_draft",
                                             config={"num_key_value_heads": 4})),
        # a draft wider than the target (192 over 128) without embed_tokens
        "wide_no_embed": dict(draft=wide_draft(world, root / "wide_no_embed_draft")),
    }
    out = {}
    for name, v in variants.items():
        run = serve(world.target, v["draft"], root / name, prompts=v.get("prompts", world.heldout_data), n=N,
                    steps=v.get("steps", 3), topk=v.get("topk", 1), ndt=v.get("ndt", 4), max_tokens=32, hook=True,
                    env=v.get("env"))
        out[name] = (run, load_events(root / name / "hook") if run.n_answered else None)
    return out


def test_the_id_convention_on_the_running_engine(world, served, tmp_path):
    """SGLang adds 1 to every id (-1 is the embedding): the demo draft's [-1, 1, 3, 5] capture the inputs of layers
    [0, 2, 4, 6], which the dump of what its fc got shows slot by slot, as the table predicts."""
    run, load = served["base"]
    raw = json.loads((world.draft / "config.json").read_text())
    ids, _ = sglang_ids(raw, engine_version())
    assert load.layer_ids == ids == (-1, 1, 3, 5)
    assert load.layers_to_capture == (0, 2, 4, 6)
    predicted = captured_by("sglang", ids, 8, engine_version())
    d = dump_from_hook(run.out_dir, tmp_path / "dump")
    assert len(d) == N
    assert dump_boundaries(d, world.target, n=4) == predicted == ("embed", "layer_in.2", "layer_in.4", "layer_in.6")


def test_the_draft_runs_on_the_target_embedding_and_drops_unknown_keys(served):
    """The draft's own embedding is replaced by the target's (row embed own_embed_used: False), and a checkpoint key
    no module names is dropped without a word (row keys unknown_dropped_silently): τ stays the base draft's."""
    base, own = served["base"], served["own_parts"]
    assert facts.reads("sglang", "embed", "own_embed_used", engine_version()) is False
    assert base[1].embedding_replaced is True and own[1].embedding_replaced is True
    assert facts.reads("sglang", "keys", "unknown_dropped_silently", engine_version()) is True
    assert own[1].dropped == ("extra_proj.weight",) and base[1].dropped == ()
    assert "extra_proj" not in open(own[0].log).read()          # silently
    assert abs(own[0].accept_length - base[0].accept_length) < 0.05 * base[0].accept_length


def test_a_draft_of_another_width_runs_its_own_never_loaded_embedding(served):
    """A draft 192 wide over the 128-wide target, shipped without embed_tokens: SGLang's set_embed returns without
    giving it the target's embedding (row embed shared_when_widths_differ: False), so the draft runs the embedding
    it built and never loaded; the demo draft, of the target's width, is given the target's."""
    (run, load), base = served["wide_no_embed"], served["base"][1]
    assert facts.reads("sglang", "embed", "shared_when_widths_differ", engine_version()) is False
    assert run.n_answered and load.embedding_replaced is False and base.embedding_replaced is True


def test_a_draft_without_lm_head_borrows_nothing(served):
    """draft_vocab_size set and no lm_head tensor: SGLang keeps a fresh lm_head (borrows only when draft_vocab_size is
    unset: row lm_head borrow_when_draft_vocab_unset) and says nothing (row missing_key_warned: False): τ collapses."""
    run, load = served["no_lm_head"]
    assert facts.reads("sglang", "lm_head", "borrow_when_draft_vocab_unset", engine_version()) is True
    assert facts.reads("sglang", "lm_head", "missing_key_warned", engine_version()) is False
    assert load.load_lm_head_from_target is False and load.lm_head_replaced is False
    assert "lm_head" not in " ".join(k["key"] for k in load.keys)
    said = [line for line in open(run.log) if "lm_head" in line and "server_args=" not in line]
    assert said == []                                           # not a word beyond the echoed server_args
    assert run.accept_length < 1.3 < served["base"][0].accept_length


def test_the_seed_launch_is_rewritten_to_two_draft_tokens(served):
    """--speculative-num-draft-tokens 16 with one step and topk 1 runs with 2 (/server_info), logged, as the rule table
    resolves the same launch at this version."""
    run, _ = served["ndt16"]
    assert run.ok and run.effective["speculative_num_draft_tokens"] == 2
    res = resolve(parse_launch(run.launch_command), version=engine_version())
    assert res.effective["speculative_num_draft_tokens"] == 2
    assert "speculative_num_draft_tokens is adjusted" in open(run.log).read()
    assert run.accept_length <= 2.0


def test_a_draft_context_below_the_target_s_is_refused_unless_allowed(served):
    """A draft config of 64 positions beside a target of 512: SGLang refuses it at start-up (row context
    refuses_draft_context_below_target; the refusal row names short_context); with
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 it serves and drafts past 64 (row
    stops_drafting_past_max_position_embeddings, false),
    τ within 10% of the same draft declaring 512, on prompts of 88-134 tokens (measured: 2.39 and 2.39, the same
    answers; vLLM V1 stops drafting there)."""
    v = engine_version()
    assert facts.reads("sglang", "context", "refuses_draft_context_below_target", v) is True
    assert facts.reads("sglang", "context", "stops_drafting_past_max_position_embeddings", v) is False
    refused = served["mpe64"][0]
    assert not refused.ok and refused.n_answered == 0
    err = root_error(scan_errors(log_lines(open(refused.log).read())))
    row = known_failure(err)
    assert row is not None and row.engine == "sglang" and row.cause == "short_context", err
    allowed, base = served["mpe64_allowed"][0], served["base_long"][0]
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in allowed.launch_command
    assert allowed.ok and base.ok and allowed.accept_length > 1.5
    assert abs(allowed.accept_length - base.accept_length) < 0.1 * base.accept_length


def test_a_short_kv_shard_is_zero_padded_on_the_cpu(world, served, tmp_path):
    """A config sizing k/v for 4 heads over a checkpoint trained with 2: SGLang on the CPU serves it without a word,
    its qkv_proj holding the checkpoint's rows and zeros past them (row keys short_qkv_shard_zero_padded@cpu); the
    draft replayed so (eagle3lib's view from that row, overruled by the hook's load) predicts the served τ within 10%,
    where the loader's random stand-in would not."""
    from eagle3lib.replay.as_served import replay_as_served
    from eagle3lib.replay.run import identify_training_layout, load_setup, with_trained_layout
    from eagle3lib.steps.served_view import deployment_view
    from eagle3lib.checks.inputs import read_artifacts
    run, load = served["kv_heads_4"]
    assert run.ok and facts.reads("sglang", "keys", "short_qkv_shard_zero_padded@cpu", engine_version()) is True
    (param, (zero, rows)), = [(p, z) for p, z in load.zero_rows.items() if p.endswith("qkv_proj.weight")]
    hd = 32                                          # the demo draft's head_dim: 2 k heads and 2 v heads of zeros
    assert (zero, rows) == (2 * 2 * hd, (4 + 2 * 4) * hd)
    assert not [ln for ln in open(run.log) if "k_proj" in ln or "qkv_proj" in ln]       # without a word
    s = load_setup(Path(run.out_dir).parent / "kv_heads_4_draft", world.target)
    s = with_trained_layout(s, identify_training_layout(s, world.specforge_data))
    art = read_artifacts(draft=str(s.draft_path), target=str(world.target))
    v, *_ = deployment_view("sglang", art, version=engine_version(), load=load.to_dict(),
                            mis_shaped=tuple(f.key for f in s.filled), device="cpu")
    assert (v.value("mis_shaped"), v.source("mis_shaped")) == ("padded", "probe")
    assert param in v.aspects["mis_shaped"].detail
    tau = replay_as_served(s, world.heldout_data, v, num_steps=3, n=N).get("as trained").tau
    stand_in = replay_as_served(s, world.heldout_data, v.overruled("mis_shaped", None, "dump", "test"), num_steps=3,
                                n=N).get("as trained").tau
    assert abs(tau - run.accept_length) <= 0.1 * run.accept_length < abs(stand_in - run.accept_length)


def test_the_sglang_emulator_within_5_percent_of_the_real_engine(world, served):
    """sglang_engine.emulator (SpecEngine: the same draft in float32, chain drafting, SGLang's rules) on the same
    prompts and settings (steps 3, topk 1, 4 draft tokens, 32 new tokens) counts τ as SGLang does (generated tokens
    over verify rounds) within 5% of the real engine's."""
    from eagle3lib.engine_kit.prompts import read_prompts
    from eagle3lib.hidden.capture import load_target_model
    from eagle3lib.model.checkpoint import load_draft
    from eagle3lib.engine_kit.capturespec import CaptureSpec
    from eagle3lib.sglang_engine.emulator_settings import SpecSettings
    from eagle3lib.sglang_engine.emulator import SpecEngine
    run, _ = served["base"]
    loaded = load_draft(world.draft, target=world.target)
    eng = SpecEngine(load_target_model(world.target), loaded.model,
                     CaptureSpec.from_layout(("embed", "layer_in.2", "layer_in.4", "layer_in.6")))
    tokens = rounds = 0
    for p in read_prompts(f"{run.out_dir}/prompts.jsonl"):
        r = eng.generate(list(p.token_ids), 32, SpecSettings(3, 1, 4))
        tokens, rounds = tokens + len(r.output_ids), rounds + len(r.accept_lengths)
    assert abs(tokens / rounds - run.accept_length) < 0.05 * run.accept_length, (tokens / rounds, run.accept_length)
