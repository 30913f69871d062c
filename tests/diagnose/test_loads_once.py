"""One diagnose run loads the target at most once (every step that recaptures shares it), and not at all when no
step needs a recapture. Counted twice: eagle3lib's own load count and every `from_pretrained` on the target."""
from __future__ import annotations

from collections import Counter

import pytest
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
    line, info, build = readers._load_seed_line, readers._read_info, readers._SeedIndex.build_sample

    def counted_line(jsonl, lineno, text, opts):
        reads[("sample", str(jsonl), lineno, opts)] += 1
        return line(jsonl, lineno, text, opts)

    def counted_info(root):
        reads[("info", str(root))] += 1
        return info(root)

    def counted_build(self):
        reads[("index", str(self.path))] += 1
        return build(self)
    monkeypatch.setattr(readers, "_load_seed_line", counted_line)
    monkeypatch.setattr(readers, "_read_info", counted_info)
    monkeypatch.setattr(readers._SeedIndex, "build_sample", counted_build)
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
