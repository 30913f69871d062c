"""Tests for eagle3lib.sglang_engine.startup: /server_info, SGLang's startup log, requested-vs-effective."""
from __future__ import annotations

import pytest

from eagle3lib.steps.case import SAMPLES_DIR
from eagle3lib.errors import LogParseError, MissingFileError, ServingArgsError
from eagle3lib.serving.launch import parse_launch
from eagle3lib.sglang_engine.startup import read_server_info, requested_vs_effective
from eagle3lib.sglang_engine.startup import read_sglang_startup_log as read_startup_log
from eagle3lib.sglang_engine.resolver import resolve

SEED = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path data/demo/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")
TOPK1 = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"


def test_sample_server_info_reads_cleanly():
    """The shipped /server_info sample: version, normalized knobs, lifetime τ, no warnings."""
    info = read_server_info(SAMPLES_DIR / "sglang_server_info_seed.json")
    assert info.version == "0.5.6" and info.warnings == () and info.unrecognised == ()
    assert info.settings["speculative_num_draft_tokens"] == 2 and info.settings["max_running_requests"] == 48
    assert info.avg_spec_accept_length == pytest.approx(1.62)
    assert info.scheduler["max_total_num_tokens"] == 1048576
    assert not any(k.startswith("_eagle3lib") for k in info.settings)


def test_unknown_version_reads_what_it_can():
    """A /server_info from an unknown version: known fields read, unknown keys listed, bad parts ignored."""
    info = read_server_info({"version": "0.9.1", "speculative_num_steps": 3, "brand_new_field": 1,
                             "internal_states": "oops"})
    assert info.settings["speculative_num_steps"] == 3 and info.unrecognised == ("brand_new_field",)
    text = " ".join(info.warnings)
    assert "newer than the rule table" in text and "brand_new_field" in text and "internal_states" in text
    assert info.avg_spec_accept_length is None
    odd = read_server_info({"version": "nightly", "model_path": "m"})
    assert any("not a version" in w for w in odd.warnings) and any("speculative" in w for w in odd.warnings)


def test_server_info_bad_inputs(tmp_path):
    """Not an object, invalid JSON, a missing file, a refused URL: each a clear eagle3lib error."""
    with pytest.raises(ServingArgsError, match="not a JSON object"):
        read_server_info(_write(tmp_path / "list.json", "[1, 2]"))
    with pytest.raises(ServingArgsError, match="not valid JSON"):
        read_server_info(_write(tmp_path / "half.json", '{"version": "0.5'))
    with pytest.raises(MissingFileError):
        read_server_info(tmp_path / "none.json")
    with pytest.raises(ServingArgsError, match="could not read server info"):
        read_server_info("http://127.0.0.1:9", timeout=0.5)   # port 9 (discard): nothing listens locally


def _write(path, text):
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def test_sample_startup_log_proves_the_rewrite():
    """The shipped log: three adjustment lines mapped to rules, the normalized ServerArgs, garbage counted."""
    log = read_startup_log(SAMPLES_DIR / "sglang_seed_startup.log")
    rules = [e.rule_id for e in log.events if e.kind == "adjustment"]
    assert rules == ["max_running_requests_48", "overlap_off_without_spec_v2", "topk1_ndt"]
    assert log.server_args["speculative_num_draft_tokens"] == 2 and log.server_args["speculative_num_steps"] == 1
    assert log.engine == "sglang" and log.garbled == 1 and log.runner is None
    assert log.own_lines == len(log.events) == 4 and "4 about settings" in log.summary()
    assert list(log.proof({"speculative_num_draft_tokens"})["rule"].fillna("ServerArgs")) == ["topk1_ndt", "ServerArgs"]
    nonempty = sum(1 for ln in (SAMPLES_DIR / "sglang_seed_startup.log").read_bytes().splitlines() if ln.strip())
    assert log.skipped == nonempty - len(log.events)


def test_log_prefix_formats_and_garbage(tmp_path):
    """Bare, [ts], [ts TP0] and '[ts] WARNING file.py:N:' prefixes all match; garbage lines are counted."""
    lines = [TOPK1,
             f"[2026-02-27 14:33:03] WARNING server_args.py:2326: {TOPK1}",
             "[2026-02-27 14:33:03] Attention backend not specified. Use fa3 backend by default.",
             "[2026-02-27 14:33:03 TP0] The chunked prefill size is adjusted to 2048 to avoid MoE kernel issues.",
             "\x00\x01 binary",
             "random words without meaning",
             "[2026-02-27 14:33:04] server_args=ServerArgs(model_path='m', speculative_num_draft_tokens=4, x=1)"]
    log = read_startup_log(_write(tmp_path / "s.log", "\n".join(lines) + "\n"))
    adj = [e for e in log.events if e.kind == "adjustment"]
    assert [e.rule_id for e in adj[:2]] == ["topk1_ndt", "topk1_ndt"] and adj[1].level == "WARNING"
    assert adj[1].timestamp == "2026-02-27 14:33:03"
    assert adj[2].field == "attention_backend" and adj[3].rule_id is None
    assert (log.garbled, log.skipped) == (1, 2) and log.server_args == {"model_path": "m",
                                                                        "speculative_num_draft_tokens": 4, "x": 1}


def test_log_edge_cases(tmp_path):
    """Empty log raises; a log of noise warns; a truncated ServerArgs line is read as far as it goes."""
    with pytest.raises(LogParseError):
        read_startup_log(_write(tmp_path / "empty.log", "\n\n"))
    noise = read_startup_log(_write(tmp_path / "noise.log", "hello\nworld\n"))
    assert noise.events == () and noise.skipped == 2 and any("startup log" in w for w in noise.warnings)
    cut = read_startup_log("[t] server_args=ServerArgs(model_path='m', speculative_num_steps=3, page_si\nnext\n")
    assert cut.server_args["speculative_num_steps"] == 3 and any("truncated" in w for w in cut.warnings)
    two = read_startup_log(["[t] server_args=ServerArgs(a=1)", "[t] server_args=ServerArgs(a=2)"])
    assert two.server_args == {"a": 2} and any("2 launches" in w for w in two.warnings)
    with pytest.raises(MissingFileError):
        read_startup_log(tmp_path / "missing.log")


def test_requested_vs_effective_with_log_and_rules():
    """Seed + its log: ndt 16 -> 2 changed by topk1_ndt (PR #5318), and the rule table agrees with the server."""
    launch = parse_launch(SEED)
    res = resolve(launch, "0.5.6", "LlamaForCausalLM")
    diff = requested_vs_effective(launch, read_startup_log(SAMPLES_DIR / "sglang_seed_startup.log"), res)
    row = diff.set_index("field").loc["speculative_num_draft_tokens"]
    assert (row["requested"], row["effective"], row["changed"], row["rule"]) == (16, 2, True, "topk1_ndt")
    assert "#5318" in row["source"] and row["agrees"] is True and row["evidence"] == "log: server_args"
    assert not diff.set_index("field").loc["speculative_num_steps", "changed"]
    assert diff.set_index("field").loc["page_size", "agrees"] is None   # the table says nothing about page_size


def test_requested_vs_effective_flags_disagreement_and_unexplained():
    """An observed value the table did not predict is flagged; a change with no rule is 'unexplained'."""
    launch = parse_launch(SEED)
    res = resolve(launch, "0.5.6")
    diff = requested_vs_effective(launch, {"speculative_num_draft_tokens": 16}, res).set_index("field")
    assert diff.loc["speculative_num_draft_tokens", "agrees"] is False
    bare = requested_vs_effective(launch, {"speculative_num_steps": 2}).set_index("field")
    assert bare.loc["speculative_num_steps", "rule"] == "unexplained" and bare.loc["speculative_num_steps", "changed"]
    predicted = requested_vs_effective(launch, None, res).set_index("field")
    assert predicted.loc["speculative_num_draft_tokens", "effective"] == 2
    assert predicted.loc["speculative_num_draft_tokens", "evidence"] == "rule table"
    with pytest.raises(ServingArgsError):
        requested_vs_effective(launch, 42, res)


def test_a_progress_bar_does_not_shift_the_startup_logs_line_numbers(tmp_path):
    """A progress bar redrawn with "\\r" stays inside its line (as an editor shows it): the adjustment line after it
    is named by its line in the file, read from the file or from its text alike (str.splitlines split there)."""
    lines = (SAMPLES_DIR / "sglang_seed_startup.log").read_bytes().decode(errors="replace").split("\n")
    bar = "Loading safetensors checkpoint shards:   0% Completed | 0/1\r" * 3 + "100% Completed | 1/1"
    log = tmp_path / "server.log"
    log.write_bytes(("\n".join([bar] + lines)).encode())
    want = [no for no, ln in enumerate([bar] + lines, start=1) if "speculative_num_draft_tokens is adjusted" in ln]
    for source in (log, log.read_bytes().decode(errors="replace")):
        got = [e.line_no for e in read_startup_log(source).events if e.rule_id == "topk1_ndt"]
        assert got == want and len(want) == 1, (got, want)
