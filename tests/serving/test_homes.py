"""serving.homes: each engine of the one list has its home, found by its name; an unknown name is refused."""
import pytest

from eagle3lib.engine_kit.home import EngineHome
from eagle3lib.engines.versions import SERVING_ENGINES
from eagle3lib.errors import ServingArgsError
from eagle3lib.serving.homes import home, homes


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
