"""Tests for eagle3lib.sglang_engine.introspect against small stand-in `sglang` packages (and the real one if present)."""
from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path

import pytest

from eagle3lib.sglang_engine import introspect as si
from eagle3lib.errors import ServingArgsError
from eagle3lib.serving.launch import parse_launch
from eagle3lib.sglang_engine.resolver import resolve

SEED = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path data/demo/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")

# A stand-in for sglang/srt/server_args.py: the real API shape (add_cli_args, from_cli_args, dataclass fields),
# with {POST_INIT} filled per test. RECORD decides how a decision is kept: a field write (old SGLang) or a
# declaration in _resolved_overrides (newer SGLang).
SERVER_ARGS = '''
import argparse, dataclasses, logging, os
from typing import Optional
logger = logging.getLogger(__name__)
TOPK1 = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"

@dataclasses.dataclass
class ServerArgs:
    model_path: str
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    max_running_requests: Optional[int] = None
    attention_backend: Optional[str] = None
    tp_size: int = 1
    hub_offline_seen: Optional[str] = None

    def record(self, source, **fields):
        {RECORD}

    def __post_init__(self):
        self.hub_offline_seen = os.environ.get("HF_HUB_OFFLINE")
        if self.speculative_algorithm in ("EAGLE", "EAGLE3"):
            {POST_INIT}

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", dest="model_path", required=True)
        parser.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN"])
        parser.add_argument("--speculative-draft-model-path")
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--attention-backend")
        parser.add_argument("--tensor-parallel-size", "--tp-size", dest="tensor_parallel_size", type=int, default=1)

    @classmethod
    def from_cli_args(cls, args):
        args.tp_size = args.tensor_parallel_size
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})
'''
REWRITES = '''if self.max_running_requests is None:
                self.record("handle_speculative_decoding", max_running_requests=48)
            if self.attention_backend == "trtllm_mha" and self.speculative_eagle_topk > 1:
                raise ValueError("trtllm_mha backend only supports topk = 1 for speculative decoding.")
            if self.speculative_eagle_topk == 1 and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
                logger.warning(TOPK1)
                self.record("_handle_eagle_family", speculative_num_draft_tokens=self.speculative_num_steps + 1)'''
WRITE = "for k, v in fields.items(): setattr(self, k, v)"
DECLARE = ("self.__dict__.setdefault('_resolved_overrides', []).append((source, dict(fields)))")


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """Install a stand-in `sglang` package (version, record style, __post_init__ body) on sys.path."""
    def install(version="0.4.6", record=WRITE, post_init=REWRITES):
        pkg = tmp_path / "sglang"
        (pkg / "srt").mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
        (pkg / "srt" / "__init__.py").write_text("")
        (pkg / "srt" / "server_args.py").write_text(
            textwrap.dedent(SERVER_ARGS).replace("{RECORD}", record).replace("{POST_INIT}", post_init))
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
    yield install
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]


def test_post_init_style_is_diffed(stand_in):
    """Old SGLang mutates fields: the diff finds ndt 16 -> 2 and mrr -> 48, and the warning is captured."""
    stand_in("0.4.6", WRITE)
    assert si.sglang_available() and si.installed_version() == "0.4.6"
    intro = si.introspect(parse_launch(SEED))
    assert intro.style == "post_init diff" and intro.error is None
    assert ("__post_init__", "speculative_num_draft_tokens", 16, 2) in intro.decisions
    assert intro.effective["max_running_requests"] == 48 and intro.requested["speculative_num_draft_tokens"] == 16
    assert any("is adjusted to speculative_num_steps + 1" in line for line in intro.log)
    table = si.against_rules(intro, resolve(parse_launch(SEED), intro.version)).set_index("field")
    assert table.loc["speculative_num_draft_tokens", "agree"] is True
    assert table.loc["max_running_requests", "agree"] is True


def test_declaration_style_reads_the_stash(stand_in):
    """Newer SGLang records decisions and leaves fields alone: effective comes from the declarations."""
    stand_in("0.5.16", DECLARE)
    intro = si.introspect(parse_launch(SEED))
    assert intro.style == "declarations"
    assert ("_handle_eagle_family", "speculative_num_draft_tokens", 16, 2) in intro.decisions
    assert intro.effective["speculative_num_draft_tokens"] == 2
    assert list(intro.frame().columns) == ["source", "field", "before", "after"]


def test_disagreement_is_flagged(stand_in):
    """A SGLang that does not rewrite ndt disagrees with the rule table, and compare says so."""
    stand_in("0.5.6", WRITE, post_init="pass")
    intro = si.introspect(parse_launch(SEED))
    table = si.against_rules(intro, resolve(parse_launch(SEED), "0.5.6")).set_index("field")
    assert table.loc["speculative_num_draft_tokens", "sglang"] == 16
    assert table.loc["speculative_num_draft_tokens", "rule_table"] == 2
    assert table.loc["speculative_num_draft_tokens", "agree"] is False


def test_rejection_is_reported_not_raised(stand_in):
    """SGLang's own ValueError becomes Introspection.error; compare shows both sides refuse."""
    stand_in("0.5.6")
    cmd = SEED.replace("eagle-topk 1", "eagle-topk 4") + " --attention-backend trtllm_mha"
    intro = si.introspect(parse_launch(cmd))
    assert intro.error.startswith("ValueError: trtllm_mha")
    table = si.against_rules(intro, resolve(parse_launch(cmd), "0.5.6", strict=False))
    assert table.iloc[-1]["field"] == "(startup)" and table.iloc[-1]["agree"] is True


def test_argparse_refusal_and_path_map(stand_in):
    """An unknown choice is argparse's error; path_map points SGLang at local folders; env is restored."""
    stand_in("0.5.6")
    bad = si.introspect(parse_launch(SEED.replace("EAGLE3", "MEDUSA")))
    assert "argparse" in bad.error and "MEDUSA" in bad.error
    before = os.environ.get("HF_HUB_OFFLINE")
    intro = si.introspect(parse_launch(SEED), path_map={"data/demo/target": "/local/target"})
    assert intro.effective["model_path"] == "/local/target" and intro.effective["hub_offline_seen"] == "1"
    assert os.environ.get("HF_HUB_OFFLINE") == before


def test_path_map_is_undone_before_comparing(stand_in):
    """SGLang's MTP draft path := the local target folder agrees with the table's launch path (path_map undone)."""
    stand_in("0.5.6", WRITE, post_init='''if self.speculative_draft_model_path is None:
                self.record("_handle_eagle_family", speculative_draft_model_path=self.model_path)''')
    cmd = SEED.replace(" --speculative-draft-model-path data/demo/draft", "")
    intro = si.introspect(parse_launch(cmd), path_map={"data/demo/target": "/local/target"})
    table = si.against_rules(intro, resolve(parse_launch(cmd), "0.5.6", "DeepseekV3ForCausalLM")).set_index("field")
    row = table.loc["speculative_draft_model_path"]
    assert row["sglang"] == "/local/target" and row["rule_table"] == "data/demo/target" and row["agree"] is True


def test_refuses_without_sglang_or_for_vllm(monkeypatch):
    """No sglang -> ServingArgsError naming the optional path; a vLLM command is refused too."""
    monkeypatch.setattr(si, "sglang_available", lambda: False)
    with pytest.raises(ServingArgsError, match="not importable"):
        si.introspect(parse_launch(SEED))
    with pytest.raises(ServingArgsError, match="not an SGLang launch"):
        si.introspect(parse_launch("vllm serve m"))
    assert si.installed_version() is None


def test_ask_compares_or_explains(stand_in, monkeypatch):
    """ask() returns SGLang's answer beside the table's, or one row saying why it could not ask."""
    stand_in("0.5.6")
    launch, res = parse_launch(SEED), resolve(parse_launch(SEED), "0.5.6")
    table = si.ask(launch, res).set_index("field")
    assert table.loc["speculative_num_draft_tokens", "agree"] is True
    assert si.ask(None, None).iloc[0]["field"] == "(not asked)"
    monkeypatch.setattr(si, "sglang_available", lambda: False)
    assert "not installed" in si.ask(launch, res).iloc[0]["sglang"]


# SGLang 0.5.2x shape: ServerArgs is a sealed record (msgspec Struct: __struct_fields__, no dataclass) and resolution
# is a separate resolve_once() that only declares; arg_groups/overrides.py reads the result with resolution_result.
RECORD_ARGS = '''
import logging
from sglang.srt.arg_groups.overrides import declare_resolution
logger = logging.getLogger(__name__)
FIELDS = ("model_path", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
          "speculative_num_draft_tokens", "max_running_requests", "tokenizer_path", "speculative_draft_model_revision",
          "served_model_name", "device")

class ServerArgs:
    __struct_fields__ = FIELDS

    def __init__(self, **kw):
        for f in FIELDS:
            setattr(self, f, kw.get(f))

    def resolve_once(self):
        if self.device is None:
            raise RuntimeError("No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.")
        declare_resolution(self, "_handle_missing_default_values", tokenizer_path=self.model_path)
        declare_resolution(self, "handle_speculative_decoding", speculative_draft_model_revision="main")
        if self.max_running_requests is None:
            declare_resolution(self, "_handle_eagle_family", max_running_requests=48)
        if self.speculative_eagle_topk == 1 and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            logger.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                           "speculative_eagle_topk == 1")
            declare_resolution(self, "_handle_eagle_family",
                               speculative_num_draft_tokens=self.speculative_num_steps + 1)
        if self.speculative_num_steps == 7:
            raise ValueError("--speculative-num-steps=7 is not in the adaptive config candidate_steps [1, 3]")

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", dest="model_path", required=True)
        parser.add_argument("--speculative-algorithm")
        parser.add_argument("--speculative-draft-model-path")
        for name in ("num-steps", "eagle-topk", "num-draft-tokens"):
            parser.add_argument(f"--speculative-{name}", type=int)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--device")

    @classmethod
    def from_cli_args(cls, args):
        return cls(**{f: getattr(args, f) for f in FIELDS if hasattr(args, f)})
'''
OVERRIDES = '''
def declare_resolution(sa, source, **fields):
    sa.__dict__.setdefault("_resolved_overrides", []).append((source, dict(fields)))

def resolution_result(sa, field, default=None):
    for _source, declared in reversed(getattr(sa, "_resolved_overrides", None) or ()):
        if field in declared:
            return declared[field]
    value = getattr(sa, field, default)
    return "default-name" if field == "served_model_name" and value is None else value   # a declared fallback
'''


def test_sealed_record_is_resolved_with_resolve_once(stand_in, tmp_path):
    """0.5.2x shape: __struct_fields__, resolve_once(), that version's reader; no accelerator -> asked with cpu."""
    stand_in("0.5.23")
    srt = tmp_path / "sglang" / "srt"
    (srt / "arg_groups").mkdir()
    (srt / "arg_groups" / "__init__.py").write_text("")
    (srt / "arg_groups" / "overrides.py").write_text(OVERRIDES)
    (srt / "server_args.py").write_text(RECORD_ARGS)
    intro = si.introspect(parse_launch(SEED))
    assert intro.style == "declarations" and intro.error is None
    assert ("_handle_eagle_family", "speculative_num_draft_tokens", 16, 2) in intro.decisions
    assert intro.effective["speculative_num_draft_tokens"] == 2 and intro.requested["speculative_num_draft_tokens"] == 16
    assert intro.effective["served_model_name"] == "default-name"                # read through resolution_result
    assert intro.effective["device"] == "cpu" and "asked again with --device cpu" in intro.log[-1]
    assert "No accelerator" in si.introspect(parse_launch(SEED), cpu_fallback=False).error
    table = si.against_rules(intro, resolve(parse_launch(SEED), "0.5.23", "LlamaForCausalLM")).set_index("field")
    assert table.loc["speculative_num_draft_tokens", "agree"] is True
    assert table.loc["max_running_requests", "agree"] is True
    assert table.loc["speculative_draft_model_revision", "sglang"] == "main"     # speculative: shown ...
    assert table.loc["speculative_draft_model_revision", "agree"] is None        # ... but the table does not decide it
    assert "tokenizer_path" not in table.index                                    # SGLang's other decisions stay out
    refused = si.introspect(parse_launch(SEED.replace("num-steps 1", "num-steps 7")))
    assert refused.style == "declarations" and refused.error.startswith("ValueError: --speculative-num-steps=7")


def test_a_rejection_on_one_side_only_is_a_disagreement(stand_in):
    """The rule table refusing a command SGLang starts (or the reverse) is a (startup) row with agree False."""
    stand_in("0.5.6", post_init="pass")
    cmd = SEED.replace("eagle-topk 1", "eagle-topk 4") + " --attention-backend trtllm_mha"
    table = si.against_rules(si.introspect(parse_launch(cmd)), resolve(parse_launch(cmd), "0.5.6", strict=False))
    startup = table.set_index("field").loc["(startup)"]
    assert startup["sglang"] == "starts" and "trtllm_mha" in startup["rule_table"] and startup["agree"] is False
    assert table.set_index("field").loc["speculative_num_draft_tokens", "agree"] is None   # no field verdicts then


@pytest.fixture
def real_sglang(tmp_path):
    """The installed SGLang (skip when absent) and a path_map to the demo target / draft configs written in tmp_path."""
    pytest.importorskip("sglang.srt.server_args")
    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    paths = {}
    for name, sample in (("target", "demo_target_config.json"), ("draft", "demo_draft_config.json")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text((samples / sample).read_text())
        paths[f"data/demo/{name}"] = str(tmp_path / name)
    return paths


def test_real_sglang_agrees_with_the_rule_table(real_sglang):
    """Against an installed SGLang (skipped when absent): the seed's ndt 16 -> 2, and every field both decide agrees."""
    paths = real_sglang
    launch = parse_launch(SEED + " --device cpu")          # CPU: no GPU is needed to resolve the arguments
    intro = si.introspect(launch, path_map=paths)
    assert intro.error is None, intro.error
    assert intro.requested["speculative_num_draft_tokens"] == 16
    table = si.against_rules(intro, resolve(launch, intro.version, "LlamaForCausalLM")).set_index("field")
    row = table.loc["speculative_num_draft_tokens"]
    assert row["sglang"] == 2 and row["rule_table"] == 2 and row["agree"] is True and row["rule"] == "topk1_ndt"
    assert any("is adjusted to speculative_num_steps + 1" in line for line in intro.log)
    decided = table[table["agree"].notna()]
    assert {"speculative_num_steps", "speculative_eagle_topk", "max_running_requests"} <= set(decided.index)
    assert decided["agree"].all(), decided[decided["agree"] == False].to_dict("index")   # noqa: E712
    plain = si.introspect(parse_launch(SEED), path_map=paths)   # no --device: asked again on cpu when no GPU here
    assert plain.error is None and plain.effective["speculative_num_draft_tokens"] == 2


GRID_BASE = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
             "--speculative-draft-model-path data/demo/draft --device cpu")
GRID = [f"{knobs} {page}".strip() for knobs in (
    "", "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16",
    "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8",
    "--speculative-num-steps 1 --speculative-eagle-topk 4 --speculative-num-draft-tokens 2",
    "--speculative-eagle-topk 1", "--speculative-num-steps 3") for page in ("", "--page-size 16")] + [
    "--speculative-adaptive", "--speculative-adaptive --speculative-num-steps 2",
    "--speculative-adaptive --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8",
    "--enable-mixed-chunk", "--page-size 16 --attention-backend triton", "--debug-tensor-dump-output-folder /tmp/d",
    "--cuda-graph-max-bs 64", "--quantization fp8 --speculative-draft-model-quantization unquant"]


def test_real_sglang_grid_agrees_with_the_rule_table(real_sglang):
    """Against an installed SGLang: knobs x page size x adaptive/mixed/dump flags, no disagreement on CPU."""
    disagreements = {}
    for args in GRID:
        launch = parse_launch(f"{GRID_BASE} {args}")
        intro = si.introspect(launch, path_map=real_sglang)
        table = si.against_rules(intro, resolve(launch, intro.version, "LlamaForCausalLM", strict=False))
        bad = table[table["agree"] == False]   # noqa: E712
        if len(bad):
            disagreements[args] = bad[["field", "sglang", "rule_table"]].values.tolist()
    assert not disagreements, disagreements
