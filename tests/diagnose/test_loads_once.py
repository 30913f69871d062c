"""One diagnose run loads the target at most once (every step that recaptures shares it), and not at all when no
step needs a recapture. Counted twice: eagle3lib's own load count and every `from_pretrained` on the target."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
import transformers

from eagle3lib.demo import world as demo
from eagle3lib.demo.sweep import ensure_serving_dump
from eagle3lib.diagnose.parts import Inputs, run
from eagle3lib.hidden import targets

pytestmark = pytest.mark.slow     # tens of seconds: the full suite (make test-all), not make test

SEED_LAUNCH = ("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
               "--speculative-draft-model-path D --speculative-num-steps 1 --speculative-eagle-topk 1 "
               "--speculative-num-draft-tokens 16")


@pytest.fixture
def counted(monkeypatch):
    """{resolved path: from_pretrained calls}, counting from now on."""
    calls: Counter = Counter()
    orig = transformers.PreTrainedModel.from_pretrained.__func__

    def from_pretrained(cls, path, *a, **k):
        calls[str(path)] += 1
        return orig(cls, path, *a, **k)

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(from_pretrained))
    targets.clear_cache()
    yield calls
    targets.clear_cache()


def test_a_diagnose_run_with_data_heldout_launch_and_dump_loads_the_target_once(counted):
    """The issue's run (data, held-out data, a launch command, a dump): identification, serving layout, replay,
    the dump's comparison, the proof of fix and the drift check all recapture through one loaded target."""
    w = demo.ensure_world(progress=False)
    dump = ensure_serving_dump("seed")
    targets.clear_cache()
    counted.clear()
    r = run(Inputs(draft=str(w.draft), target=str(w.target), train_data=str(w.seed_data),
                   heldout_data=str(w.heldout_data),
                   launch=SEED_LAUNCH, sglang_version="0.5.6", serving_dump=str(dump), n=4, drift_samples=2))
    assert r.problems == ()
    assert "aux_layout_mismatch" in {v.cause for v in r.diagnosis.alarms}
    assert targets.loads() == Counter({str(w.target.resolve()): 1})
    assert sum(n for p, n in counted.items() if str(w.target) in p) == 1, counted


def test_no_load_when_no_step_recaptures(counted):
    """A user's draft and target with only a launch command and its log: no step captures, nothing is loaded."""
    w = demo.ensure_world(progress=False)
    targets.clear_cache()
    counted.clear()
    r = run(Inputs(draft=str(w.draft), target=str(w.target), launch=SEED_LAUNCH, sglang_version="0.5.6"))
    assert "ndt_override" in {v.cause for v in r.diagnosis.alarms}
    assert targets.loads() == Counter() and not any(str(w.target) in p for p in counted), counted


def test_a_diagnose_run_reads_each_training_sample_once(monkeypatch):
    """The same run: every replay, check, identification and recapture shares what was read (eagle3lib.once): each
    sample line and hidden-state file of the training and held-out data is read from disk once, each
    dataset_info.json, config.json and safetensors header parsed once, each jsonl index built once and the target's
    tokenizer loaded once (before: one sample 68 times, the target's config.json 24, benchmarks/NOTES.md)."""
    from eagle3lib.samples import readers
    w = demo.ensure_world(progress=False)
    reads: Counter = Counter()
    line, info, build = readers._load_seed_line, readers._read_info, readers._SeedIndex._index_lines

    def counted_line(jsonl, lineno, text, opts):
        reads[("sample", str(jsonl), lineno, opts)] += 1
        return line(jsonl, lineno, text, opts)

    def counted_info(root):
        reads[("info", str(root))] += 1
        return info(root)

    def counted_build(self):
        reads[("index", str(self.path))] += self._offsets is None     # asked at every line; built at the first
        return build(self)
    monkeypatch.setattr(readers, "_load_seed_line", counted_line)
    monkeypatch.setattr(readers, "_read_info", counted_info)
    monkeypatch.setattr(readers._SeedIndex, "_index_lines", counted_build)
    from eagle3lib.model import config, safefiles
    parsed, header = config._parsed, safefiles._header
    monkeypatch.setattr(config, "_parsed", lambda f: reads.update([("config", str(f))]) or parsed(f))
    monkeypatch.setattr(safefiles, "_header", lambda f: reads.update([("header", str(f))]) or header(f))
    tokenizer = transformers.AutoTokenizer.from_pretrained.__func__
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(
        lambda cls, path, *a, **k: reads.update([("tokenizer", str(path))]) or tokenizer(cls, path, *a, **k)))
    r = run(Inputs(draft=str(w.draft), target=str(w.target), train_data=str(w.seed_data),
                   heldout_data=str(w.heldout_data), launch=SEED_LAUNCH, sglang_version="0.5.6", n=4,
                   drift_samples=2))
    assert r.problems == () and "aux_layout_mismatch" in {v.cause for v in r.diagnosis.alarms}
    assert {k[0] for k in reads} == {"sample", "info", "index", "config", "header", "tokenizer"} and len(reads) > 8
    assert {str(w.draft / "config.json"), str(w.target / "config.json")} <= {k[1] for k in reads if k[0] == "config"}
    assert {k: n for k, n in reads.items() if n != 1} == {}


def counted_weights(monkeypatch) -> Counter:
    """{(what, resolved path, dtype): reads}: every `load_draft` (the draft's weights, wherever it is imported) and
    every read of the target's embedding / lm_head tensor from disk, counting from now on."""
    import sys
    from eagle3lib.model import checkpoint, target
    reads: Counter = Counter()
    draft, tensor = checkpoint.load_draft, target.load_target_tensor

    def load_draft(path, *a, **k):
        reads[("draft", str(Path(path).resolve()), str(k.get("dtype")))] += 1
        return draft(path, *a, **k)

    def load_target_tensor(path, which="embed", dtype=None):
        reads[(which, str(Path(path).resolve()), str(dtype))] += 1
        return tensor(path, which, dtype)
    for module in [m for m in sys.modules.values() if m is not None and m.__name__.startswith("eagle3lib")]:
        for name, fn, new in (("load_draft", draft, load_draft), ("load_target_tensor", tensor, load_target_tensor)):
            if getattr(module, name, None) is fn:
                monkeypatch.setattr(module, name, new)
    return reads


def demo_verdicts(r) -> list[tuple[str, str]]:
    return sorted((v.cause, v.status) for v in r.diagnosis.verdicts)


def test_a_demo_diagnosis_loads_the_draft_and_the_targets_embedding_and_lm_head_once(monkeypatch):
    """Issue 49's evidence once: the checks' replays, notebook 02's replay and searches, the served prediction and
    the demo engine serving it, the proof of fix and the drift check share one loaded replay setup (`once`): the
    draft's weights are loaded once and the target's embedding and lm_head read once (before: 5 draft loads, 5
    embedding and 4 lm_head reads, benchmarks/NOTES.md)."""
    w = demo.ensure_world(progress=False)
    reads = counted_weights(monkeypatch)
    r = run(Inputs(draft="", launch=SEED_LAUNCH, sglang_version="0.5.6", n=4, drift_samples=2))
    assert r.problems == () and "aux_layout_mismatch" in {v.cause for v in r.diagnosis.alarms}
    draft, tgt = str(w.draft.resolve()), str(w.target.resolve())
    assert reads == Counter({("draft", draft, "torch.float32"): 1, ("embed", tgt, "None"): 1,
                             ("lm_head", tgt, "None"): 1}), reads


def test_the_diagnosis_dtype_reaches_the_checks_replay_and_the_verdicts_stand(monkeypatch):
    """--dtype bfloat16: the checks' replay setup (`Artifacts.replay_setup`) holds the draft in bf16 (it loaded
    float32 whatever was asked), the one bf16 load every replay of the diagnosis shares; the demo's verdicts are
    float32's. The served prediction replays in its own dtype ("auto", as the engine loads the checkpoint: float32
    on CPU) and the demo engine serves the draft as stored (float32): one float32 load, shared by both, before
    the bf16 one (one setup is kept at a time: the parts' order keeps each dtype's replays together)."""
    from eagle3lib.checks import inputs as check_inputs
    w = demo.ensure_world(progress=False)
    setups = []
    cached = check_inputs.Artifacts.__dict__["replay_setup"]       # a property reading through Artifacts.once

    def replay_setup(art):
        setups.append(cached.fget(art))
        return setups[-1]
    monkeypatch.setattr(check_inputs.Artifacts, "replay_setup", property(replay_setup))
    given = dict(draft="", launch=SEED_LAUNCH, sglang_version="0.5.6", n=4, drift_samples=2)
    fp32 = run(Inputs(**given))
    assert setups and {p.dtype for s in setups for p in s.model.parameters()} == {torch.float32}
    setups.clear()
    reads = counted_weights(monkeypatch)
    bf16 = run(Inputs(**given, dtype="bfloat16"))
    assert setups and {p.dtype for s in setups for p in s.model.parameters()} == {torch.bfloat16}
    assert fp32.problems == () and bf16.problems == ()
    assert demo_verdicts(bf16) == demo_verdicts(fp32)
    draft = str(w.draft.resolve())
    assert {k: n for k, n in reads.items() if k[0] == "draft"} == {("draft", draft, "torch.bfloat16"): 1,
                                                                  ("draft", draft, "torch.float32"): 1}, reads


def test_the_trained_config_and_tensor_searches_run_once_per_diagnosis(monkeypatch):
    """The served prediction (01) and the training-sample replay (02) ask the training samples the same question of
    the same setup: the config search and the artifact search run once (before: once per part, each replaying every
    candidate field; the largest share of a seed-scale diagnosis)."""
    from eagle3lib.steps import trained_config
    w = demo.ensure_world(progress=False)
    calls: Counter = Counter()
    search = trained_config.trained_config_search

    def counted(setup, data, **k):
        calls[(setup.draft_path, str(data))] += 1
        return search(setup, data, **k)
    monkeypatch.setattr(trained_config, "trained_config_search", counted)
    r = run(Inputs(draft=str(w.draft), target=str(w.target), train_data=str(w.seed_data), launch=SEED_LAUNCH,
                   sglang_version="0.5.6", served_log="data/samples/sglang_seed_decode.log", n=4, drift_samples=2))
    assert r.problems == () and "ndt_override" in {v.cause for v in r.diagnosis.alarms}
    assert list(calls.values()) == [1], calls        # both parts asked; one search ran


def test_a_diagnosis_reads_the_checks_artifacts_once_and_identifies_the_trained_layout_once(monkeypatch):
    """The checks of every part judge the case's one Artifacts (`steps.case.Case.artifacts`): the inputs are read
    into it once, never again from their paths (`run_checks`' own reading), and the trained layout the checks compare
    with is identified by recapture once (notebook 01's checks and notebook 03's drift check share it)."""
    from eagle3lib.checks import inputs, judge
    from eagle3lib.steps import case as case_module
    w = demo.ensure_world(progress=False)
    dump = ensure_serving_dump("seed")
    reads, identified = Counter(), Counter()
    real_read, real_layout = inputs.read_artifacts, inputs.trained_layout

    def read(*a, where, **k):
        reads[where] += 1
        return real_read(*a, **k)

    def layout(ds, cfg, L, model=None, n=3):
        identified["recaptured" if model is not None else "declared"] += 1
        return real_layout(ds, cfg, L, model=model, n=n)
    monkeypatch.setattr(case_module, "read_artifacts", lambda *a, **k: read(*a, where="case", **k))
    monkeypatch.setattr(judge, "read_artifacts", lambda *a, **k: read(*a, where="run_checks", **k))
    monkeypatch.setattr(inputs, "trained_layout", layout)
    from eagle3lib.diagnose import parts
    cases = []
    monkeypatch.setattr(parts, "case_of", lambda i: cases.append(case_module.case_of(i)) or cases[-1])
    r = run(Inputs(draft=str(w.draft), target=str(w.target), train_data=str(w.seed_data), launch=SEED_LAUNCH,
                   sglang_version="0.5.6", serving_dump=str(dump), n=2, drift_samples=2))
    assert r.problems == ()
    # what the case's artifacts keep for the whole diagnosis: the identified layout, never a model, setup or tensor
    # (the checks' and the served prediction's loads are scoped to their call: Artifacts.scoped)
    (case,) = cases
    assert [k for k in case.artifacts.read] == [("identified", 3)], list(case.artifacts.read)
    assert "01 serving settings" in r.findings      # its checks replay the layer ids against the identified layout
    assert ("target_drift", "ruled out", True) in {(f.cause, f.status, f.measured)
                                                   for f in r.findings["03 hidden-state diffing"]}
    assert reads == Counter({"case": 1}), reads
    assert identified["recaptured"] == 1, identified


def opens_beside_the_tokenizer(inp: Inputs, target: Path) -> tuple[Counter, object]:
    """(path -> times this process opened it during one diagnosis of `inp`, less what transformers opens in its one
    tokenizer load of `target`, measured on its own, but the config.json: eagle3lib hands the tokenizer load the
    config it read (`model.target.load_tokenizer`), so that file counts every open; the run)."""
    from eagle3lib import opened
    with opened.counting() as own:
        transformers.AutoTokenizer.from_pretrained(str(target))
    tokenizer = Counter({p: n for p, n in own.items() if p.startswith(str(target.resolve()))
                         and Path(p).name != "config.json"})
    targets.clear_cache()
    with opened.counting() as opens:
        r = run(inp)
    return Counter({p: n - tokenizer[p] for p, n in opens.items()}), r


def test_every_input_file_of_a_vllm_deployment_is_opened_once(monkeypatch):
    """Issue 49's "each input file opened and parsed once per diagnose", counted by the process's own audit hook
    (`opened.counting`), whichever reader opens it: the launch file, vLLM's server log (read by the inputs' check,
    the discovery's SGLang-or-vLLM reader, vLLM's own log reader and what vLLM said), its /metrics text (the check
    and the served runs), the serving dump's manifest and requests (the check, the served layout, the replay, the
    diffing) and the draft's and target's config.json are each opened once (before: the log 4 times, the metrics 4,
    the manifest 5, the target's config 5). Beside them only what transformers opens in its one tokenizer load
    (measured on its own) and the training samples, each read once when first asked for (the test above).
    vLLM's probe is not asked (a separate process, the real vLLM: tests/vllm_engine)."""
    from eagle3lib.vllm_engine import env as vllm_env
    w = demo.ensure_world(progress=False)
    dep = Path(__file__).resolve().parents[2] / "data" / "demo_vllm" / "off_by_one"   # shipped, as served by vLLM
    served = dep / "served"
    monkeypatch.setattr(vllm_env, "vllm_python", lambda: None)
    opens, r = opens_beside_the_tokenizer(Inputs(
        draft=str(dep / "draft"), target=str(w.target), train_data=str(w.seed_data), launch=str(served / "launch.txt"),
        server_log=str(served / "server.log"), served_log=str(served / "metrics.txt"), serving_dump=str(dep / "dump"),
        serving_engine="vllm", n=4), w.target)
    assert r.problems == () and r.diagnosis.alarms
    inputs = [served / "launch.txt", served / "server.log", served / "metrics.txt", dep / "dump" / "manifest.json",
              *sorted((dep / "dump").glob("req_*.safetensors")), dep / "draft" / "config.json",
              w.target / "config.json"]
    counts = {p.name if p.parent == w.target else str(p.relative_to(dep)): opens[str(p.resolve())] for p in inputs}
    assert counts == {k: 1 for k in counts}, counts
    data = str(w.seed_data.resolve())
    again = {p: n for p, n in opens.items() if n > 1 and not p.startswith(data)
             and (p.startswith(str(dep.resolve())) or p.startswith(str(w.target.resolve())))}
    assert again == {}, again


def test_every_input_file_of_an_sglang_launch_is_opened_once():
    """The same on SGLang's side: its startup log (the inputs' check and the discovery), its decode log (the check
    and the served runs), a saved /server_info (the check and the discovery), the draft's and target's configs."""
    w = demo.ensure_world(progress=False)
    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    logs = {"server_log": samples / "sglang_seed_startup.log", "served_log": samples / "sglang_seed_decode.log",
            "server_info": samples / "sglang_server_info_seed.json"}
    opens, r = opens_beside_the_tokenizer(Inputs(
        draft=str(w.draft), target=str(w.target), train_data=str(w.seed_data), launch=SEED_LAUNCH, n=4,
        **{k: str(v) for k, v in logs.items()}), w.target)
    assert r.problems == () and "ndt_override" in {v.cause for v in r.diagnosis.alarms}
    counts = {p.name: opens[str(p.resolve())] for p in (*logs.values(), w.draft / "config.json",
                                                        w.target / "config.json")}
    assert counts == {k: 1 for k in counts}, counts
