"""sglang_engine.said: SGLang's text logs (never a .json beside them) say whether it refused the draft; the load
eagle3lib's hook recorded overrules the tables; without either the tables' view at the version stands."""
from __future__ import annotations

from eagle3lib.engine_kit.view import Aspect, EngineView, Served
from eagle3lib.sglang_engine.said import said

TRACEBACK = ("[2026-12-05 04:28:16] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/x/site-packages/sglang/srt/models/llama_eagle3.py", line 120, in load_weights\n'
             "KeyError: 'midlayer.extra.weight'\n")


def _tables(version, runner):
    return EngineView("sglang", version, runner, {"d2t": Aspect("d2t", "checkpoint", "table", "the tables")})


def _served(*logs, load=None) -> Served:
    return Served("draft", "target", 8, False, tuple(logs), load)


def test_without_a_log_or_a_load_the_tables_view_at_the_version_stands():
    view, notes, problems = said(_tables, _served(), "0.5.6")
    assert (view.version, view.source("d2t"), view.refused, notes, problems) == ("0.5.6", "table", None, [], [])


def test_a_traceback_it_served_no_batch_after_is_a_refusal_and_a_json_is_not_read(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(TRACEBACK)
    (tmp_path / "bench.json").write_text(TRACEBACK)      # a served run's JSON: not a log SGLang wrote
    view, *_ = said(_tables, _served(str(tmp_path / "bench.json")), "0.5.6")
    assert view.refused is None
    view, *_ = said(_tables, _served(str(log)), "0.5.6")
    assert view.refused_source == "log" and "midlayer.extra.weight" in view.refused and "server.log:" in view.refused
    with open(log, "a") as f:
        f.write("[2026-12-05 04:28:20] Decode batch, #running-req: 1, #token: 33, accept len: 3.20\n")
    view, notes, _ = said(_tables, _served(str(log)), "0.5.6")
    assert view.refused is None and any("not a refusal" in n for n in notes)


def test_the_refusals_line_is_the_editors_past_a_progress_bar(tmp_path):
    """A progress bar redraws with "\r" inside one line: the refusal names the line an editor shows (text mode's
    newline translation split there and named line 6)."""
    log = tmp_path / "server.log"
    log.write_bytes(b"Loading safetensors: 0%\rLoading safetensors: 50%\rLoading safetensors: 100%\n"
                    + TRACEBACK.encode())
    view, *_ = said(_tables, _served(str(log)), "0.5.6")
    assert f"{log}:4;" in view.refused, view.refused          # the KeyError's line


def test_the_hooks_load_overrules_the_tables():
    view, _, _ = said(_tables, _served(load={"d2t_read": False, "keys": []}), "0.5.6")
    assert (view.value("d2t"), view.source("d2t")) == ("zeros", "probe")
