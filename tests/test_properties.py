"""Property tests: no input makes a parser or validator fail with anything but a documented eagle3lib error.

Inputs are drawn from the shapes real files take (launch commands from the flag tables, log lines from the
engines' line formats, seed index lines, safetensors headers, config dicts, d2t/t2d tensors) with garbage mixed
in. A result or one of `eagle3lib.errors.ALL_ERRORS` is fine; any other exception fails the test.
"""
from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from safetensors.torch import save_file

from eagle3lib.engine_kit import records
from eagle3lib.sglang_engine.run_log import parse_sglang_log
from eagle3lib.throughput import benchparse
from eagle3lib.vllm_engine.run_log import parse_vllm_log
from eagle3lib.model import config, safefiles, vocab
from eagle3lib.samples import readers as datasets
from eagle3lib.serving import launch
from eagle3lib.sglang_engine import startup
from eagle3lib.serving.homes import homes
from eagle3lib import layout
from eagle3lib.errors import ALL_ERRORS, VocabError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- building blocks

json_scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | \
    st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
garbage = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | \
    st.binary(max_size=40).map(lambda b: b.decode("latin-1"))
words = st.sampled_from(["'", '"', "\\", "|", "&&", ">", "2>&1", "#", "=", "--", "-", "{", "}", "[", "]", "\n",
                         "python", "-m", "sglang.launch_server", "sglang", "serve", "vllm", "env", "A=1", "nohup",
                         "vllm.entrypoints.openai.api_server", "true", "false", "0", "-1", "3", "1e9", "nan"])


def _documented(fn, *args, **kwargs):
    """Call fn; a documented error is an acceptable outcome (returned as None), anything else propagates."""
    try:
        return fn(*args, **kwargs)
    except ALL_ERRORS:
        return None


# ---------------------------------------------------------------- launch commands

flag_names = st.sampled_from(sorted({f for h in homes().values() for f in h.flags}))
flag_values = st.one_of(words, garbage, st.integers(-5, 10**20).map(str), json_values.map(json.dumps),
                        st.floats().map(str))
command_tokens = st.lists(st.one_of(flag_names, flag_values, words), max_size=14)


@SETTINGS
@given(head=st.sampled_from(["python -m sglang.launch_server", "sglang serve", "vllm serve m",
                             "python3 -m vllm.entrypoints.openai.api_server", "CUDA_VISIBLE_DEVICES=0 nohup", ""]),
       tokens=command_tokens, joiner=st.sampled_from([" ", "=", " \\\n  "]), strict=st.booleans(),
       engine=st.sampled_from([None, "sglang", "vllm"]))
def test_launch_command_text(head, tokens, joiner, strict, engine):
    """Any launch-like text parses or raises a documented error (quotes, JSON, numbers, shell syntax mixed in)."""
    text = head + " " + joiner.join(tokens)
    out = _documented(launch.parse_launch, text, engine=engine, strict=strict)
    if out is not None:
        assert out.engine in ("sglang", "vllm") and isinstance(out.flags, dict)


@SETTINGS
@given(argv=st.lists(st.one_of(flag_names, flag_values, words), max_size=12), strict=st.booleans())
def test_launch_command_argv(argv, strict):
    """An argv list (no shell splitting) parses or raises a documented error."""
    _documented(launch.parse_launch, ["python", "-m", "sglang.launch_server"] + argv, strict=strict)


@SETTINGS
@given(text=garbage)
def test_launch_command_garbage(text):
    """Plain garbage is refused with a documented error, never a crash."""
    _documented(launch.parse_launch, text)


# ---------------------------------------------------------------- log lines

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str), st.integers(-10, 10**12).map(str),
                    st.sampled_from(["", "nan", "inf", "None", "1.2.3", "-", "1e999"]))
sglang_line = st.builds(
    lambda ts, run, tok, thr, acc, unit, q, cut: (
        f"[{ts} TP0] Decode batch, #running-req: {run}, #token: {tok}, token usage: 0.00, accept len: {acc}, "
        f"cuda graph: True, gen throughput ({unit}): {thr}, #queue-req: {q}, ")[:cut],
    st.sampled_from(["2026-02-03 09:43:56", "bad time", ""]), numbers, numbers, numbers, numbers,
    st.sampled_from(["token/s", "tokens/ms", "tok/h", ""]), numbers, st.integers(0, 220))
vllm_line = st.builds(
    lambda n, a, d, m, pos: (f"INFO 07-01 10:00:10 [metrics.py:90] SpecDecoding metrics: Mean acceptance length: {m}, "
                             f"Accepted throughput: 1.0 tokens/s, Drafted throughput: 2.0 tokens/s, Accepted: {a} "
                             f"tokens, Drafted: {d} tokens, Per-position acceptance rate: {pos}, Avg Draft "
                             f"acceptance rate: 50.0%"),
    numbers, numbers, numbers, numbers, st.lists(numbers, max_size=4).map(", ".join))
log_lines = st.lists(st.one_of(sglang_line, vllm_line, garbage, st.sampled_from(
    ["# run: a", "server_args=ServerArgs(speculative_num_steps=3, speculative_eagle_topk=", "python -m "
     "sglang.launch_server --speculative-num-steps 3 --speculative-eagle-topk", "INFO Avg generation throughput: 12.0 tokens/s"])),
    max_size=8)


@SETTINGS
@given(lines=log_lines)
def test_log_parsers(lines):
    """SGLang / vLLM log text of real, truncated and garbage lines (numbers malformed, NaN, inf, empty, huge):
    records, or LogParseError naming the file."""
    text = "\n".join(lines)
    for parse in (parse_sglang_log, parse_vllm_log):
        out = _documented(parse, "server.log", text=text)
        if out is not None:
            assert out.records and out.n_bad >= 0


@SETTINGS
@given(lines=log_lines)
def test_startup_log_reader(lines):
    """SGLang's startup-log reader on any lines: a reading or a documented error; garbled lines are counted."""
    out = _documented(startup.read_sglang_startup_log, lines)
    if out is not None:
        assert out.garbled <= out.skipped <= out.lines


@SETTINGS
@given(obj=json_values)
def test_server_info_reader(obj):
    """/server_info answers of any JSON shape: read (unknown keys kept) or refused with a documented error."""
    data = obj if isinstance(obj, dict) else {"version": obj, "speculative_algorithm": "EAGLE3"}
    out = _documented(startup.read_server_info, data)
    if out is not None:
        assert set(out.unrecognised) <= set(out.settings)


@SETTINGS
@given(lines=st.lists(st.one_of(json_values.map(lambda v: json.dumps(v)), garbage,
                                st.dictionaries(st.sampled_from(list(records.FIELDS)), json_values,
                                                max_size=5).map(json.dumps)), max_size=6))
def test_json_results_and_records(lines):
    """Bench JSON / JSON lines and run records of any content: records, or a documented error."""
    text = "\n".join(lines)
    _documented(benchparse.parse_json, "bench.jsonl", text=text)
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        _documented(records.from_dict, d)


@SETTINGS
@given(lines=st.lists(st.builds(lambda name, labels, value: f"{name}{labels} {value}",
                                st.sampled_from(["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts",
                                                 "vllm:spec_decode_num_draft_tokens_total",
                                                 "vllm:spec_decode_num_accepted_tokens_total",
                                                 "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                                 "sglang:spec_accept_length", "sglang:gen_throughput", "up"]),
                                st.sampled_from(["", '{position="0"}', '{position="x"}', "{"]),
                                st.one_of(st.integers(0, 10**6).map(str),
                                          st.sampled_from(["1.5", "-3", "x", "NaN", "+Inf", "-Inf", "1e999"]))),
                      max_size=8))
def test_prometheus_text(lines):
    """Prometheus exposition text of any values (NaN/inf counters, per-position samples with, without or with a
    bad position label): one record, or a documented error."""
    _documented(benchparse.parse_prometheus, "metrics.prom", text="\n".join(lines))


# ---------------------------------------------------------------- seed index lines and seed records

_VALID = {"id": "s", "input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "hidden_states": "hidden_states/a.safetensors"}
record_edits = st.dictionaries(st.sampled_from(["id", "input_ids", "loss_mask", "hidden_states", "seq_len",
                                                "extra"]), json_values, max_size=3)


@SETTINGS
@given(lines=st.lists(st.one_of(record_edits.map(lambda e: json.dumps({**_VALID, **e})), garbage,
                                json_values.map(json.dumps)), min_size=1, max_size=6))
def test_seed_index_lines(lines):
    """A seed index of any lines: skip mode never raises (bad lines counted); raise mode raises documented errors."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "hidden_states").mkdir()
        save_file({"aux.0": torch.ones(3, 4), "aux.1": torch.ones(3, 4)}, str(root / "hidden_states/a.safetensors"))
        (root / "train.jsonl").write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
        ds = datasets.open_dataset(root, format="seed")
        kept = list(ds)
        assert len(kept) + len(ds.skipped) == len(ds)
        assert all(s.aux.shape[1:] == (2, 4) for s in kept)
        _documented(lambda: list(datasets.open_dataset(root, format="seed", on_error="raise")))


# ---------------------------------------------------------------- safetensors headers

dtypes = st.sampled_from(["F32", "F16", "BF16", "I64", "BOOL", "F7", "", "f32"]) | json_values
entries = st.fixed_dictionaries({}, optional={"dtype": dtypes,
                                              "shape": st.lists(st.integers(-2, 6), max_size=3) | json_values,
                                              "data_offsets": st.lists(st.integers(-4, 80), max_size=3) | json_values})
headers = st.dictionaries(st.text(max_size=6), entries | json_values, max_size=4)


@SETTINGS
@given(header=headers, data=st.binary(max_size=80), fake_len=st.none() | st.integers(0, 2**64 - 1))
def test_safetensors_headers(header, data, fake_len):
    """Any header JSON and data (and any claimed header length): validated tensors or a documented error."""
    raw = json.dumps(header).encode()
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "model.safetensors"
        p.write_bytes(struct.pack("<Q", len(raw) if fake_len is None else fake_len) + raw + data)
        checked = _documented(safefiles.read_safetensors_header, p)
        if checked is not None:
            _documented(safefiles.load_safetensors, p)
            _documented(safefiles.safetensors_metadata, p)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")   # random bytes claim any protocol: expected
@SETTINGS
@given(blob=st.binary(max_size=120))
def test_weight_file_bytes(blob):
    """Arbitrary bytes as .safetensors, .pt and .ckpt.gz: a documented error (or, rarely, a valid read)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("model.safetensors", "model.pt", "data_0.ckpt.gz"):
            p = Path(tmp) / name
            p.write_bytes(blob)
            _documented(safefiles.load_state_dict, p)


# ---------------------------------------------------------------- config dicts

config_keys = st.sampled_from(sorted(config._KNOWN_KEYS) + ["eagle_config", "transformer_layer_config", "x"])
_BASE = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "vocab_size": 120}


@SETTINGS
@given(edits=st.dictionaries(config_keys, json_values, max_size=5), keep_base=st.booleans())
def test_config_dicts(edits, keep_base):
    """A config dict of any field values: a DraftConfig with consistent sizes, or a ConfigError."""
    raw = {**(_BASE if keep_base else {}), **edits}
    cfg = _documented(config.DraftConfig.from_dict, raw, source="config.json")
    if cfg is not None:
        assert cfg.hidden_size > 0 and cfg.num_attention_heads % cfg.num_key_value_heads == 0
        assert cfg.fc_in_features == cfg.num_aux * cfg.target_hidden_size > 0


@SETTINGS
@given(spec=st.one_of(garbage, st.lists(st.one_of(garbage, st.integers(), st.none()), max_size=4)),
       num_layers=st.none() | st.integers(1, 64))
def test_layout_specs(spec, num_layers):
    """Any layout spec: boundary names, or a LayoutError."""
    _documented(layout.parse_layout, spec, num_layers)


# ---------------------------------------------------------------- d2t / t2d validation

int_dtypes = st.sampled_from([torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32, torch.bool])


@st.composite
def vocab_maps(draw):
    V = draw(st.integers(1, 40))
    Vd = draw(st.integers(1, V))
    n = draw(st.sampled_from([Vd, Vd - 1, Vd + 1, 0]))
    d2t = None
    if draw(st.booleans()):
        values = draw(st.lists(st.integers(-60, 60), min_size=max(n, 0), max_size=max(n, 0)))
        d2t = torch.tensor(values, dtype=torch.long).to(draw(int_dtypes))
        if draw(st.booleans()) and d2t.numel() > 1:
            d2t = d2t[: d2t.numel() // 2 * 2].reshape(2, -1)  # (n,) -> (2, n/2): a 2-D map
    t2d = None
    if draw(st.booleans()):
        m = draw(st.sampled_from([V, V - 1, V + 1]))
        t2d = torch.tensor(draw(st.lists(st.booleans(), min_size=m, max_size=m))).to(draw(int_dtypes))
    return d2t, t2d, V, Vd


@SETTINGS
@given(maps=vocab_maps())
def test_vocab_checks_never_crash(maps):
    """check_vocab explains any d2t/t2d without raising; validate_vocab raises VocabError exactly on an error."""
    d2t, t2d, V, Vd = maps
    findings = vocab.check_vocab(d2t, t2d, V, Vd)
    errors = [f for f in findings if not f.ok and f.severity == "error"]
    if errors:
        with pytest.raises(VocabError) as info:
            vocab.validate_vocab(d2t, t2d, V, Vd, where="draft")
        assert errors[0].check in str(info.value)
    else:
        vocab.validate_vocab(d2t, t2d, V, Vd)


@SETTINGS
@given(counts=st.lists(st.integers(0, 50), min_size=1, max_size=60), frac=st.floats(0.01, 1.0))
def test_built_vocab_maps_validate(counts, frac):
    """A map built like SpecForge from any counts passes every check (so the checks do not cry wolf)."""
    V = len(counts)
    Vd = max(1, int(V * frac))
    d2t, t2d = vocab.build_vocab_map(torch.tensor(counts), Vd)
    # two maps the checks refuse by design: ids 0,2,4,.. (reads as an arange default) and ids 0..Vd-1 (all zeros)
    assume(not (Vd > 1 and bool((d2t == torch.arange(Vd)).all())) and not (Vd < V and bool((d2t == 0).all())))
    vocab.validate_vocab(d2t, t2d, V, Vd)
