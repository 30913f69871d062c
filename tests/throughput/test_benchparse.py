"""Structured run outputs: /server_info, bench JSON, Prometheus text, parse_file dispatch, live server."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from eagle3lib.throughput import benchparse as bp
from eagle3lib.errors import LogParseError

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 400.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 1200.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 720.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 320.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 240.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 160.0
"""


def test_vllm_prometheus_counters_and_deltas():
    """tau = 1 + accepted/drafts, per-position = per_pos/drafts; a 'before' scrape is subtracted."""
    (rec,) = bp.parse_prometheus("metrics.txt", text=PROM).records
    assert rec.accept_length == pytest.approx(2.8) and rec.per_position == pytest.approx((0.8, 0.6, 0.4))
    assert rec.num_steps == 3 and "lifetime" in rec.notes
    before = PROM.replace("400.0", "100.0").replace("720.0", "120.0").replace("} 320.0", "} 20.0")
    (d,) = bp.parse_prometheus("metrics.txt", text=PROM, before=before).records
    assert d.rounds == 300 and d.accept_length == pytest.approx(3.0) and d.per_position[0] == pytest.approx(1.0)


def test_sglang_prometheus_gauges_and_nothing_found():
    """SGLang gauges give the last window's tau; text without spec metrics raises."""
    text = 'sglang:spec_accept_length{model_name="m"} 2.5\nsglang:gen_throughput{model_name="m"} 80.0\n'
    (rec,) = bp.parse_prometheus("m.txt", text=text).records
    assert rec.engine == "sglang" and rec.accept_length == 2.5 and rec.tok_s == 80.0
    with pytest.raises(LogParseError, match="spec_decode_num_drafts"):
        bp.parse_prometheus("m.txt", text='vllm:num_requests_running{engine="0"} 1.0\n')


def test_prometheus_label_values_with_braces_quotes_and_a_broken_line():
    """Label values may hold '}', ',' and escaped quotes (the exposition format allows them); a line the parser
    cannot read is counted with its number and the others are still read."""
    model = r'model_name="a},b \"q\"",position="1"'
    text = ("vllm:spec_decode_num_drafts_total{m=\"x}\"} 10\n"
            "vllm:spec_decode_num_accepted_tokens_total 8\n"
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + model.replace('"1"', '"0"') + "} 6\n"
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + model + "} 2\n"
            "vllm:spec_decode_num_draft_tokens_total{engine= 20\n")
    res = bp.parse_prometheus("m.prom", text=text)
    (rec,) = res.records
    assert rec.rounds == 10 and rec.accept_length == pytest.approx(1.8)
    assert rec.per_position == pytest.approx((0.6, 0.2)) and rec.num_steps == 2
    assert res.n_bad == 1 and res.bad_lines[0][0] == 5 and "not a Prometheus sample" in res.bad_lines[0][1]


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_server_info_effective_settings_and_lifetime_tau(tmp_path):
    """/server_info: settings after normalization, tau from internal_states, lossy thresholds warned."""
    info = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4, "speculative_accept_threshold_single": 0.9, "version": "0.5.6",
            "internal_states": [{"avg_spec_accept_length": 2.5, "last_gen_throughput": 140.0},
                                {"avg_spec_accept_length": 2.7, "last_gen_throughput": 150.0}]}
    res = bp.parse_file(_write(tmp_path, "info.json", info))
    (rec,) = res.records
    assert (rec.num_steps, rec.num_draft_tokens, rec.engine_version) == (3, 4, "0.5.6")
    assert rec.accept_length == pytest.approx(2.6) and rec.tok_s == pytest.approx(290.0)
    assert "lifetime" in rec.notes and any("lossy" in w for w in res.warnings)
    base = bp.parse_file(_write(tmp_path, "b.json", {"speculative_algorithm": None, "internal_states": []}))
    assert base.records[0].is_baseline


def test_bench_outputs_each_become_records(tmp_path):
    """bench_one_batch_server, bench_serving, vllm bench serve and bench_speculative lines in one JSONL."""
    lines = [
        {"run_name": "default", "batch_size": 1, "input_len": 1024, "output_len": 256, "latency": 3.0,
         "output_throughput": 80.0, "last_gen_throughput": 95.0, "acc_length": -1.0, "cache_hit_rate": None},
        {"backend": "sglang", "max_concurrency": 4, "output_throughput": 300.0, "accept_length": 2.2},
        {"backend": "vllm", "max_concurrency": 1, "output_throughput": 120.0, "spec_decode_num_drafts": 100,
         "spec_decode_draft_tokens": 300, "spec_decode_accepted_tokens": 180,
         "spec_decode_per_position_acceptance_rates": [80.0, 60.0, 40.0]},
        {"batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 8, "acc_length": 2.9, "step_time": 0.02,
         "speed": 145.0, "completion_tokens": 512},
    ]
    res = bp.parse_file(_write(tmp_path, "bench.jsonl", "\n".join(json.dumps(x) for x in lines)), series="b")
    one, serving, vllm, spec = res.records
    assert one.tok_s == 95.0 and one.accept_length is None
    assert serving.batch_size == 4 and serving.accept_length == 2.2
    assert vllm.accept_length == pytest.approx(2.8) and vllm.per_position == pytest.approx((0.8, 0.6, 0.4))
    assert (spec.num_draft_tokens, spec.tok_s_scope) == (4, "per_request") and "requested" in spec.notes
    assert {r.series for r in res.records} == {"b"}
    assert any("percent" in w for w in res.warnings)


def test_json_bad_lines_and_unknown_objects(tmp_path):
    """A truncated JSONL line and an unknown object are bad lines; nothing readable raises."""
    ok = json.dumps({"backend": "sglang", "max_concurrency": 1, "output_throughput": 90.0, "accept_length": 1.8})
    res = bp.parse_json(_write(tmp_path, "r.jsonl", ok + '\n{"backend": "sgl\n{"weird": 1}\n'))
    assert len(res.records) == 1 and res.n_bad == 2 and [n for n, _ in res.bad_lines] == [2, 3]
    with pytest.raises(LogParseError, match="no run could be read"):
        bp.parse_json(_write(tmp_path, "w.json", {"weird": 1}))


def test_parse_file_reads_run_record_jsonl():
    """The shipped seed_runs.jsonl is recognised as RunRecords."""
    res = bp.parse_file(SAMPLES / "seed_runs.jsonl")
    assert [r.tok_s for r in res.records] == [90.0, 56.8, 46.7, 54.8]


def test_read_server_uses_server_info_then_metrics():
    """A local SGLang-like server answers /server_info; a vLLM-like one only /metrics."""
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/server_info": json.dumps({"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                                "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                                                "internal_states": [{"avg_spec_accept_length": 2.0}]}),
                    "/metrics": PROM}.get(self.path) if self.server.kind == "sglang" else \
                {"/metrics": PROM}.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *a):
            pass

    for kind, engine in (("sglang", "sglang"), ("vllm", "vllm")):
        srv = HTTPServer(("127.0.0.1", 0), H)
        srv.kind = kind
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            (rec,) = bp.read_server(f"http://127.0.0.1:{srv.server_port}").records
            assert rec.engine == engine
        finally:
            srv.shutdown()
    with pytest.raises(LogParseError, match="did not answer"):
        bp.read_server("http://127.0.0.1:9", timeout=0.5)


def test_parse_file_reads_a_raw_sglang_log_that_starts_with_a_timestamp(tmp_path):
    """A real SGLang log opens with "[2026-..": a log, not a JSON array (JSON arrays of objects still are JSON)."""
    text = "\n".join(l for l in (SAMPLES / "sglang_seed_decode.log").read_text().splitlines()
                     if l.startswith("[")) + "\n"
    res = bp.parse_file(_write(tmp_path, "raw.log", text))
    assert res.records and any(r.accept_length for r in res.records)
    arr = bp.parse_file(_write(tmp_path, "arr.json", [{"speculative_algorithm": None, "internal_states": []}]))
    assert len(arr.records) == 1


def test_each_engines_outputs_are_read_by_its_home_and_a_new_homes_are_asked(monkeypatch):
    """An engine's own JSON output is claimed by its home alone (`EngineHome.bench_record`: SGLang's /server_info and
    bench scripts, vLLM's bench serve); a home added to the list is asked for objects no other home claims, before
    bench_serving's (any backend) is tried."""
    from dataclasses import replace
    from eagle3lib.engine_kit.records import RunRecord
    from eagle3lib.serving.homes import homes
    vllm_bench = {"backend": "vllm", "output_throughput": 120.0, "spec_decode_num_drafts": 10,
                  "spec_decode_accepted_tokens": 9}
    sglang_spec = {"batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 4, "acc_length": 2.9, "speed": 145.0}
    args = ("x:1", "s", "cpu", {})
    assert homes()["sglang"].bench_record(vllm_bench, *args) is None
    assert homes()["vllm"].bench_record(sglang_spec, *args) is None
    assert homes()["vllm"].bench_record(vllm_bench, *args)[0].accept_length == pytest.approx(1.9)
    toy = replace(homes()["vllm"], name="toy", bench_record=lambda obj, where, *a: (
        RunRecord(engine="toy", tok_s=obj["toy_tok_s"], source=where), []) if "toy_tok_s" in obj else None)
    monkeypatch.setitem(homes(), "toy", toy)
    res = bp.parse_json("bench.jsonl", text="\n".join(json.dumps(o) for o in (
        {"toy_tok_s": 42.0, "output_throughput": 1.0}, {"backend": "sglang", "output_throughput": 300.0})))
    assert [(r.engine, r.tok_s) for r in res.records] == [("toy", 42.0), ("sglang", 300.0)]
