"""Tests of the demo world: corpus, tokenizer and chat template (fast), ensure_world's caching and its refusal of
stale artifacts (fast, fake restore), and the world itself (slow: restores data/demo once per session when it is
missing)."""
from __future__ import annotations

import json

import pytest

from eagle3lib.errors import DataError
import torch

from eagle3demo.tokenizer import save_tokenizer, train_tokenizer
from eagle3lib.demo import world as demo
from eagle3lib.demo import corpus as C

TRAINING_LAYOUT = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A small BPE trained on a few hundred conversations, loaded back through AutoTokenizer."""
    from transformers import AutoTokenizer
    recs = C.conversations("kitchen", 300, 7) + C.conversations("nature", 100, 7)
    tok = train_tokenizer([m["content"] for r in recs for m in r["conversations"]], 1024)
    d = tmp_path_factory.mktemp("tok")
    save_tokenizer(tok, d, model_max_length=512)
    return AutoTokenizer.from_pretrained(d)


def test_corpus_is_deterministic_per_seed():
    """Same seed and domain -> identical records; another seed -> different text; both domains differ in topic."""
    a, b = C.conversations("kitchen", 60, 3), C.conversations("kitchen", 60, 3)
    assert a == b
    assert a != C.conversations("kitchen", 60, 4)
    nature = C.conversations("nature", 60, 3)
    assert {r["domain"] for r in a} == {"kitchen"} and {r["domain"] for r in nature} == {"nature"}
    for r in a + nature:
        roles = [m["role"] for m in r["conversations"]]
        assert roles[0] == "user" and roles == ["user", "assistant"] * (len(roles) // 2)


def test_corpus_rejects_unknown_domain():
    """An unknown domain name is refused with the allowed names in the message."""
    with pytest.raises(ValueError, match="kitchen"):
        C.conversations("sports", 3, 0)


def test_domains_use_different_words():
    """The shifted domain's assistant words are mostly absent from the training domain (a real vocab shift)."""
    words = lambda recs: {w for r in recs for m in r["conversations"] if m["role"] == "assistant"
                          for w in m["content"].lower().split()}
    kitchen, nature = words(C.conversations("kitchen", 400, 0)), words(C.conversations("nature", 400, 0))
    assert len(nature - kitchen) / len(nature) > 0.4


def test_loss_mask_covers_assistant_content_and_end_token_only(tokenizer):
    """loss_mask is 1 exactly on assistant content + <|end|> of every assistant turn (SpecForge semantics)."""
    rec = next(r for r in C.conversations("kitchen", 50, 1) if len(r["conversations"]) == 4)
    ids, mask = C.encode_with_mask(tokenizer, rec)
    assert len(ids) == len(mask) and set(mask) == {0, 1}
    # contiguous runs of mask 1 decode to each assistant message followed by <|end|>
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    answers = [m["content"] for m in rec["conversations"] if m["role"] == "assistant"]
    assert [tokenizer.decode(r) for r in runs] == [a + C.EOT for a in answers]
    unmasked = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
    assert rec["conversations"][0]["content"] in unmasked and C.ASSISTANT in unmasked


def test_tokenizer_round_trip_and_chat_template(tokenizer):
    """Text survives encode/decode; the chat template renders roles with special tokens and a generation prompt."""
    text = "Hi, I am Kalomi. How long should I bake tofu? Bake it for 25 minutes."
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    msgs = [{"role": "user", "content": "How do I make pancakes?"}]
    rendered = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert rendered == f"{C.BOS}{C.USER}How do I make pancakes?{C.EOT}{C.ASSISTANT}"
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"]
    specials = [tokenizer.convert_tokens_to_ids(t) for t in C.SPECIAL_TOKENS]
    assert specials == list(range(len(C.SPECIAL_TOKENS)))
    assert ids[0] == specials[1] and ids[-1] == specials[4]          # <|begin|> ... <|assistant|>


def test_ensure_world_restores_once_and_again_on_new_version(tmp_path, monkeypatch):
    """ensure_world restores when missing, reuses a current world, restores an outdated one again, leaves no temp
    dirs (the restore is replaced where world calls it); the builder's `make` writes the world instead."""
    from eagle3lib.demo.shipped import BUILDER_VERSIONS, DemoPaths
    calls = []

    def fake(root, progress=True, kind="llama"):
        calls.append(root)
        DemoPaths(root).world_json.write_text(json.dumps({"builder_version": BUILDER_VERSIONS[kind], "kind": kind}))

    monkeypatch.setattr(demo, "restore_world", fake)
    root = tmp_path / "w"
    p = demo.ensure_world(root, progress=False)
    assert p.world_json.is_file() and len(calls) == 1 and calls[0] != root   # restored elsewhere, then renamed
    demo.ensure_world(root, progress=False)
    assert len(calls) == 1
    p.world_json.write_text(json.dumps({"builder_version": "old"}))
    demo.ensure_world(root, progress=False)
    assert len(calls) == 2 and json.loads(p.world_json.read_text())["builder_version"] == BUILDER_VERSIONS["llama"]
    demo.ensure_world(root, force=True, progress=False)
    assert len(calls) == 3
    assert sorted(x.name for x in tmp_path.iterdir() if not x.name.endswith(".lock")) == ["w"]
    demo.ensure_world(root, progress=False, world="mla")                  # a llama world is not an mla world
    assert len(calls) == 4 and json.loads(p.world_json.read_text())["kind"] == "mla"
    built = []
    demo.ensure_world(root, force=True, progress=False, make=lambda r, progress, kind: (built.append(kind),
                                                                                        fake(r, progress, kind)))
    assert built == ["llama"] and len(calls) == 5


def test_stale_shipped_artifacts_are_refused_with_the_builder_command(tmp_path, monkeypatch):
    """Shipped artifacts of another builder version: ensure_world trains nothing and raises a DataError naming
    data/demo_artifacts/world.json, the version expected and found, and the builder's command."""
    from eagle3lib.demo import shipped
    monkeypatch.setattr(demo, "restore_world", lambda *a, **k: pytest.fail("restored stale artifacts"))
    monkeypatch.setitem(shipped.BUILDER_VERSIONS, "llama", "demo-world-999")
    with pytest.raises(DataError) as e:
        demo.ensure_world(tmp_path / "w", progress=False, world="llama")
    msg = str(e.value)
    assert "data/demo_artifacts/world.json" in msg and "demo-world-999" in msg and "demo-world-4" in msg, msg
    assert "python -m eagle3demo --from-scratch" in msg and "source checkout" in msg, msg
    assert not (tmp_path / "w").exists()


def test_the_demo_world_is_chosen_by_one_name(monkeypatch):
    """select() (the notebooks' demo_world parameter) picks the folder every later paths() call uses."""
    monkeypatch.delenv("EAGLE3LIB_DEMO_DIR", raising=False)
    monkeypatch.setenv(demo.WORLD_ENV, "")                               # restored after the test
    assert demo.paths().kind == "llama" and demo.paths().root.name == "demo"
    assert demo.select_world("") == "llama"                                    # empty keeps the current choice
    assert demo.select_world("MLA") == "mla" and demo.paths().root.name == "demo_mla" and demo.paths().kind == "mla"
    assert demo.paths(world="llama").root.name == "demo"
    with pytest.raises(DataError, match="unknown demo world"):
        demo.select_world("qwen")


@pytest.mark.parametrize("kind", ["llama", "mla"])
def test_rescale_residual_is_an_exact_reparametrization(kind, tmp_path):
    """rescale_residual multiplies every residual state by c and leaves logits and the final post-norm state alone,
    on the Llama target and on the DeepSeek-V3 one (MLA latent norms and MoE experts), also after a save and load.
    The mla world keeps rms_norm_eps (scale_eps=False: the engines' latent norms read it): exact up to eps / mean
    square of the states (here random states of mean square ~4e-4: a logit change of ~1e-4)."""
    from transformers import AutoModelForCausalLM

    from eagle3demo.train_target import rescale_residual, target_config
    torch.manual_seed(0)
    cfg = target_config(60, kind=kind)
    cfg.num_hidden_layers = 3
    model = AutoModelForCausalLM.from_config(cfg).eval()
    ids = torch.randint(0, 60, (2, 12))
    with torch.no_grad():
        a = model(input_ids=ids, output_hidden_states=True)
        rescale_residual(model, 10.0, scale_eps=kind == "llama")
        model.save_pretrained(tmp_path)
        b = AutoModelForCausalLM.from_pretrained(tmp_path).eval()(input_ids=ids, output_hidden_states=True)
    tol = 1e-4 if kind == "llama" else 5e-4
    assert torch.allclose(a.logits, b.logits, atol=tol)
    for i in range(3):                                               # embed, layer_in.1, layer_in.2: x 10
        assert torch.allclose(b.hidden_states[i], 10 * a.hidden_states[i], rtol=tol, atol=1e-5 if i == 0 else tol)
    assert torch.allclose(b.hidden_states[3], a.hidden_states[3], atol=tol)   # final post-norm: unchanged
    assert model.config.rms_norm_eps == pytest.approx(1e-3 if kind == "llama" else 1e-6)


# ---------------------------------------------------------------- the built world (slow)

@pytest.fixture(scope="session")
def world():
    """The demo world under data/demo (or $EAGLE3LIB_DEMO_DIR), restored once if missing."""
    p = demo.ensure_world(progress=True)
    return p, json.loads(p.world_json.read_text())


@pytest.mark.slow
def test_world_has_every_artifact(world):
    """Every documented path exists, with the files a reader needs."""
    p, w = world
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (p.target / f).is_file(), f
    for f in ("config.json", "model.safetensors"):
        assert (p.draft / f).is_file(), f
    assert p.training_log.is_file()
    assert (p.specforge_data / "rows_0-2000" / "data_0.ckpt").is_file()
    assert (p.seed_data / "train.jsonl").is_file() and (p.seed_data / "dataset_info.json").is_file()
    assert (p.heldout_data / "heldout.jsonl").is_file() and (p.shifted_data / "shifted.jsonl").is_file()
    assert w["layouts"]["training"] == list(TRAINING_LAYOUT)
    assert w["layouts"]["serving"] == ["layer_in.2", "layer_in.4", "layer_in.6"]
    assert {r["stage"] for r in w["timings"]} >= {"target training", "draft training"}


@pytest.mark.slow
def test_target_loads_with_transformers_and_is_fluent(world):
    """The target and tokenizer load with transformers; a greedy in-domain answer is a well-formed reply."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    p, w = world
    tok = AutoTokenizer.from_pretrained(p.target)
    model = AutoModelForCausalLM.from_pretrained(p.target).eval()
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads) == (8, 128, 2)
    assert 2000 <= cfg.vocab_size <= 4096 and cfg.vocab_size == len(tok)
    enc = tok.apply_chat_template([{"role": "user", "content": "How long should I boil potatoes?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**enc, max_new_tokens=50, do_sample=False, eos_token_id=tok.convert_tokens_to_ids(C.EOT))
    reply = tok.decode(out[0, enc["input_ids"].shape[1]:])
    assert reply.endswith(C.EOT) and "minutes" in reply, reply
    assert w["target"]["heldout_loss"] < 1.0


@pytest.mark.slow
def test_draft_checkpoint_is_specforge_format_with_recorded_accuracy(world):
    """The draft is saved like SpecForge (no embed_tokens, 4-slot fc, ids [-1,1,3,5]); val acc >= 0.60 recorded."""
    from safetensors import safe_open

    from eagle3lib.model.checkpoint import load_draft
    from eagle3lib.replay.verdict import read_recorded_accuracy
    p, w = world
    cfg = json.loads((p.draft / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 1, 3, 5]
    with safe_open(str(p.draft / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert list(f.get_tensor("fc.weight").shape) == [128, 4 * 128]
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= keys
    assert any(k.startswith("midlayer.") for k in keys) and not any("embed" in k for k in keys)
    acc, where = read_recorded_accuracy(p.training_log)
    assert acc >= 0.60 and acc == w["draft"]["recorded_val_acc_step0"], where
    log = [json.loads(line) for line in p.training_log.read_text().splitlines()]
    assert all("acc_definition" in r and len(r["val_acc"]) == w["sizes"]["ttt_steps"] for r in log)
    loaded = load_draft(p.draft, target=p.target)
    assert loaded.taken_from_target == ("embed_tokens.weight",)


@pytest.mark.slow
def test_vocab_map_is_consistent(world):
    """nonzero(t2d) == d2t + arange(Vd), Vd ~ V/4, and the draft vocab covers most in-domain assistant tokens."""
    from safetensors.torch import load_file
    p, w = world
    sd = load_file(str(p.draft / "model.safetensors"))
    d2t, t2d = sd["d2t"], sd["t2d"]
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    assert torch.equal(t2d.nonzero().flatten(), d2t + torch.arange(d2t.numel()))
    V = w["target"]["vocab_size"]
    assert t2d.numel() == V and abs(d2t.numel() - V / 4) <= 1
    assert w["vocab"]["coverage_train"] > 0.99 and w["vocab"]["coverage_shifted"] < w["vocab"]["coverage_train"]


@pytest.mark.slow
def test_training_data_formats_agree_with_each_other_and_a_fresh_capture(world):
    """SpecForge .ckpt and seed samples hold the same tensors, and equal a fresh capture from the target."""
    from transformers import AutoModelForCausalLM

    from eagle3lib.samples.readers import open_dataset
    p, _ = world
    sf = open_dataset(p.specforge_data, layout=TRAINING_LAYOUT)
    seed = open_dataset(p.seed_data)
    assert len(sf) == len(seed) > 0 and seed.layout == TRAINING_LAYOUT
    model = AutoModelForCausalLM.from_pretrained(p.target).eval()
    for i in (0, len(seed) // 2, len(seed) - 1):
        a, b = sf[i], seed[i]
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        assert torch.equal(a.aux, b.aux) and torch.equal(a.final_hidden, b.final_hidden)
        with torch.no_grad():
            hs = model(input_ids=b.input_ids[None], output_hidden_states=True).hidden_states
        fresh = torch.stack([hs[0][0], hs[2][0], hs[4][0], hs[6][0]], dim=1)       # (T, 4, Ht)
        cos = torch.nn.functional.cosine_similarity(fresh, b.aux, dim=-1)
        assert cos.min() > 0.9999, (i, cos.min())
        assert torch.nn.functional.cosine_similarity(hs[8][0], b.final_hidden, dim=-1).min() > 0.9999


@pytest.mark.slow
def test_saved_draft_replays_its_recorded_accuracy(world):
    """Reloaded draft + stored held-out samples reproduce the recorded step-0 accuracy (save/load is lossless)."""
    from eagle3lib.model.checkpoint import load_draft
    from eagle3lib.samples.readers import open_dataset
    from eagle3lib.demo.restore import Captured
    from eagle3demo.train_draft import evaluate_draft
    from eagle3lib.model.target import load_target_tensor
    p, w = world
    draft = load_draft(p.draft, target=p.target).model
    held = [Captured(s.id, s.input_ids, s.loss_mask, s.aux, s.final_hidden) for s in open_dataset(p.heldout_data)]
    ev = evaluate_draft(draft, held, load_target_tensor(p.target, "lm_head"), num_steps=1)
    assert ev["acc"][0] == pytest.approx(w["draft"]["recorded_val_acc_step0"], abs=2e-3)
