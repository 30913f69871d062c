"""serving.homes: each engine of the one list has its home, found by its name; an unknown name is refused. Each
home's launch rules (`EngineHome.launch_rules`, `speculating`) decide their own causes from the engine's own flags;
the checks ask the launch's home, and a home without a rule leaves the cause not checked, naming it."""
from dataclasses import replace

import pytest

from eagle3lib.causes import CATALOGUE, Finding
from eagle3lib.checks.draft_feed import DRAFT_FEED_CAUSES, check_draft_feed
from eagle3lib.checks.draft_serving import DRAFT_SERVING_CAUSES, check_draft_serving
from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.launch_flags import ENGINE_RULES, LAUNCH_FLAGS_CAUSES, check_launch_flags, speculating

from eagle3lib.engine_kit.home import EngineHome
from eagle3lib.engines.versions import SERVING_ENGINES
from eagle3lib.errors import ServingArgsError
from eagle3lib.serving.homes import home, homes
from eagle3lib.serving.launch import parse_launch
from tests.checks.world import draft_raw, write_draft, write_target


def test_every_listed_engine_has_its_home_in_its_folder():
    found = homes()
    assert tuple(found) == SERVING_ENGINES
    for name, h in found.items():
        assert isinstance(h, EngineHome) and h.name == name
        assert type(h).__module__ == "eagle3lib.engine_kit.home"
        assert h.run_log.__module__ == f"eagle3lib.{name}_engine.run_log"
        assert h.entrypoint.__module__ == f"eagle3lib.{name}_engine.launch"
        assert h.id_readings.__module__ == f"eagle3lib.{name}_engine.ids"
        assert h.flags and all(k.startswith("-") for k in h.flags)


def test_each_home_recognises_its_own_commands_only():
    sg, vl = home("sglang"), home("vllm")
    assert sg.entrypoint(["python", "-m", "sglang.launch_server", "--model-path", "M"]) == \
        ("python -m sglang.launch_server", ["--model-path", "M"])
    assert vl.entrypoint(["vllm", "serve", "M"]) == ("vllm serve", ["M"])
    assert vl.entrypoint(["python", "-m", "vllm.entrypoints.cli.main", "serve", "M"]) == \
        ("python -m vllm.entrypoints.cli.main serve", ["M"])
    assert sg.entrypoint(["vllm", "serve", "M"]) is None and vl.entrypoint(["sglang", "serve"]) is None


def test_each_home_reads_the_aux_ids_its_own_way():
    """One config, each home's reading: SGLang adds 1 to eagle_config's output-of-layer ids; vLLM's V1 runner
    reads them as they are (the layer_reading table puts them beside the trained ones)."""
    raw = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 29]}}
    (sg,) = home("sglang").id_readings(raw, 32, "0.5.6", "LlamaForCausalLM", None)
    (v1,) = home("vllm").id_readings(raw, 32, "0.32.0", "LlamaForCausalLM", "v1")
    assert (sg.engine, sg.capture, sg.boundaries) == ("sglang", (2, 16, 30), ("layer_in.2", "layer_in.16", "layer_in.30"))
    assert (v1.engine, v1.capture, v1.runner) == ("vllm", (1, 15, 29), "v1")
    (last,) = home("sglang").id_readings({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [31]}}, 32, "0.5.6",
                                         None, None)
    assert last.boundaries == (None,) and "never captured by SGLang" in last.slot_problems[0]


def test_each_home_gives_the_one_capture_a_launch_gets_or_says_what_decides():
    """SGLang with no version reads a DeepSeek draft's ids whose first is not 1 differently before and after
    PR#25454: no capture until the version is named; vLLM's runners read nested ids from other keys: none until the
    runner is named."""
    raw = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 29]}}
    sg, vl, ds = home("sglang"), home("vllm"), "DeepseekV3ForCausalLM"
    assert sg.id_reading(raw, 32, None, ds, None) is None
    assert sg.id_reading(raw, 32, "0.5.6", ds, None).capture == (3, 16, 30)
    assert sg.id_reading(raw, 32, "head", ds, None).capture == (2, 15, 29)
    assert vl.id_reading(raw, 32, None, ds, None) is None
    assert vl.id_reading(raw, 32, None, ds, "v1").capture == (2, 15, 29)
    assert "SGLang version" in sg.id_undecided.needs and "model runner" in vl.id_undecided.needs
    assert "id_key rows" in sg.id_source() and "id_key rows" in vl.id_source()


def test_the_layer_ids_check_follows_the_homes_reading(tmp_path, monkeypatch):
    """check 1 asks the launch's home: what it reads decides, what it leaves undecided is suspected with the home's
    words, and a home that does not say how it reads ids leaves the causes not checked, naming it."""
    from eagle3lib.checks.layer_ids import check_layer_ids
    from eagle3lib.engine_kit.id_reading import Undecided
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, None))
    told = Undecided("told: the moon decides", "the moon decides", ("aux_layout_mismatch",), "the moon's phase")
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], id_reading=lambda *a: None, id_undecided=told))
    mismatch = {f.cause: f for f in check_layer_ids(art, engine="sglang", engine_version="0.5.6")}["aux_layout_mismatch"]
    assert mismatch.status == "suspected" and mismatch.needs == "the moon's phase"
    assert mismatch.evidence["engines"]["sglang"] == "told: the moon decides"
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], id_reading=None))
    found = {f.cause: f for f in check_layer_ids(art, engine="sglang", engine_version="0.5.6")}
    assert found["aux_layout_mismatch"].status == "not checked" and "id_reading" in found["aux_layout_mismatch"].needs


def test_an_unknown_engine_is_refused_naming_the_known_ones():
    with pytest.raises(ServingArgsError, match="unknown serving engine") as e:
        home("tgi")
    assert all(name in str(e.value) for name in SERVING_ENGINES)


def test_each_role_names_a_flag_of_its_own_engine():
    """A role (what a flag does, as the checks ask for it) maps to a field of that engine's own flag table, and a
    parsed launch answers it by its engine's home: the checks never write an engine's flag name."""
    fields = {name: {spec[0] for spec in h.flags.values()} for name, h in homes().items()}
    for name, h in homes().items():
        assert h.roles, f"{name}'s home names no role"
        assert not set(h.roles.values()) - fields[name], f"{name}: a role names a flag {name} does not take"
    sg = parse_launch("python -m sglang.launch_server --model-path t --pp-size 2 --chunked-prefill-size 512")
    vl = parse_launch("vllm serve t --pipeline-parallel-size 2 --max-num-batched-tokens 512")
    assert [la.get(la.field_for("pipeline_parallel")) for la in (sg, vl)] == [2, 2]
    assert [la.get(la.field_for("chunked_prefill_tokens")) for la in (sg, vl)] == [512, 512]


def test_a_launch_whose_home_has_no_role_is_not_checked_by_another_engines_flag(tmp_path):
    """The same vLLM command read by a home without roles (a made-up engine's): its chunk size is not read under
    vLLM's flag name, so the chunked-prefill cause is not checked, naming what is missing."""
    from dataclasses import replace

    from eagle3lib.checks.inputs import read_artifacts
    from eagle3lib.checks.launch_flags import check_launch_flags

    cmd = ("vllm serve t --max-num-batched-tokens 1024 --speculative-config "
           "'{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'")
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, None), launch=cmd,
                         served_prompts=[100, 900])
    seen = {f.cause: f for f in check_launch_flags(art)}["chunked_prefill_boundary"]
    assert seen.status == "ruled out" and seen.evidence["max_num_batched_tokens"] == 1024
    bare = replace(art, launch=replace(art.launch, engine="toy", roles={}))
    unread = {f.cause: f for f in check_launch_flags(bare)}["chunked_prefill_boundary"]
    assert unread.status == "not checked" and "toy's home names no chunked-prefill flag" in unread.summary


SG = ("python -m sglang.launch_server --model-path t --speculative-draft-model-path d "
      "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
      "--speculative-num-draft-tokens 4")
VL = "vllm serve t --speculative-config '{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'"
LAUNCH = {"sglang": SG, "vllm": VL}


@pytest.mark.parametrize("engine", sorted(homes()))
def test_every_rule_decides_its_own_cause_where_it_is_asked(engine):
    """Each rule of each home returns a Finding of the cause it is filed under, a catalogue cause one of the launch
    checks reports, with the `where` it was given."""
    rules = homes()[engine].launch_rules
    assert rules, f"{engine}'s home has no launch rules"
    la = parse_launch(LAUNCH[engine])
    for cause, rule in rules.items():
        assert cause in CATALOGUE and cause in LAUNCH_FLAGS_CAUSES + DRAFT_SERVING_CAUSES + DRAFT_FEED_CAUSES
        got = rule(la, f"here.{cause}")
        assert isinstance(got, Finding) and got.cause == cause and got.where == f"here.{cause}"


def test_both_homes_decide_the_same_causes():
    """What one engine's launch decides, the other's does too (else a cause would be silently unjudged on one)."""
    assert len({frozenset(h.launch_rules) for h in homes().values()}) == 1
    assert set(ENGINE_RULES) <= set(homes()["sglang"].launch_rules)


def test_a_rule_reads_only_its_own_engines_flag(tmp_path):
    """SGLang's --disable-radix-cache rules the stale prefix cache out on SGLang; the same switch means nothing to
    vLLM's rule, which reads --no-enable-prefix-caching."""
    sg = parse_launch(SG + " --disable-radix-cache")
    vl = parse_launch(VL + " --disable-radix-cache")
    assert homes()["sglang"].launch_rules["prefix_cache_stale_kv"](sg, "w").status == "ruled out"
    assert homes()["vllm"].launch_rules["prefix_cache_stale_kv"](vl, "w").status == "not checked"
    assert homes()["vllm"].launch_rules["prefix_cache_stale_kv"](
        parse_launch(VL + " --no-enable-prefix-caching"), "w").status == "ruled out"


def test_speculating_is_the_homes_reading():
    """SGLang speculates only with --speculative-algorithm; vLLM with a --speculative-config naming a method or a
    model, and cannot tell when that config is not JSON."""
    assert speculating(parse_launch(SG)) is True
    assert speculating(parse_launch("python -m sglang.launch_server --model-path t --speculative-draft-model-path d")) \
        is False
    assert speculating(parse_launch(VL)) is True and speculating(parse_launch("vllm serve t")) is False
    assert speculating(parse_launch("vllm serve t --speculative-config '[1, 2]'", strict=False)) is None


def test_a_home_without_rules_leaves_its_causes_not_checked_naming_it(tmp_path):
    """The same vLLM command read as a made-up engine's (no home, no rules): every cause a home decides is not
    checked, naming that engine's missing rule, never judged by vLLM's or SGLang's flags."""
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, None), launch=VL)
    toy = replace(art, launch=replace(art.launch, engine="toy", roles={}))
    found = {f.cause: f for f in check_launch_flags(toy) + check_draft_serving(toy) + check_draft_feed(toy)}
    for cause in homes()["vllm"].launch_rules:
        assert found[cause].status == "not checked", cause
        assert "toy's home has no launch rule" in found[cause].summary and "launch_rules" in found[cause].needs
    for cause in EVIDENCE_CAUSES:
        assert found[cause].status == "not checked", cause
        assert "toy's home reads no evidence" in found[cause].summary and "(evidence)" in found[cause].needs
    from eagle3lib.checks.launch_settings import check_launch
    method = {f.cause: f for f in check_launch(toy)}["wrong_method"]
    assert method.status == "not checked" and "toy's home has no method rule" in method.summary


def test_each_home_picks_the_method_its_own_way(tmp_path):
    """`EngineHome.method_rule`: SGLang's --speculative-algorithm EAGLE with an EAGLE-3 draft skips the fc
    (confirmed); vLLM with no method infers draft_model from a path without an EAGLE marker (confirmed), eagle3 from
    one with it (suspected: detection has overridden users), and a method given explicitly is ruled out."""
    from eagle3lib.checks.launch_settings import check_launch

    def method(cmd):
        art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, None),
                             launch=cmd)
        return {f.cause: f for f in check_launch(art)}["wrong_method"]
    assert method(SG.replace("EAGLE3", "EAGLE")).status == "confirmed"
    assert method(SG).status == "ruled out"
    assert method(VL).status == "ruled out"
    plain = method(VL.replace('"method": "eagle3", ', ""))          # no EAGLE marker in the path: draft_model
    assert plain.status == "confirmed" and plain.evidence["method"] == "draft_model"
    inferred = method(VL.replace('"method": "eagle3", "model": "d"', '"model": "d-eagle3"'))
    assert inferred.status == "suspected" and inferred.evidence["method_given"] is None


# the causes the checks judge from a home's LaunchEvidence (graphs, quantization, KV dtype, K schedule, grammars)
EVIDENCE_CAUSES = ("quantized_draft_graphs", "kv_cache_dtype", "k_schedule", "structured_output")


@pytest.mark.parametrize("engine, extra, want", [
    ("sglang", " --disable-cuda-graph --quantization fp8 --chunked-prefill-size -1 --grammar-backend none",
     dict(graphs_off=True, inherited_quantization="fp8", inherited_flag="--quantization", chunking_off=True,
          grammar_off=True, quantization=None)),
    ("sglang", " --speculative-draft-model-quantization unquant --chunked-prefill-size 2048",
     dict(graphs_off=False, quantization="unquant", chunking_off=False, grammar_off=False)),
    ("vllm", " --enforce-eager --no-enable-chunked-prefill",
     dict(graphs_off=True, chunking_off=True, quantization=None, inherited_quantization=None, k_schedule={})),
    ("vllm", " --compilation-config '{\"cudagraph_mode\": \"NONE\"}'", dict(graphs_off=True, chunking_off=None)),
])
def test_every_home_reads_its_own_flags_into_evidence(engine, extra, want):
    """`EngineHome.evidence`: each home reads how its launch runs the draft from its own flags."""
    got = homes()[engine].evidence(parse_launch(LAUNCH[engine] + extra))
    assert got.engine == engine and not got.problems
    assert {k: getattr(got, k) for k in want} == want


def test_vllms_speculative_config_is_its_evidence_and_an_unreadable_one_is_named():
    """vLLM gives the draft its quantization, KV dtype and K schedule in --speculative-config; a config that is not
    JSON leaves the three causes not checked, naming the flag."""
    spec = ('{"method": "eagle3", "model": "d", "num_speculative_tokens": 3, "quantization": "fp8", '
            '"kv_cache_dtype": "fp8_e4m3", "num_speculative_tokens_per_batch_size": {"1": 3, "64": 1}}')
    got = homes()["vllm"].evidence(parse_launch(f"vllm serve t --speculative-config '{spec}'"))
    assert (got.quantization, got.quantization_flag, got.kv_cache_dtype) == (
        "fp8", "speculative_config.quantization", "fp8_e4m3")
    assert got.k_schedule == {"num_speculative_tokens_per_batch_size": {"1": 3, "64": 1}}
    bad = parse_launch("vllm serve t --speculative-config 'method=eagle3'", strict=False)
    assert "--speculative-config is not a JSON object" in homes()["vllm"].evidence(bad).problems["draft"]


def test_the_checks_judge_the_homes_evidence_not_the_flags(tmp_path, monkeypatch):
    """The same SGLang launch, its home's evidence replaced: the checks follow the evidence (graphs off, chunking off,
    a K schedule, grammars off), never a flag of their own reading."""
    from eagle3lib.engine_kit.launch_evidence import LaunchEvidence

    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, None),
                         launch=SG + " --quantization fp8 --chunked-prefill-size 512")
    before = {f.cause: f for f in check_launch_flags(art) + check_draft_serving(art) + check_draft_feed(art)}
    assert before["quantized_draft_graphs"].status == "suspected" and before["k_schedule"].status == "ruled out"
    told = LaunchEvidence("sglang", graphs_off=True, graphs="off (told)", chunking_off=True, grammar_off=True,
                          k_schedule={"a_schedule": [1, 2]})
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], evidence=lambda la: told))
    after = {f.cause: f for f in check_launch_flags(art) + check_draft_serving(art) + check_draft_feed(art)}
    graphs = after["quantized_draft_graphs"]
    assert graphs.status == "ruled out" and "off (told)" in graphs.summary
    assert after["chunked_prefill_boundary"].status == "ruled out"
    assert after["structured_output"].status == "ruled out"
    assert after["k_schedule"].status == "confirmed" and "a_schedule" in after["k_schedule"].summary


def test_every_home_resolves_the_setting_its_launch_drafts():
    """`EngineHome.setting`: SGLang's rule table rewrites num_draft_tokens 16 at topk 1 to steps + 1 (the seed's
    rewrite); vLLM drafts a chain of K = num_speculative_tokens, and leaves K unknown where the config omits it."""
    seed = SG.replace("--speculative-num-steps 3", "--speculative-num-steps 1").replace(
        "--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 16")
    assert homes()["sglang"].setting(parse_launch(seed), "0.5.23", None) == (1, 1, 2)
    assert homes()["sglang"].setting(parse_launch(SG), "0.5.23", None) == (3, 1, 4)
    assert homes()["vllm"].setting(parse_launch(VL), None, None) == (3, 1, 4)
    no_k = "vllm serve t --speculative-config '{\"method\": \"eagle3\", \"model\": \"d\"}'"
    assert homes()["vllm"].setting(parse_launch(no_k), None, None) == (None, 1, None)
