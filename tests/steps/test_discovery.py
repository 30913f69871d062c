"""discover(): notebook 01 end to end on the samples; never raises on bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lib.steps.case import SAMPLES_DIR
from eagle3lib.steps.discovery import config_paths, discover

SEED = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path data/demo/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")
FIXED = SEED.replace("steps 1 ", "steps 15 ")
DRAFT = json.loads((SAMPLES_DIR / "demo_draft_config.json").read_text())


def test_config_paths_fall_back_to_samples(tmp_path, monkeypatch):
    """An unbuilt demo world falls back to the shipped samples; an explicit path never does."""
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    target, draft, notes = config_paths()
    assert (target.name, draft.name) == ("demo_target_config.json", "demo_draft_config.json") and len(notes) == 2
    target, _, notes = config_paths(str(tmp_path / "mine"))
    assert target == tmp_path / "mine" / "config.json" and len(notes) == 1


def test_discover_reproduces_the_seed_headline(tmp_path, monkeypatch):
    """Seed command + sample log: headline 'num_draft_tokens 16 → 2 (topk=1 rule, SGLang ≥ 0.4.6)', log agrees."""
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    d = discover(SEED, "0.5.6", server_log=str(SAMPLES_DIR / "sglang_seed_startup.log"))
    assert d.problems == () and d.target_arch == "LlamaForCausalLM" and d.num_layers == 8
    assert d.headline() == "num_draft_tokens 16 → 2 (topk=1 rule, SGLang ≥ 0.4.6)"
    found = d.findings()
    json.dumps(found)
    assert found["changed"]["speculative_num_draft_tokens"] == [16, 2] and found["log_confirms"] is True
    assert found["vllm_num_speculative_tokens"] == 1
    assert TOPK1_LINE in d.log_proof()["message"].str.cat()
    fixed = discover(FIXED, "0.5.6")
    assert fixed.headline() == "speculative settings run as requested on SGLang 0.5.6"
    assert fixed.vllm["num_speculative_tokens"] == 15


TOPK1_LINE = "speculative_num_draft_tokens is adjusted"


def test_discover_never_raises_on_bad_input(tmp_path, monkeypatch):
    """Not a launch command, a missing server_info, a bad version, a vLLM command: problems, not crashes."""
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    d = discover("ls -la", "banana", server_info=str(tmp_path / "none.json"))
    assert len(d.problems) == 3 and d.resolution is None
    assert d.headline().startswith("launch command unreadable: launch command: not a SGLang")
    assert d.version == "0.5.6"
    v = discover('vllm serve m --speculative-config \'{"method": "eagle3", "model": "/d", '
                 '"num_speculative_tokens": 3}\'')
    assert v.vllm["sglang"]["speculative_num_steps"] == 3 and v.diff.empty
    assert v.headline() == ("vLLM eagle3 with K=3 (SGLang steps 3, topk 1, ndt K+1); method given explicitly")
    rej = discover(SEED.replace("--speculative-num-steps 1 ", ""), "0.5.6")
    assert rej.headline().startswith("SGLang 0.5.6 refuses")
    info = discover(SEED, server_info=str(SAMPLES_DIR / "sglang_server_info_seed.json"))
    assert info.version == "0.5.6" and any("/server_info" in n for n in info.notes)
    clash = discover(SEED, "0.5.13", server_info="data/samples/sglang_server_info_seed.json")   # repo-relative
    assert clash.server_info is not None and any("/server_info says 0.5.6" in n for n in clash.notes)
    assert discover("python -m sglang.launch_server --model-path m").headline().startswith("no speculative")


def test_shipped_sample_configs_match_the_shipped_world():
    """The fallback samples are the shipped demo world's configs (a rebuilt world must refresh them too)."""
    from eagle3lib.demo.shipped import ARTIFACTS
    for what in ("draft", "target"):
        sample = json.loads((SAMPLES_DIR / f"demo_{what}_config.json").read_text())
        world = json.loads((ARTIFACTS / what / "config.json").read_text())
        sample.pop("_name_or_path"), world.pop("_name_or_path", None)
        assert sample == world, f"data/samples/demo_{what}_config.json differs from {ARTIFACTS / what}/config.json"


def test_a_knob_that_does_not_parse_is_a_problem_never_a_rewrite(tmp_path):
    """`--speculative-num-steps three`: the strict parse error is a problem, no SGLang resolution (it once raised a
    TypeError in the rule table), ndt_override not checked naming the flag; a binary command file is refused."""
    import pytest

    from eagle3lib.errors import ServingArgsError
    from eagle3lib.steps.case import command_text
    d = discover(SEED.replace("--speculative-num-steps 1", "--speculative-num-steps three"), "0.5.6")
    assert d.resolution is None and d.problem_errors == ("ServingArgsError",)
    assert "--speculative-num-steps" in d.problems[0] and "'three'" in d.problems[0]
    (f,) = d.cause_findings()
    assert f.status == "not checked" and "--speculative-num-steps" in f.needs
    v = discover("vllm serve x --speculative-config {bad json")
    assert v.vllm["method"] is None and v.vllm.get("unread") and v.cause_findings()[0].status == "not checked"
    binary = tmp_path / "launch.txt"
    binary.write_bytes(b"\xcc\x81\xff\x00launch")
    with pytest.raises(ServingArgsError, match="cannot be read as text"):
        command_text(str(binary))


# --- ndt_override without a startup log: the rule table at the version given, else range by range

def test_ndt_at_a_given_version_without_a_log_is_confirmed_by_the_rule_table(tmp_path, monkeypatch):
    """Seed command at SGLang 0.5.6, no log or /server_info: the table decides (confirmed, not a measurement)."""
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    (f,) = discover(SEED, "0.5.6").cause_findings()
    assert (f.status, f.measured, f.needs) == ("confirmed", False, "")
    assert "rule table at 0.5.6" in f.evidence["decided_by"] and "16 -> 2" in f.summary
    (g,) = discover(SEED, "0.4.5").cause_findings()     # before the topk=1 rule (PR#5318, 0.4.6)
    assert g.status == "ruled out"


def test_ndt_with_no_version_is_answered_per_version_range(tmp_path, monkeypatch):
    """No version anywhere: the seed command is rewritten from 0.4.6 on, run as asked before: suspected, naming the
    version; the fixed command runs as asked in every range: ruled out."""
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    from eagle3lib.sglang_engine import introspect as sglang_introspect
    monkeypatch.setattr(sglang_introspect, "sglang_available", lambda: False)     # the rule table's answer, SGLang or not
    d = discover(SEED)
    (f,) = d.cause_findings()
    assert d.version_source == "default" and f.status == "suspected" and "SGLang version" in f.needs
    assert f.evidence["by_version_range"] == {"0.4.1 to 0.4.6 (excl.)": "as requested",
                                              "0.4.6 onwards": "num_draft_tokens 16 -> 2"}
    assert "--speculative-num-steps 15" in f.fix and "topk1_ndt" in f.source
    (g,) = discover(FIXED).cause_findings()
    assert g.status == "ruled out" and set(g.evidence["by_version_range"].values()) == {"as requested"}


def test_a_version_the_launch_command_or_the_server_log_names_decides_by_the_rule_table(tmp_path, monkeypatch):
    """No sglang_version given: a launch run from a versioned environment, or a log naming a pinned install, gives
    the version; the rule table at it decides (0.5.6: rewritten; 0.4.5: run as asked). Nothing named: unknown."""
    from eagle3lib.sglang_engine.startup import version_in_text
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    assert [version_in_text(t) for t in ("pip install sglang==0.5.6", "image lmsysorg/sglang:v0.5.3rc0",
                                          "/opt/sglang-0.4.6.post1/bin/python", "sglang_router 1.2.3", SEED)] == [
        "0.5.6", "0.5.3rc0", "0.4.6.post1", None, None]
    d = discover(SEED.replace("python -m", "/opt/venvs/sglang-0.5.6/bin/python -m"))
    (f,) = d.cause_findings()
    assert (d.version, d.version_source, f.status) == ("0.5.6", "launch command", "confirmed")
    assert "rule table at SGLang 0.5.6 (launch command)" in f.summary
    log = tmp_path / "server.log"
    log.write_text("Successfully installed sglang==0.4.5\n[2025-01-01 00:00:00] server started\n")
    d = discover(SEED, server_log=str(log))
    (f,) = d.cause_findings()
    assert (d.version, d.version_source, f.status) == ("0.4.5", "server log", "ruled out")
    assert discover(SEED, "0.5.6", server_log=str(log)).version == "0.5.6"          # the params' version wins


def test_with_sglang_installed_its_own_resolver_answers_a_launch_of_unknown_version(tmp_path, monkeypatch):
    """SGLang importable: the launch of unknown version is resolved by SGLang's own ServerArgs (topk 1: 16 draft
    tokens run as num_steps + 1), named as the installed version's answer."""
    pytest.importorskip("sglang")
    from eagle3lib.sglang_engine import introspect as sglang_introspect
    from eagle3lib.serving.launch import parse_launch
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    intro = sglang_introspect.introspect(parse_launch(SEED))
    if intro.error:
        pytest.skip(f"the installed SGLang cannot resolve a launch here: {intro.error[:120]}")
    (f,) = discover(SEED).cause_findings()
    assert f.where.endswith("the installed SGLang's resolver") and f.status == "confirmed", f
    assert f.evidence["num_draft_tokens_effective"] == 2


@pytest.mark.slow
def test_serving_checks_with_the_data_measure_the_context_as_this_engine_serves_it(tmp_path):
    """The demo draft declaring 64 positions (trained past them) on an SGLang launch that allows a draft context
    below the target's, with the training data: the context is replayed and served as SGLang does (drafts on): ruled
    out, measured; without the data: not replayed (the config's word only: suspected, not measured). The same launch without the variable is refused by SGLang 0.5.6
    (the engine table's refusal row): confirmed, by the engine fact, with no replay."""
    import shutil
    from eagle3lib.demo import world as demo
    from eagle3lib.checks.inputs import read_artifacts
    from eagle3lib.steps.discovery import serving_checks
    w = demo.ensure_world(progress=False)
    d = tmp_path / "draft"
    shutil.copytree(w.draft, d)
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**raw, "max_position_embeddings": 64}))
    allowed = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 " + FIXED
    def checked(launch, data=None):
        art = read_artifacts(draft=d, target=w.target, data=data, launch=launch)
        return serving_checks(art, discover(launch, "0.5.6", str(w.target), str(d)))
    (f,) = [x for x in checked(allowed, w.seed_data) if x.cause == "short_context"]
    assert (f.status, f.measured) == ("ruled out", True) and set(f.evidence["served_past_context"]) == {"sglang"}
    (g,) = [x for x in checked(allowed) if x.cause == "short_context"]
    assert (g.status, g.measured) == ("suspected", False)
    (r,) = [x for x in checked(FIXED, w.seed_data) if x.cause == "short_context"]
    assert (r.status, r.measured, r.evidence["draft_max_position_embeddings"]) == ("confirmed", False, 64)
    assert "refuses" in r.summary and "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in r.fix


@pytest.mark.slow
def test_without_a_launch_the_data_still_decide_the_rope_by_a_replay(tmp_path):
    """A draft config with rope_theta 1e6 (trained at the target's 1e4), no launch command, the training data
    given: notebook 01 replays under both RoPEs and confirms rope_mismatch by measurement (notebook 00 may have had
    no train_data); without the data it is not replayed there (the configs' word only: suspected, not measured)."""
    import shutil
    from eagle3lib.demo import world as demo
    from eagle3lib.checks.inputs import read_artifacts
    from eagle3lib.steps.discovery import serving_checks
    w = demo.ensure_world(progress=False)
    d = tmp_path / "draft"
    shutil.copytree(w.draft, d)
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**raw, "rope_theta": 1_000_000.0}))
    unlaunched = discover("", "", str(w.target), str(d))
    found = [x for x in serving_checks(read_artifacts(draft=d, target=w.target, data=w.seed_data), unlaunched)
             if x.cause == "rope_mismatch" and x.measured]
    assert [x.status for x in found] == ["confirmed"]
    assert found[0].evidence["acc_0_target_rope"] > found[0].evidence["acc_0_draft_rope"]
    assert [(x.status, x.measured) for x in serving_checks(read_artifacts(draft=d, target=w.target), unlaunched)
            if x.cause == "rope_mismatch"] == [("suspected", False)]


def test_the_launchs_version_runner_resolution_and_installed_answer_are_its_homes(tmp_path, monkeypatch):
    """discover asks the launch's home: its offline resolver (`resolve`, at the discovered version), its installed
    engine (`introspect`), its startup log (`startup_log`: the version and model runner where the home does not
    resolve); a home without them gives none, never another engine's."""
    from dataclasses import replace
    from types import SimpleNamespace
    from eagle3lib.serving.homes import homes
    monkeypatch.setenv("EAGLE3LIB_DEMO_DIR", str(tmp_path / "no_world"))
    log = tmp_path / "server.log"
    log.write_text("any line\n")
    vllm = ("vllm serve data/demo/target --speculative-config "
            '\'{"method": "eagle3", "model": "data/demo/draft", "num_speculative_tokens": 3}\'')
    told = SimpleNamespace(engine="vllm", version="9.9.9", runner="V7")
    monkeypatch.setitem(homes(), "vllm", replace(homes()["vllm"], startup_log=lambda src, **kw: told))
    d = discover(vllm, server_log=str(log))
    assert (d.launch_version, d.launch_runner, d.resolution, d.introspection) == ("9.9.9", "v7", None, None)
    assert d.headline().startswith("vLLM eagle3 with K=3")
    asked = []
    monkeypatch.setitem(homes(), "sglang", replace(
        homes()["sglang"], resolve=lambda la, v, arch, strict: asked.append(v),     # resolves to nothing
        introspect=lambda la, path_map: "installed answer",
        startup_log=lambda src, **kw: SimpleNamespace(engine="sglang", version="9.9.9", runner="V7")))
    d = discover(SEED, "0.5.6", server_log=str(log))
    assert asked == ["0.5.6"] and d.launch_version == "0.5.6" and d.introspection == "installed answer"
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], resolve=None, introspect=None,
                                                   startup_log=None))
    d = discover(SEED, "0.5.6", server_log=str(log))
    assert (d.resolution, d.introspection, d.launch_version, d.launch_runner, d.log) == (None,) * 5
    assert "the server log is not read: the sglang home reads no startup log" in d.notes


def test_the_fixed_command_is_read_inside_the_cases_reads():
    """Notebook 01 discovers the corrected command after its part (`discovery.fixed`): inside the case's reads, so the
    draft's and target's configs the part read are not opened again (they were, twice, from the notebook's cell)."""
    from eagle3lib import opened
    from eagle3lib.demo import world as demo
    from eagle3lib.steps import case as C
    from eagle3lib.steps import discovery
    from eagle3lib.steps.part import Inputs
    w = demo.ensure_world(progress=False)
    case = C.case_of(Inputs())
    launched = discovery.run(case).results["discovery"]
    with opened.counting() as opens:
        fixed = discovery.fixed(case, launched)
    assert fixed.headline() == "speculative settings run as requested on SGLang 0.5.6"
    assert fixed.launch.flags["speculative_num_steps"] == 15 and fixed.version == launched.version
    assert not opens, dict(opens)
    with opened.counting() as outside:          # the same discovery outside the case's reads opens the configs
        discover(case.fixed_command, launched.version, case.given.target, case.given.draft)
    resolved = {str(Path(p).resolve()): n for p, n in outside.items()}    # the demo folder may be a link
    assert resolved[str((w.draft / "config.json").resolve())] == 1
