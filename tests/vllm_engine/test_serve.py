"""vllm_engine.serve: one real-vLLM serving run (engine tests) and its control flow against a stand-in server
that replays the real vLLM 0.32 logs and /metrics kept in data/samples (no vLLM needed)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from eagle3lib.vllm_engine.env import unavailable_reason
from eagle3lib.engine_kit.process import group_members
from eagle3lib.serving.launch import parse_launch
from eagle3lib.throughput.benchparse import parse_prometheus
from eagle3lib.vllm_engine.run_log import parse_vllm_log
from eagle3lib.vllm_engine.serve import serve
from tests.processes import pid_alive

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
PROMPTS = [[1, 3, 46, 320, 598], [1, 3, 374, 17]]

# A stand-in for `python -m vllm.entrypoints.openai.api_server`: prints a real vLLM log from data/samples, answers
# /health, /v1/completions and /metrics (the real scrape) on --port; mode "die" prints the log and exits 1.
FAKE = """#!{python}
import http.server, json, sys, time
args = sys.argv
port, log, mode = int(args[args.index("--port") + 1]), {log!r}, {mode!r}
print(open(log).read(), flush=True)
if mode == "die":
    sys.exit(1)
class H(http.server.BaseHTTPRequestHandler):
    def _send(self, body, ctype="application/json"):
        data = body.encode()
        self.send_response(200); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if mode == "hang":
            time.sleep(30)
        self._send(open({metrics!r}).read() if self.path == "/metrics" else "", "text/plain")
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send(json.dumps({{"choices": [{{"text": "ok", "finish_reason": "length"}}],
                               "usage": {{"prompt_tokens": 5, "completion_tokens": 2}}}}))
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    def make(log: str, mode: str = "serve") -> Path:
        exe = tmp_path / f"python_{mode}"
        exe.write_text(FAKE.format(python=sys.executable, log=str(SAMPLES / log), mode=mode,
                                   metrics=str(SAMPLES / "vllm_demo_metrics.txt")))
        exe.chmod(0o755)
        monkeypatch.setenv("EAGLE3LIB_VLLM_PYTHON", str(exe))
        return exe
    return make


def test_serve_flow_reads_tau_from_metrics_and_log(fake_vllm, tmp_path):
    """Healthy: every prompt answered, τ from /metrics equals τ from the log, all six files written."""
    fake_vllm("vllm_demo_serve.log")
    run = serve("data/demo/target", "draft", tmp_path / "out", prompts=PROMPTS, startup_timeout=30)
    assert run.ok and run.error is None and run.n_answered == 2
    assert run.counters == {"num_drafts": 281, "num_draft_tokens": 843, "num_accepted_tokens": 621}
    assert run.accept_length == pytest.approx(1 + 621 / 281) == run.log_accept_length
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        ["launch.txt", "server.log", "metrics.txt", "prompts.jsonl", "responses.jsonl", "served.json"])
    assert json.loads((tmp_path / "out" / "served.json").read_text())["accept_length"] == run.accept_length
    assert not pid_alive(run.pid) and group_members(run.pid) == []


def test_serve_flow_when_the_engine_dies_at_start(fake_vllm, tmp_path):
    """The process exits before /health: ok=False, the log's root exception is the error, the log is kept."""
    fake_vllm("vllm_refused_unknown_key.log", mode="die")
    run = serve("t", "d", tmp_path / "out", prompts=PROMPTS, startup_timeout=30)
    assert not run.ok and "layers.0.self_attn.rotary_bogus" in run.error and "server.log line" in run.error
    assert run.metrics is None and (tmp_path / "out" / "server.log").stat().st_size > 0
    assert not pid_alive(run.pid)


def test_serve_flow_when_the_process_exits_without_an_exception(fake_vllm, tmp_path):
    """An exit before /health with nothing in the log still fails, naming the exit code."""
    fake_vllm("vllm_demo_offline.log", mode="die")
    run = serve("t", "d", tmp_path / "out", prompts=PROMPTS, startup_timeout=30)
    assert not run.ok and "exited with code 1 before /health" in run.error


def test_serve_flow_when_health_never_answers(fake_vllm, tmp_path):
    """No /health within the timeout: ok=False saying so, and the (still running) server is stopped."""
    fake_vllm("vllm_demo_offline.log", mode="hang")
    run = serve("t", "d", tmp_path / "out", prompts=PROMPTS, startup_timeout=3)
    assert not run.ok and "did not answer /health within 3 s" in run.error
    assert not pid_alive(run.pid) and group_members(run.pid) == []


# ---------------------------------------------------------------- the real vLLM (marker `engine`)

needs_vllm = pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "vLLM is installed")


def _demo_draft(tmp_path: Path, name: str, edit=None) -> Path:
    """A copy of the shipped demo draft with vLLM's input-of-layer ids [0, 2, 4, 6] (and `edit` applied)."""
    d = tmp_path / name
    shutil.copytree(ROOT / "data" / "demo_artifacts" / "draft", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4, 6]
    if edit:
        edit(d, cfg)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


@pytest.fixture(scope="module")
def healthy_run(tmp_path_factory):
    """The healthy demo deployment served once with the 32 held-out prompts (~30-60 s on 2 cores)."""
    from eagle3lib.demo import world as demo
    world = demo.ensure_world(progress=False)
    tmp = tmp_path_factory.mktemp("served")
    return serve(world.target, _demo_draft(tmp, "draft"), tmp / "out", prompts=world.heldout_data, n=32,
                 max_model_len=512)


@pytest.mark.engine
@needs_vllm
def test_real_vllm_serves_the_healthy_demo(healthy_run):
    """τ from the log equals τ from /metrics (1 + accepted / drafts); launch.txt parses as a vLLM command."""
    run = healthy_run
    assert run.ok, run.error
    out = Path(run.out_dir)
    log_rec = parse_vllm_log(out / "server.log", num_speculative_tokens=3).records[-1]
    prom = parse_prometheus(out / "metrics.txt").records[0]
    assert log_rec.drafted == prom.drafted and log_rec.accepted == prom.accepted
    assert log_rec.accept_length == pytest.approx(prom.accept_length) == pytest.approx(run.accept_length)
    assert run.accept_length == pytest.approx(1 + prom.accepted / prom.rounds)
    assert run.accept_length > 2.5 and run.n_answered == 32
    # the served traffic: each answer's ids as the engine generated them, which the target's tokenizer agrees with
    from eagle3lib.model.target import load_tokenizer
    from eagle3lib.serving.traffic import read_traffic
    rows = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    assert all(len(r["token_ids"]) == r["completion_tokens"] for r in rows)
    traffic = read_traffic(out, load_tokenizer(ROOT / "data" / "demo" / "target"))
    assert len(traffic.exchanges) == 32 and {e.ids_from for e in traffic.exchanges} == {"engine"}
    launch = parse_launch((out / "launch.txt").read_text())
    assert (launch.engine, launch.algorithm, launch.num_speculative_tokens) == ("vllm", "eagle3", 3)
    assert launch.draft_path.endswith("draft") and launch.env["VLLM_LOG_STATS_INTERVAL"] == "1"
    assert not pid_alive(run.pid)


@pytest.mark.engine
@needs_vllm
def test_real_vllm_refuses_an_unknown_weight_key(tmp_path):
    """A draft with an extra tensor: ok=False, the error names the key, the server is gone, the log is kept."""
    from safetensors.torch import load_file, save_file
    import torch

    def extra_key(d: Path, cfg: dict):
        w = load_file(str(d / "model.safetensors"))
        w["midlayer.self_attn.rotary_bogus.weight"] = torch.zeros(4)
        save_file(w, str(d / "model.safetensors"))

    draft = _demo_draft(tmp_path, "draft_bad", extra_key)
    run = serve(ROOT / "data" / "demo_artifacts" / "target", draft, tmp_path / "out", prompts=PROMPTS,
                max_model_len=512)
    assert not run.ok and "layers.0.self_attn.rotary_bogus" in run.error
    assert not pid_alive(run.pid) and group_members(run.pid) == []
    assert "There is no module or parameter named" in (tmp_path / "out" / "server.log").read_text()
