"""Tests for eagle3lib.serving.server_logs: a startup log read by its engine's home; the engines' accept metrics."""
from __future__ import annotations

import pytest

from eagle3lib.errors import LogParseError
from eagle3lib.serving.homes import homes
from eagle3lib.serving.server_logs import accept_rate_definitions, read_startup_log
from eagle3lib.steps.case import SAMPLES_DIR

LOGS = {"sglang": SAMPLES_DIR / "sglang_seed_startup.log", "vllm": SAMPLES_DIR / "vllm_demo_serve.log"}


@pytest.mark.parametrize("engine", sorted(LOGS))
def test_an_unnamed_log_is_read_by_the_home_whose_lines_it_has(engine):
    """Each engine's own startup log, given without an engine, is read by that engine's home (most lines of its
    own); named, by the home named, even the other engine's (which then finds few lines of its own)."""
    log = read_startup_log(LOGS[engine])
    assert log.engine == engine and log.own_lines > 0
    for other in set(LOGS) - {engine}:
        theirs = read_startup_log(LOGS[engine], other)
        assert theirs.engine == other and theirs.own_lines < log.own_lines


def test_the_launch_engines_reading_has_its_version_and_runner():
    """vLLM's log names its version and model runner; SGLang's seed log names neither version nor runner."""
    v = read_startup_log(LOGS["vllm"], "vllm")
    assert (v.version, v.runner) == ("0.32.0", "V1") and "vLLM 0.32.0" in v.summary()
    s = read_startup_log(LOGS["sglang"], "sglang")
    assert (s.version, s.runner) == (None, None) and s.server_args["speculative_num_draft_tokens"] == 2


def test_an_engine_without_a_home_reads_nothing_and_an_empty_log_is_an_error(tmp_path):
    """An engine no home is for reads no log (None: discovery notes it); an empty log is the reader's error."""
    assert read_startup_log(LOGS["sglang"], "toy") is None
    empty = tmp_path / "server.log"
    empty.write_text("\n\n")
    with pytest.raises(LogParseError, match="log is empty"):
        read_startup_log(empty)


def test_accept_rate_definitions_come_from_each_home():
    """Every home's rows, by engine: SGLang's accept len and its four accept-rate formulas, vLLM's three metrics."""
    table = accept_rate_definitions()
    counts = table["engine"].value_counts().to_dict()
    assert counts == {name: len(h.accept_metrics) for name, h in homes().items()} == {"sglang": 5, "vllm": 3}
    mean_len = table.set_index("metric").loc["Mean acceptance length"]
    assert mean_len["formula"].startswith("1 +") and "bonus" in mean_len["note"]
