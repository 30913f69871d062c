"""Every public draft config of the corpus (tests/model/corpus) read as its writer trained it.

Each config is rebuilt tiny (same keys, small sizes, the writer's own tensor names: corpus_drafts.py) and checked
against what its writer's code says it trained (source.json, with the file and line it rests on): the boundaries
fc was trained on, the slot count, the flags, the vocabulary, one strict load that keeps every tensor the writer
saved. Where the writer's convention cannot be told from the config (source.json "ambiguous"), eagle3lib must offer
both readings and commit to none; training data captured at either reading decides (hidden.identify).
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3lib.model.checkpoint import canonicalize, load_draft
from eagle3lib.model.config import DraftConfig, load_config

from .corpus_drafts import CORPUS, NAMES, raw_config, shrink, source, training_data, world

# what eagle3lib still reads otherwise than the writer trained, and the step of issue 48 that fixes it
PENDING: dict[str, dict[str, str]] = {}


def cases(test: str):
    """NAMES, each expected to fail (strictly) while PENDING names the step that fixes it."""
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=PENDING[test][n]))
            if n in PENDING.get(test, {}) else n for n in NAMES]


OK_STATUS = ("ok", "from_target", "not_needed", "derived")
FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual", "use_aux_hidden_state")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("corpus")


def test_the_corpus_holds_twenty_real_configs_each_with_its_source():
    """At least 20 configs, every writer named, each with where it was read and the semantics relied on."""
    assert len(NAMES) >= 20
    writers = set()
    for name in NAMES:
        side = source(name)
        src = side["source"]
        assert ("repo" in src and "path" in src) or "url" in src, name
        assert side["semantics"] and all(isinstance(v, str) and v for v in side["semantics"].values()), name
        t = side["trained"]
        assert set(t) >= {"boundaries", "slots", "layers", "attention", "vocab", "fed", "flags"}, name
        assert len(t["boundaries"]) == t["slots"], name
        writers.add(side["writer"].split(" ")[0])
    assert {"SpecForge", "TorchSpec", "AngelSlim", "EAGLE", "TensorRT-LLM", "vLLM", "NVIDIA"} <= writers


@pytest.mark.parametrize("name", NAMES)
def test_the_real_config_reads_without_error(name):
    """The writer's config as published (full sizes) reads; the ids it carries are kept as written."""
    cfg = load_config(CORPUS / name)
    raw = raw_config(name)
    ids = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    ids = raw.get("eagle_aux_hidden_state_layer_ids") if ids is None else ids
    assert cfg.aux_layer_ids == (tuple(ids) if ids is not None else None)


@pytest.mark.parametrize("name", cases("read"))
def test_read_as_the_writer_trained_it(name):
    """Boundaries, slots, layers, attention, vocabulary and every flag as the writer's code trained them."""
    side = source(name)
    t, L = side["trained"], side["target"]["num_layers"]
    cfg = DraftConfig.from_dict(shrink(raw_config(name)), source=name)
    assert cfg.num_aux == t["slots"] and cfg.num_hidden_layers == t["layers"]
    assert (cfg.mla is not None) == (t["attention"] == "MLA")
    assert cfg.parallel_drafting == t["parallel"]
    assert (cfg.draft_vocab_size == cfg.vocab_size) == (t["vocab"] == "full")
    assert {f: getattr(cfg, f) for f in FLAGS} == t["flags"]
    want = tuple(t["boundaries"])
    if side["ambiguous"]:                  # the config cannot tell: both readings offered, none taken as trained
        assert cfg.aux_ids_ambiguity
        assert cfg.aux_layout_or_none(L) is None
        assert {k: list(v) for k, v in cfg.aux_readings(L).items()} == side["ambiguous"]
        assert want in cfg.aux_readings(L).values()
    elif cfg.aux_layer_ids is None and t["fed"] == "aux":
        assert cfg.default_layout(L) == want
    else:
        assert cfg.aux_layout_or_none(L) == want and cfg.aux_layout(L) == want
    assert not [w for w in cfg.warnings if "not modelled" in w or "not an EAGLE-3" in w], cfg.warnings


@pytest.mark.parametrize("name", cases("load"))
def test_strict_load_keeps_every_tensor_the_writer_saved(name, root):
    """The tiny rebuild loads strictly (no tensor filled, none a problem) and every tensor of the file is in the
    model with its values: nothing the writer trained is dropped."""
    draft, target = world(name, root)
    loaded = load_draft(draft, target=target)
    assert not loaded.filled
    bad = loaded.report[~loaded.report.status.isin(OK_STATUS)]
    assert bad.empty, bad[["key", "status", "note"]].to_dict("records")
    state = loaded.model.state_dict()
    canon, _ = canonicalize(load_file(str(draft / "model.safetensors")))
    for key, t in canon.items():
        if key == "t2d":                   # training-only: derived from d2t when the writer ships none
            continue
        assert key in state, key
        assert torch.equal(state[key].to(t.dtype), t), key


def test_the_rebuilds_keep_every_key_of_the_writers_config(root):
    """A rebuild changes sizes only: same keys, same nesting, same layer ids."""
    for name in NAMES:
        raw, tiny = raw_config(name), json.loads((world(name, root)[0] / "config.json").read_text())
        assert set(raw) == set(tiny), name
        assert raw.get("eagle_config") == tiny.get("eagle_config"), name
        assert raw.get("eagle_aux_hidden_state_layer_ids") == tiny.get("eagle_aux_hidden_state_layer_ids"), name


# ---- drafts fed the target's final state (ModelOpt eagle_config.use_aux_hidden_state false) --------------------
FINAL_STATE = [n for n in NAMES if source(n)["trained"]["fed"] == "final_postnorm"]


@pytest.mark.parametrize("name", FINAL_STATE)
def test_a_final_state_draft_builds_no_fc_and_drops_fc_keys_engines_skip(name, root, tmp_path):
    """No fc in the draft a use_aux_hidden_state-false config describes; an fc.* its checkpoint still holds (an
    older export) is dropped as vLLM's loader drops it, recorded, and never an unexpected tensor."""
    draft, target = world(name, root)
    loaded = load_draft(draft, target=target, missing="fill")
    assert "fc.weight" not in loaded.model.state_dict() and loaded.cfg.aux_layout(1) == ("final_postnorm",)
    assert not [f for f in loaded.filled if f.key.startswith("fc")]
    old = tmp_path / "with_fc"
    old.mkdir()
    (old / "config.json").write_text((draft / "config.json").read_text())
    sd = load_file(str(draft / "model.safetensors"))
    H = loaded.cfg.hidden_size
    save_file({**sd, "fc.weight": torch.randn(H, 2 * H)}, str(old / "model.safetensors"))
    again = load_draft(old, target=target, missing="fill")
    assert ("fc.weight", None) in [(a, b) for a, b, _ in again.renames]
    assert "fc.weight" not in set(again.report.key) and not again.filled


def test_a_final_state_draft_is_replayed_on_the_stored_final_state(root, tmp_path):
    """The replay feeds such a draft the sample's stored final (post-norm) state, whatever its aux slots hold, and
    scores every sample: read, replayed."""
    from eagle3lib.replay.run import load_setup, replay
    name = "trtllm_deepseek_eagle3"
    draft, target = world(name, root)
    data = training_data(tmp_path / "data", target, ["layer_in.2", "layer_in.13", "layer_in.24"])
    setup = load_setup(draft, target, missing="raise")
    assert setup.training_layout == ("final_postnorm",)
    res = replay(setup, data, n=3, num_steps=2, progress=False)
    assert res.layout == ("final_postnorm",) and not res.skipped
    assert int(res.per_step.positions.iloc[0]) > 0


def test_a_final_state_draft_is_checked_against_each_engines_capture(root):
    """Check 1 reads no ids for it; what each engine feeds it is aux_opt_out's, by the engine table: vLLM's V1
    runner feeds the final state (ruled out), its V2 runner the aux states (suspected, a static reading), nothing
    served: not checked, naming the engine."""
    from eagle3lib.checks.draft_feed import check_draft_feed
    from eagle3lib.checks.inputs import read_artifacts
    from eagle3lib.checks.layer_ids import check_layer_ids
    from eagle3lib.serving.loaded_view import engine_view
    draft, target = world("nvidia_gpt_oss_120b_eagle3_short_context", root)
    art = read_artifacts(draft=draft, target=target)
    assert {f.status for f in check_layer_ids(art)} == {"ruled out"}
    feed = {e: next(f for f in check_draft_feed(art, engine=e, engine_runner=r) if f.cause == "aux_opt_out")
            for e, r in ((None, None), ("vllm", "v1"), ("vllm", "v2"))}
    assert feed[None].status == "not checked" and feed[None].needs
    assert feed["vllm"].status == "suspected"          # the last of the loop: the V2 runner
    v1 = next(f for f in check_draft_feed(art, engine="vllm", engine_runner="v1") if f.cause == "aux_opt_out")
    assert v1.status == "ruled out"
    view = engine_view("vllm", draft_raw=art.draft_raw, tensors=art.tensors, target_info=art.target_info,
                       runner="v1")
    assert view.value("layout") == art.draft_cfg.aux_layout(art.target_info.num_layers) and view.refused is None


# ---- ids whose convention the writer leaves open: the training data decides ---------------------------------------
OPEN = [n for n in NAMES if source(n)["ambiguous"]]


@pytest.mark.parametrize("name", OPEN)
def test_the_training_data_decides_an_open_convention(name, root, tmp_path):
    """Training samples captured at either reading of the ids are identified as that reading, against the target's
    own boundaries: the config never picks one, the data does (and the audit names both, never 'unreadable')."""
    from eagle3lib.hidden.capture import load_target_model
    from eagle3lib.hidden.identify import trained_layout
    from eagle3lib.model.audit import audit_draft
    from eagle3lib.samples.readers import open_dataset
    side = source(name)
    draft, target = world(name, root)
    cfg, L = load_config(draft), side["target"]["num_layers"]
    model = load_target_model(target)
    for conv, lay in side["ambiguous"].items():
        data = open_dataset(training_data(tmp_path / conv, target, lay, n=2), hidden_size=32)
        tl = trained_layout(data, cfg, L, model=model, n=2)
        assert tl.source == "identified" and tl.layout == tuple(lay), tl.detail
        assert f"read as {conv}-of-layer name it" in tl.detail
    a = audit_draft(draft, target)
    assert a.findings["layout"] is None and a.findings["readings"] == side["ambiguous"]
    assert "unreadable" not in a.findings["headline"] and all(", ".join(v) in a.findings["headline"]
                                                              for v in side["ambiguous"].values())


def test_ids_equal_to_the_layer_count_read_as_the_only_boundaries_the_target_has(root):
    """nvidia/gpt-oss-120b-Eagle3-v3's [24, 30, 36] of 36 layers (sglang PR #32334): output-of-layer 36 is no layer,
    the input reading is the final boundary before the norm; no LayoutError, the audit shows the layout."""
    from eagle3lib.model.audit import audit_draft
    draft, target = world("nvidia_gpt_oss_120b_eagle3_v3", root)
    a = audit_draft(draft, target)
    assert a.findings["layout"] == ["layer_in.24", "layer_in.30", "final_prenorm"] and "layout_error" not in a.findings


# ---- the CLI on each draft alone (nothing served, no data) ----------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_the_cli_on_a_public_draft_alone_says_nothing_alarming(name, root, capsys):
    """`python -m eagle3lib.diagnose --draft D --target T` reads every input (exit 0, no problem) and raises
    (confirms or suspects) nothing but what the writer's own sources leave open or report: both readings of open
    ids (source.json "ambiguous"), and source.json "expected_findings" (each with why). No tensor problem, no
    weights-dropped suspicion, no 'not modelled' MLA warning, no missing fc, whatever the format."""
    from eagle3lib.diagnose.cli import main
    from eagle3lib.model.audit import audit_draft
    side = source(name)
    draft, target = world(name, root)
    rc = main(["--draft", str(draft), "--target", str(target), "--quiet", "--json", "-"])
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and rec["problems"] == []
    raised = {v["cause"]: v["status"] for v in rec["verdicts"] if v["status"] in ("confirmed", "suspected")}
    expected = {c: "suspected" for c in side.get("expected_findings", {})}
    if side["ambiguous"]:
        expected["layer_id_off_by_one"] = "suspected"
    assert raised == expected, [v["evidence"] for v in rec["verdicts"] if v["cause"] in set(raised) ^ set(expected)]
    a = audit_draft(draft, target)
    assert a.findings["tensor_problems"] == 0 and "loads cleanly" in a.findings["headline"]
    assert not [w for w in a.warnings if "not modelled" in w or "not an EAGLE-3" in w]


def test_an_fc_bias_the_config_does_not_declare_is_loaded_and_each_engine_judged(root):
    """NVIDIA's Llama-4 Maverick draft ships fc.bias (feature_fusion.bias) with no `bias: true`: eagle3lib loads it
    (the draft as trained); nothing served, check 9 raises nothing (the engine decides); SGLang and vLLM build fc from the config's
    `bias` and do not map the key, which check 9 confirms for them by name."""
    from eagle3lib.checks.inputs import read_artifacts
    from eagle3lib.checks.loaded_keys import check_weights
    draft, target = world("nvidia_llama4_maverick_eagle3", root)
    loaded = load_draft(draft, target=target)
    assert loaded.cfg.fc_bias and loaded.model.fc.bias is not None
    assert torch.equal(loaded.model.fc.bias, load_file(str(draft / "model.safetensors"))["fc.bias"])
    art = read_artifacts(draft=draft, target=target)
    alone = check_weights(art)
    assert [f.status for f in alone] == ["not checked"] and "fc.bias" in alone[0].summary and alone[0].needs
    for eng, ver in (("sglang", "0.5.12"), ("vllm", None)):
        f = check_weights(art, eng, ver)
        assert [x.status for x in f] == ["confirmed"] and "fc.bias" in f[0].summary, (eng, f[0].summary)


def test_vocab_maps_a_writer_leaves_out_are_no_tensor_problem(root, tmp_path):
    """A full-vocab draft needs no d2t / t2d (not_needed); a reduced-vocab draft without t2d (ModelOpt saves none)
    derives it from d2t (derived); a reduced-vocab draft without d2t is still a problem."""
    draft, target = world("specforge_deepseek_v3", root)
    sd = load_file(str(draft / "model.safetensors"))
    for drop, status in (("t2d", "derived"), ("d2t", "missing")):
        d = tmp_path / drop
        d.mkdir()
        (d / "config.json").write_text((draft / "config.json").read_text())
        save_file({k: v for k, v in sd.items() if k != drop}, str(d / "model.safetensors"))
        report = load_draft(d, target=target, missing="fill").report.set_index("key")
        assert report.loc[drop, "status"] == status
    full = load_draft(world("torchspec_minimax_m25", root)[0], target=world("torchspec_minimax_m25", root)[1])
    assert set(full.report.set_index("key").loc[["d2t", "t2d"], "status"]) == {"not_needed"}


# ---- the generated neighbour set --------------------------------------------------------------------------------
def _neighbour_cases():
    from .corpus_drafts import neighbours
    out = []
    for name in NAMES:
        t, L = source(name)["trained"], source(name)["target"]["num_layers"]
        for label, raw in neighbours(shrink(raw_config(name)), t["boundaries"], L):
            out.append(pytest.param(name, label, raw, id=f"{name}: {label}"))
    return out


NEIGHBOURS = _neighbour_cases()
SAME = ("dialect", "layer ids", "id convention", "ids read from")       # where and how the ids are written


def test_the_neighbour_set_covers_every_kind_of_move():
    labels = " ".join(p.values[1] for p in NEIGHBOURS)
    assert len(NEIGHBOURS) >= 40
    for kind in ("-> eagle_config.", "-> use_aux_hidden_state", "-> transformer_layer_config.",
                 "-> speculators_config.", "as vLLM writes them", "as SpecForge writes them", "rope_parameters"):
        assert kind in labels, kind


@pytest.mark.parametrize("name,label,raw", NEIGHBOURS)
def test_a_field_moved_where_another_writer_puts_it_reads_the_same(name, label, raw):
    """Each corpus config with one field moved to where another writer puts it (corpus_drafts.neighbours) reads
    the same draft: sizes, flags, vocabulary, RoPE, attention, and the boundaries; ids moved between eagle_config
    and the top level, written in that place's convention for the writer's trained boundaries, name exactly them
    (and decide a convention the original left open)."""
    side = source(name)
    L = side["target"]["num_layers"]
    before = DraftConfig.from_dict(shrink(raw_config(name)), source=name)
    after = DraftConfig.from_dict(raw, source=f"{name}: {label}")
    view = {k: v for k, v in before.summary().items() if k not in SAME}
    assert {k: v for k, v in after.summary().items() if k not in SAME} == view
    if "writes them" in label:
        assert after.aux_layout_or_none(L) == tuple(side["trained"]["boundaries"])
    else:
        assert after.aux_readings(L) == before.aux_readings(L) and after.aux_ids_ambiguity == before.aux_ids_ambiguity
