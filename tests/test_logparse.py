"""Tests for eagle3lib.logparse: every historical log-line format, JSON outputs, Prometheus, bad input."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from eagle3lib import logparse as lp
from eagle3lib.errors import LogParseError, MissingFileError

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"
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
    res = lp.parse_file(SAMPLES / "sglang_seed_decode.log")
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
    (rec,) = lp.parse_prometheus("metrics.txt", text=PROM).records
    assert rec.accept_length == pytest.approx(2.8) and rec.per_position == pytest.approx((0.8, 0.6, 0.4))
    assert rec.num_steps == 3 and "lifetime" in rec.notes
    before = PROM.replace("400.0", "100.0").replace("720.0", "120.0").replace("} 320.0", "} 20.0")
    (d,) = lp.parse_prometheus("metrics.txt", text=PROM, before=before).records
    assert d.rounds == 300 and d.accept_length == pytest.approx(3.0) and d.per_position[0] == pytest.approx(1.0)


def test_sglang_prometheus_gauges_and_nothing_found():
    """SGLang gauges give the last window's tau; text without spec metrics raises."""
    text = 'sglang:spec_accept_length{model_name="m"} 2.5\nsglang:gen_throughput{model_name="m"} 80.0\n'
    (rec,) = lp.parse_prometheus("m.txt", text=text).records
    assert rec.engine == "sglang" and rec.accept_length == 2.5 and rec.tok_s == 80.0
    with pytest.raises(LogParseError, match="spec_decode_num_drafts"):
        lp.parse_prometheus("m.txt", text='vllm:num_requests_running{engine="0"} 1.0\n')


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
    res = lp.parse_file(_write(tmp_path, "info.json", info))
    (rec,) = res.records
    assert (rec.num_steps, rec.num_draft_tokens, rec.engine_version) == (3, 4, "0.5.6")
    assert rec.accept_length == pytest.approx(2.6) and rec.tok_s == pytest.approx(290.0)
    assert "lifetime" in rec.notes and any("lossy" in w for w in res.warnings)
    base = lp.parse_file(_write(tmp_path, "b.json", {"speculative_algorithm": None, "internal_states": []}))
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
    res = lp.parse_file(_write(tmp_path, "bench.jsonl", "\n".join(json.dumps(x) for x in lines)), series="b")
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
    res = lp.parse_json(_write(tmp_path, "r.jsonl", ok + '\n{"backend": "sgl\n{"weird": 1}\n'))
    assert len(res.records) == 1 and res.n_bad == 2 and [n for n, _ in res.bad_lines] == [2, 3]
    with pytest.raises(LogParseError, match="no run could be read"):
        lp.parse_json(_write(tmp_path, "w.json", {"weird": 1}))


def test_parse_file_reads_run_record_jsonl():
    """The shipped seed_runs.jsonl is recognised as RunRecords."""
    res = lp.parse_file(SAMPLES / "seed_runs.jsonl")
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
            (rec,) = lp.read_server(f"http://127.0.0.1:{srv.server_port}").records
            assert rec.engine == engine
        finally:
            srv.shutdown()
    with pytest.raises(LogParseError, match="did not answer"):
        lp.read_server("http://127.0.0.1:9", timeout=0.5)
