"""engine_kit.log_scan: a logged call's keyword arguments, a Prometheus scrape's values, a log's runs and bad lines."""
import pytest

from eagle3lib.engine_kit.log_scan import LogScan, logged_number, parse_call_kwargs, prometheus_values
from eagle3lib.errors import LogParseError


def test_parse_call_kwargs_is_tolerant():
    """Quoted commas, nested brackets and non-literal values survive; the closing paren ends the call."""
    kw = parse_call_kwargs("ServerArgs(a='x, y', b=[1, (2, 3)], c={'k': 1}, d=Backend.FA3, e=None) trailing=1")
    assert kw == {"a": "x, y", "b": [1, (2, 3)], "c": {"k": 1}, "d": "Backend.FA3", "e": None}


def test_prometheus_values_sum_by_name_and_position_and_count_bad_lines():
    """_total is dropped, samples of one name and position add up, an unreadable or infinite sample is a bad line."""
    text = ["# HELP vllm:spec_decode_num_drafts drafts", "vllm:spec_decode_num_drafts_total{engine=\"0\"} 10",
            "vllm:spec_decode_num_drafts_total{engine=\"1\"} 5",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 7", "garbage here {",
            "vllm:x NaN"]
    scan = LogScan("m.txt", "\n".join(text))
    vals = prometheus_values(scan.lines, scan)
    assert vals == {("vllm:spec_decode_num_drafts", None): 15.0,
                    ("vllm:spec_decode_num_accepted_tokens_per_pos", 1): 7.0}
    assert [n for n, _ in scan.bad] == [5, 6]


def test_a_scan_splits_runs_and_names_the_file_when_nothing_is_read():
    """Runs split at a boundary once lines were kept; nothing kept raises LogParseError naming the source."""
    scan = LogScan("x.log", "a\nb\nc")
    for n, line, _ in scan.clean_lines():
        scan.segs[-1].items.append((n, "", line))
        if line == "a":
            scan.boundary(label="second")
    assert [[d for _, _, d in seg.items] for seg in scan.segs] == [["a"], ["b", "c"]]
    assert scan.segs[1].label == "second"
    with pytest.raises(LogParseError, match="x.log"):
        LogScan("x.log", "nothing").build_result(lambda seg: seg.items, lambda seg, i: None, 0, "no runs",
                                                 expected="runs", cause="none")
    assert (logged_number("12"), logged_number("2.5%"), logged_number("None")) == (12, 2.5, None)
