"""Tests for eagle3lib.sglang_engine.run_log: every historical SGLang decode-line format, bad lines, run splitting."""
from pathlib import Path

import pytest

from eagle3lib.throughput import benchparse as bp
from eagle3lib.sglang_engine import run_log as lp
from eagle3lib.errors import LogParseError, MissingFileError

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
SA = ("[2025-11-02 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=1, speculative_algorithm='EAGLE3', "
      "speculative_num_steps={s}, speculative_eagle_topk=1, speculative_num_draft_tokens={n}, page_size=1)")

# One decode line per historical SGLang variant (serving-and-throughput.md A.2), tau 2.31, 120.5 tok/s.
SGLANG_VARIANTS = {
    "v0.4.3": "[2025-03-01 10:00:01 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, "
              "accept len: 2.31, gen throughput (token/s): 120.50, #queue-req: 0",
    "cuda-graph": "[2025-06-01 10:00:01 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, "
                  "accept len: 2.31, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 0, ",
    "accept-rate": "[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, "
                   "accept len: 2.31, accept rate: 0.58, cuda graph: True, gen throughput (token/s): 120.50, "
                   "#queue-req: 0, ",
    "comma-iter": "[2025-12-01 10:00:01 DP0 TP0] Decode batch [4120], #running-req: 1, #token: 186, token usage: "
                  "0.00, accept len: 2.31, accept rate: 0.58, cuda graph: True, gen throughput (token/s): 120.50, "
                  "#queue-req: 0, ",
    "head-cpu": "[2026-07-01 10:00:01 TP0] Decode batch, #running-req: 1, #token: 186, token usage: 0.00, "
                "accept len: 2.31, accept rate: 0.44, cap len: 3.00, block accept len: 2.10, cpu graph: False, "
                "gen throughput (token/s): 120.50, #queue-req: 0",
    "hybrid": "[2026-07-01 10:00:01 TP0] Decode batch, #running-req: 1, #full token: 186, full token usage: 0.00, "
              "#swa token: 90, swa token usage: 0.00, accept len: 2.31, accept rate: 0.44, cuda graph: True, "
              "gen throughput (token/s): 120.50, #queue-req: 0, ",
}


@pytest.mark.parametrize("variant", sorted(SGLANG_VARIANTS))
def test_each_sglang_decode_variant_parses(variant):
    """Every historical decode-line shape yields tau and tok/s."""
    res = lp.parse_sglang_log("x.log", text=SA.format(s=3, n=4) + "\n" + SGLANG_VARIANTS[variant] + "\n")
    (rec,) = res.records
    assert rec.accept_length == pytest.approx(2.31) and rec.tok_s == pytest.approx(120.5)
    assert (rec.num_steps, rec.topk, rec.num_draft_tokens, rec.batch_size) == (3, 1, 4, 1)
    assert res.n_bad == 0 and rec.source == "x.log:2-2"


@pytest.mark.parametrize("rate, expected", [
    (0.75, "tau/num_draft_tokens"), (0.67, "(tau-1)/(num_draft_tokens-1)"), (1.0, "tau/num_steps")])
def test_accept_rate_definition_is_identified(rate, expected):
    """tau 3.0 at (steps 3, NDT 4): 0.75 is tau/NDT (v0.5.6), 0.67 is (tau-1)/(NDT-1) (HEAD), 1.0 is tau/steps."""
    line = (f"[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, accept len: "
            f"3.00, accept rate: {rate:.2f}, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0, ")
    (rec,) = lp.parse_sglang_log("x.log", text=SA.format(s=3, n=4) + "\n" + line).records
    assert expected in rec.accept_rate_definition
    assert rec.accept_rate == pytest.approx(rate)


def test_shipped_sample_log_gives_the_seed_runs():
    """The sample log splits into the seed's four runs with their numbers and effective settings."""
    res = bp.parse_file(SAMPLES / "sglang_seed_decode.log")
    recs = res.records
    assert [r.tok_s for r in recs] == pytest.approx([90.0, 56.8, 46.7, 54.8])
    assert [r.accept_length for r in recs[1:]] == pytest.approx([1.6, 1.9, 2.23])
    assert recs[0].is_baseline and recs[0].accept_length is None
    assert [(r.num_steps, r.topk, r.num_draft_tokens) for r in recs[1:]] == [(1, 1, 2), (15, 1, 16), (15, 1, 16)]
    assert "requested num_draft_tokens=16, effective 2" in recs[1].notes
    assert recs[3].label.startswith("capture fix")
    assert "tau/num_draft_tokens" in recs[2].accept_rate_definition
    assert res.n_bad == 1 and "truncated" in res.bad_lines[0][1]


def test_garbage_binary_and_truncated_lines_are_counted(tmp_path):
    """Binary bytes and a cut line are skipped and reported by line number; good lines still become a record."""
    good = SGLANG_VARIANTS["accept-rate"].encode()
    data = b"\n".join([b"random text", good, b"\x00\x01\xff\xfe garbage \x89PNG", good,
                       b"[2025-10-22 10:28:00 TP0] Decode batch. #running-req: 1, #token: 186, accept len: 2.3",
                       good])
    p = tmp_path / "server.log"
    p.write_bytes(data)
    res = lp.parse_sglang_log(p)
    assert res.n_bad == 2 and [n for n, _ in res.bad_lines] == [3, 5]
    assert res.n_used == 3 and len(res.records) == 1
    assert "2 bad lines" in res.summary()


def test_log_without_decode_lines_raises_naming_file_and_pattern(tmp_path):
    """A log with nothing to read: LogParseError with the path and what was looked for."""
    p = tmp_path / "empty_server.log"
    p.write_text("[2026-01-01 10:00:00] INFO: Application startup complete.\n")
    with pytest.raises(LogParseError, match="empty_server.log") as e:
        lp.parse_sglang_log(p)
    assert "Decode batch" in str(e.value)
    with pytest.raises(MissingFileError):
        lp.parse_sglang_log(tmp_path / "missing.log")


def test_log_with_only_baseline_lines_warns():
    """Decode lines without accept len become a baseline record and a warning, not an error."""
    line = ("[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 2, #token: 9, token usage: 0.00, cuda graph: "
            "True, gen throughput (token/s): 88.00, #queue-req: 0, ")
    res = lp.parse_sglang_log("b.log", text=line + "\n" + line)
    assert res.records[0].is_baseline and res.records[0].batch_size == 2
    assert any("no speculative lines" in w for w in res.warnings)


def test_runs_split_at_markers_and_on_spec_switch():
    """'# run:' markers name runs; a switch between spec and non-spec lines splits even without a launch line."""
    base = ("[t TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, cuda graph: True, "
            "gen throughput (token/s): 90.00, #queue-req: 0, ")
    text = "\n".join(["# run: first", base, SGLANG_VARIANTS["cuda-graph"], "# run: third", base])
    recs = lp.parse_sglang_log("m.log", text=text).records
    assert [r.is_baseline for r in recs] == [True, False, True]
    assert recs[0].label == "first" and recs[2].label == "third"


def test_throughput_unit_is_converted_and_said():
    """A throughput in token/ms is converted to token/s with a warning."""
    line = SGLANG_VARIANTS["v0.4.3"].replace("gen throughput (token/s): 120.50", "gen throughput (token/ms): 0.12")
    res = lp.parse_sglang_log("u.log", text=line)
    assert res.records[0].tok_s == pytest.approx(120.0)
    assert any("token/ms" in w for w in res.warnings)
