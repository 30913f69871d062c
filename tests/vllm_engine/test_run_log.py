"""Tests for eagle3lib.vllm_engine.run_log: every historical vLLM spec-decode log format, bad lines."""

import pytest

from eagle3lib.vllm_engine import run_log as lp
from eagle3lib.errors import LogParseError

VLLM_HEAD = ("INFO 07-01 10:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
             "throughput: 150.2 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache "
             "hit rate: 0.0%\nINFO 07-01 10:00:10 [metrics.py:90] SpecDecoding metrics: Mean acceptance length: "
             "2.80, Accepted throughput: 90.00 tokens/s, Drafted throughput: 150.00 tokens/s, Accepted: 900 "
             "tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.800, 0.600, 0.400, Avg Draft "
             "acceptance rate: 60.0%")


def test_vllm_current_format_recomputes_tau_from_counters():
    """Current format: K from per-position length, rounds = drafted/K, tau = 1 + accepted/rounds."""
    res = lp.parse_vllm_log("v.log", text="(v0.11.0)\n" + VLLM_HEAD)
    (rec,) = res.records
    assert (rec.num_steps, rec.rounds, rec.accepted, rec.drafted) == (3, 500, 900, 1500)
    assert rec.accept_length == pytest.approx(2.8) and rec.per_position == pytest.approx((0.8, 0.6, 0.4))
    assert rec.tok_s == pytest.approx(150.2) and rec.batch_size == 1
    assert "includes the bonus" in rec.notes


def test_vllm_april_2025_format_flags_bonus_excluded_mean():
    """2025-04-24 format printed mean length without the bonus token: tau is recomputed and the note says so."""
    line = ("SpecDecoding metrics: Draft acceptance rate: 60.0%, Mean acceptance length: 1.80, Accepted: 900 "
            "tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.800, 0.600, 0.400")
    (rec,) = lp.parse_vllm_log("v.log", text=line).records
    assert rec.accept_length == pytest.approx(2.8)
    assert "EXCLUDES the bonus" in rec.notes


def test_vllm_oldest_formats_need_k():
    """2025-04-01 lines carry no K: with num_speculative_tokens tau is recomputed, without it a note says why."""
    text = "SpecDecoding metrics: Draft acceptance rate: 50.0%, Accepted: 600 tokens, Drafted: 1200 tokens\n" * 2
    (rec,) = lp.parse_vllm_log("v.log", text=text, num_speculative_tokens=4).records
    assert rec.rounds == 600 and rec.accept_length == pytest.approx(3.0)
    (rec,) = lp.parse_vllm_log("v.log", text=text).records
    assert rec.accept_length is None and "num_speculative_tokens unknown" in rec.notes


def test_vllm_v0_cumulative_counters_use_differences():
    """V0 'Speculative metrics' are cumulative: the run is the last line minus the first."""
    mk = ("Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.500, Number of speculative "
          "tokens: 2, Number of accepted tokens: {a}, Number of draft tokens: {d}, Number of emitted tokens: {e}.")
    text = mk.format(a=10, d=20, e=20) + "\n" + mk.format(a=110, d=220, e=270)
    (rec,) = lp.parse_vllm_log("v0.log", text=text).records
    assert (rec.accepted, rec.drafted, rec.rounds) == (100, 200, 100)
    assert rec.accept_length == pytest.approx(2.5) and "cumulative" in rec.notes


def test_vllm_truncated_line_and_no_spec_log():
    """A cut SpecDecoding line is a bad line; a log with none raises LogParseError."""
    cut = VLLM_HEAD + "\nSpecDecoding metrics: Mean acceptance length: 2.80, Accepted throughput: 9.0 tokens/s, Acc"
    res = lp.parse_vllm_log("v.log", text=cut)
    assert res.n_bad == 1 and len(res.records) == 1
    with pytest.raises(LogParseError, match="SpecDecoding metrics"):
        lp.parse_vllm_log("quiet.log", text="INFO Avg generation throughput: 10.0 tokens/s, Running: 1 reqs\n")
