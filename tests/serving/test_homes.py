"""serving.homes: each engine of the one list has its home, found by its name; an unknown name is refused."""
import pytest

from eagle3lib.engine_kit.home import EngineHome
from eagle3lib.engines.versions import SERVING_ENGINES
from eagle3lib.errors import ServingArgsError
from eagle3lib.serving.homes import home, homes
from eagle3lib.serving.launch import parse_launch


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
    assert sg.field_for("chunked_prefill_switch") is None and vl.field_for("chunked_prefill_switch")


def test_a_launch_whose_home_has_no_role_is_not_checked_by_another_engines_flag(tmp_path):
    """The same vLLM command read by a home without roles (a made-up engine's): its chunk size is not read under
    vLLM's flag name, so the chunked-prefill cause is not checked, naming what is missing."""
    from dataclasses import replace

    from eagle3lib.checks.inputs import read_artifacts
    from eagle3lib.checks.launch_flags import check_launch_flags
    from tests.checks.world import draft_raw, write_draft, write_target

    cmd = ("vllm serve t --max-num-batched-tokens 1024 --speculative-config "
           "'{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'")
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, None), launch=cmd,
                         served_prompts=[100, 900])
    seen = {f.cause: f for f in check_launch_flags(art)}["chunked_prefill_boundary"]
    assert seen.status == "ruled out" and seen.evidence["max_num_batched_tokens"] == 1024
    bare = replace(art, launch=replace(art.launch, engine="toy", roles={}))
    unread = {f.cause: f for f in check_launch_flags(bare)}["chunked_prefill_boundary"]
    assert unread.status == "not checked" and "toy's home names no chunked-prefill flag" in unread.summary
