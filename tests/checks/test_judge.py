"""run_checks: every check on whatever is given; missing inputs narrow the answer, broken checks never raise."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from eagle3lib.causes import CATALOGUE, Finding
from eagle3lib.checks import judge as R
from eagle3lib.causes import findings_frame
from eagle3lib.checks.judge import run_checks
from tests.checks.world import canonical_tensors, draft_raw, write_data, write_draft, write_target


def test_nothing_given_is_all_not_checked_naming_inputs():
    """No input at all: every finding is 'not checked' and names what it needs; every cause id is known."""
    f = run_checks()
    assert f and {x.status for x in f} == {"not checked"} and all(x.needs for x in f)
    assert {x.cause for x in f} <= set(CATALOGUE)
    reported = {c for check in R.CHECKS.values() for c in check.causes}
    assert {x.cause for x in f} == reported


def test_clean_tiny_world_raises_nothing(tmp_path):
    """A consistent tiny draft/target/data/launch: no confirmed or suspected finding."""
    raw = draft_raw()
    f = run_checks(draft=write_draft(tmp_path, raw, canonical_tensors(raw)), target=write_target(tmp_path),
                   data=write_data(tmp_path), engine="sglang", engine_version="0.5.6",
                   launch="python -m sglang.launch_server --model-path t --speculative-algorithm EAGLE3")
    bad = [x for x in f if x.raised]
    assert bad == [], findings_frame(bad).to_string()
    assert sum(x.status == "ruled out" for x in f) >= 12


def test_unreadable_inputs_and_a_broken_check_do_not_raise(tmp_path, monkeypatch):
    """A corrupt config is named in `needs`; a check that crashes becomes 'not checked' with its error."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    f = run_checks(draft=tmp_path / "bad")
    assert any("unreadable" in x.needs and "not valid JSON" in x.needs for x in f)

    def boom(art, opts):
        raise RuntimeError("kaboom")
    monkeypatch.setitem(R.CHECKS, "rope", dataclasses.replace(R.CHECKS["rope"], judge=boom))
    f = run_checks(draft=write_draft(tmp_path, draft_raw()), only=["rope"])
    assert [(x.cause, x.status) for x in f] == [("rope_mismatch", "not checked")] and "kaboom" in f[0].summary
    assert all(isinstance(x, Finding) for x in f)
    assert list(findings_frame(f).columns) == ["cause", "status", "summary", "where", "fix", "needs", "source"]


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
# field-causes.md rows 20-33
NEW_CAUSES = {"rejection_method", "prefix_cache_stale_kv", "quantized_draft_graphs", "draft_window_ignored",
              "dp_attention", "lora_target", "kv_cache_dtype", "adaptive_depth", "structured_output",
              "mrope_draft_extend", "chunked_prefill_boundary", "specforge_norm_output", "fc_norm_conflict",
              "trtllm_acceptance_gate"}
CLEAN = {"sglang": "python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
                   "--speculative-draft-model-path {d} --speculative-num-steps 15 --speculative-eagle-topk 1 "
                   "--speculative-num-draft-tokens 16",
         "vllm": "vllm serve {t} --speculative-config '{{\"method\": \"eagle3\", \"model\": \"{d}\", "
                 "\"num_speculative_tokens\": 3}}'"}


def test_rows_20_to_33_are_each_reported_by_a_check():
    """Each field-causes.md row 20-33 is a cause some contract check reports (rows 13, 15, 18 are the notebooks')."""
    from eagle3lib.causes import FIELD_CAUSES
    reported = {c for check in R.CHECKS.values() for c in check.causes}
    assert NEW_CAUSES == {FIELD_CAUSES[r] for r in range(20, 34)} and NEW_CAUSES <= reported


def test_only_runs_the_checks_that_are_part_of_the_named_one(tmp_path):
    """only=("launch",) also runs launch_flags and draft_serving; only=("flags",) the norm-meaning check."""
    f = run_checks(launch=CLEAN["vllm"].format(t="t", d="d"), only=("launch",))
    assert {"prefix_cache_stale_kv", "rejection_method", "wrong_method"} <= {x.cause for x in f}
    f = run_checks(draft=write_draft(tmp_path, draft_raw()), only=["flags"])
    assert {x.cause for x in f} == {"dropped_variant_flags", "fc_norm_conflict", "specforge_norm_output"}
    assert {x.cause for x in run_checks(only="window")} == {"draft_window_ignored"}


@pytest.mark.parametrize("world", ["demo_artifacts", "demo_artifacts_mla"])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_healthy_demo_world_gives_no_alarm_for_rows_20_to_33(world, engine):
    """The demo worlds' trained draft and target (as shipped in data/, the files the demo world copies) with a
    clean launch of either engine: every row 20-33 cause is ruled out, or not checked naming its input."""
    d, t = ROOT / "data" / world / "draft", ROOT / "data" / world / "target"
    f = [x for x in run_checks(draft=d, target=t, launch=CLEAN[engine].format(t=t, d=d)) if x.cause in NEW_CAUSES]
    assert {x.cause for x in f} == NEW_CAUSES
    bad = [x for x in f if x.raised]
    assert bad == [], findings_frame(bad).to_string()
    assert all(x.needs for x in f if x.status == "not checked")
    assert sum(x.status == "ruled out" for x in f) >= 9


# field-causes.md rows 34-47
ROWS_34_47 = {"hicache_draft_kv", "pd_disaggregation", "pipeline_parallel_aux", "greedy_verify_platform",
              "aux_opt_out", "layer_id_count", "k_meaning", "simulated_acceptance", "fp8_kv_target",
              "draft_attention_backend", "stale_draft_kv", "async_scheduling", "sequence_parallel", "k_schedule"}


def test_rows_34_to_47_are_each_reported_by_a_check():
    """Each field-causes.md row 34-47 is a cause some contract check reports, and `only=("launch",)` runs them."""
    from eagle3lib.causes import FIELD_CAUSES
    reported = {c for check in R.CHECKS.values() for c in check.causes}
    assert ROWS_34_47 == {FIELD_CAUSES[r] for r in range(34, 48)} and ROWS_34_47 <= reported
    f = run_checks(launch=CLEAN["vllm"].format(t="t", d="d"), only=("launch",))
    assert ROWS_34_47 <= {x.cause for x in f}


@pytest.mark.parametrize("world", ["demo_artifacts", "demo_artifacts_mla"])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_healthy_demo_world_gives_no_alarm_for_rows_34_to_47(world, engine):
    """The demo worlds' draft and target with a clean launch of either engine (vLLM 0.32.0 named): every row 34-47
    cause ruled out, or not checked naming its input."""
    d, t = ROOT / "data" / world / "draft", ROOT / "data" / world / "target"
    f = [x for x in run_checks(draft=d, target=t, launch=CLEAN[engine].format(t=t, d=d),
                               engine_version="0.32.0" if engine == "vllm" else None) if x.cause in ROWS_34_47]
    assert {x.cause for x in f} == ROWS_34_47
    bad = [x for x in f if x.raised]
    assert bad == [], findings_frame(bad).to_string()
    assert all(x.needs for x in f if x.status == "not checked")
    assert sum(x.status == "ruled out" for x in f) >= 9


def _parts_asked() -> set[str]:
    """The part tags the steps pass to run_checks(part=...): read from their source, string constants only."""
    tags = set()
    for path in (Path(R.__file__).parents[1] / "steps").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "part":
                tags |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                         and isinstance(c.value, str)}
    return tags


def test_every_check_is_run_by_a_part():
    """A registered check that no part asks for (by its tags, or the check it is part of) never runs: this fails
    until a part runs it. The steps ask by tag only (no tuple of check names)."""
    from eagle3lib.checks.registry import PARTS
    asked = _parts_asked()
    assert asked <= set(PARTS), f"steps ask for unknown parts: {sorted(asked - set(PARTS))}"
    runs = set(R.chosen(part=tuple(asked)))
    assert runs == set(R.CHECKS), f"checks no part runs: {sorted(set(R.CHECKS) - runs)}"
    assert all(c.part_of in R.CHECKS for c in R.CHECKS.values() if c.part_of)


def test_a_check_is_registered_once_with_a_part(monkeypatch):
    """The registry refuses a second function under a taken name, an unknown part tag and a check with no part."""
    from eagle3lib.checks import registry
    from eagle3lib.errors import FindingError
    monkeypatch.setattr(registry, "CHECKS", dict(registry.CHECKS))

    def other(art, opts):
        return []
    with pytest.raises(FindingError, match="registered twice"):
        registry.contract("rope", ("rope_mismatch",), parts=("artifacts",))(other)
    with pytest.raises(FindingError, match="unknown part tag"):
        registry.contract("new", ("rope_mismatch",), parts=("notebook 9",))
    with pytest.raises(FindingError, match="no part runs"):
        registry.contract("new", ("rope_mismatch",))
    registry.contract("new", ("rope_mismatch",), part_of="rope")(other)
    assert "new" in registry.in_part("artifacts") and "new" not in registry.in_part("diffing")


@pytest.mark.slow
def test_the_checks_that_replay_share_one_loaded_draft(monkeypatch, tmp_path):
    """Every check that replays (here RoPE, context and drift: the demo draft with another rope_theta and 64
    positions) replays one draft, loaded once per call: the draft's files are not read again by each."""
    import json
    import shutil
    from eagle3lib.demo import world as demo
    from eagle3lib.replay import evidence
    w = demo.ensure_world(progress=False)
    d = tmp_path / "draft"
    shutil.copytree(w.draft, d)
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**raw, "rope_theta": 1_000_000.0, "max_position_embeddings": 64}))
    loads = []
    real = evidence.load_setup

    def counted(*a, **k):
        loads.append(a[:2])
        return real(*a, **k)
    monkeypatch.setattr(evidence, "load_setup", counted)
    f = run_checks(draft=d, target=w.target, data=w.seed_data, replay_n=2, only=("rope", "context", "drift"))
    assert {x.cause for x in f if x.measured} == {"rope_mismatch", "short_context", "target_drift"}
    assert len(loads) == 1, loads


def test_the_checks_replays_load_on_the_diagnosis_device_in_its_dtype(tmp_path, monkeypatch):
    """diagnose's --device and --dtype reach the replay setup a check loads (before: on CPU whatever --device
    said, so a GPU diagnosis replayed its checks on CPU beside the parts' setup on the GPU)."""
    from eagle3lib.errors import ConfigError
    from eagle3lib.replay import evidence
    asked = []

    def load_setup(draft, target, device="cpu", dtype="auto"):
        asked.append((device, dtype))
        raise ConfigError("load_setup", "not loaded here", cause="the test stops at the load")
    monkeypatch.setattr(evidence, "load_setup", load_setup)
    raw = draft_raw(norm_before_residual=True)         # a flag set: the flags check replays it on and off
    f = run_checks(draft=write_draft(tmp_path, raw, canonical_tensors(raw)), target=write_target(tmp_path),
                   data=write_data(tmp_path), engine="vllm", only=["flags"], replay_n=2, device="cuda:3",
                   dtype="bfloat16")
    assert f and asked, [(x.cause, x.status, x.evidence) for x in f]
    assert set(asked) == {("cuda:3", "bfloat16")}
