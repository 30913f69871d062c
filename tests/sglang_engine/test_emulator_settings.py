"""Emulated SGLang settings and log lines: startup rewrites and refusals by version, decode-line punctuation."""
from __future__ import annotations

import pytest

from eagle3lib.errors import ServingArgsError
from eagle3lib.sglang_engine.emulator_settings import SpecSettings, batch_line, decode_line, resolve_settings
from eagle3lib.sglang_engine.resolver import accept_rate

TOPK1_MSG = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"


def test_seed_launch_is_rewritten_to_two_draft_tokens():
    """The seed: --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16 -> ndt 2."""
    eff = resolve_settings(SpecSettings(1, 1, 16, version="0.5.6"))
    assert (eff.num_steps, eff.topk, eff.num_draft_tokens, eff.speculative) == (1, 1, 2, True)
    assert any(TOPK1_MSG in line for line in eff.startup)
    assert eff.server_args["speculative_num_draft_tokens"] == 2 and eff.server_args["device"] == "cpu"
    fixed = resolve_settings(SpecSettings(15, 1, 16, version="0.5.6"))
    assert (fixed.num_steps, fixed.num_draft_tokens) == (15, 16) and not any(TOPK1_MSG in x for x in fixed.startup)
    assert any("Max running requests is reset to 48" in x for x in fixed.startup)   # printed for every EAGLE run


def test_baseline_has_no_speculation():
    eff = resolve_settings(SpecSettings.baseline("0.5.6", decode_log_interval=7))
    assert (eff.num_steps, eff.speculative, eff.decode_log_interval) == (0, False, 7)
    assert eff.server_args["speculative_algorithm"] is None


@pytest.mark.parametrize("settings, field", [
    (SpecSettings(0, 1, 1), "speculative_num_steps"),
    (SpecSettings(3, True, 4), "speculative_eagle_topk"),                        # a bool is not a count
    (SpecSettings(3, 2, 12), "speculative_num_draft_tokens"),                    # 11 > 10 tree candidates
    (SpecSettings(1, 1, 16, version="0.4.5"), "speculative_num_draft_tokens"),   # no topk=1 rewrite yet
    (SpecSettings(3, 1, 4, decode_log_interval=0), "decode_log_interval"),
])
def test_refusals_name_the_setting_and_the_allowed_range(settings, field):
    with pytest.raises(ServingArgsError, match=field) as e:
        resolve_settings(settings)
    assert e.value.expected is not None and "found" in str(e.value)


def test_batch_line_punctuation_by_version():
    fields = [("#new-seq", "1"), ("#new-token", "12")]
    assert batch_line("Prefill", "0.4.6", fields) == "Prefill batch. #new-seq: 1, #new-token: 12"
    assert batch_line("Prefill", "0.5.6", fields) == "Prefill batch, #new-seq: 1, #new-token: 12, "
    assert batch_line("Decode", "0.5.15", fields) == "Decode batch, #new-seq: 1, #new-token: 12"


def test_accept_rate_absent_before_its_version():
    assert accept_rate("0.5.3", 3.0, 3, 4) == (None, "")
    rate, formula = accept_rate("0.5.6", 3.0, 3, 4)
    assert rate == pytest.approx(0.75) and formula


@pytest.mark.parametrize("version, prefix, has_rate, has_graph, rate", [
    ("0.4.6", "Decode batch. ", False, False, None),
    ("0.5.3.post3", "Decode batch. ", True, True, 3.0 / 4),
    ("0.5.6", "Decode batch, ", True, True, 3.0 / 4),
    ("0.5.15", "Decode batch, ", True, True, 2.0 / 3),
])
def test_decode_line_format_by_version(version, prefix, has_rate, has_graph, rate):
    """Prefix punctuation, 'accept rate' (and its formula) and 'cuda graph' follow the emulated version."""
    line = decode_line(version, tokens=100, usage=0.0, throughput=12.5,
                       accept_len=3.0, rate=accept_rate(version, 3.0, 3, 4)[0])
    assert line.startswith(prefix + "#running-req: 1, #token: 100, token usage: 0.00, accept len: 3.00, ")
    assert ("accept rate: " in line) == has_rate and ("cuda graph: " in line) == has_graph
    if rate is not None:
        assert f"accept rate: {rate:.2f}, " in line
    assert "gen throughput (token/s): 12.50, #queue-req: 0" in line
