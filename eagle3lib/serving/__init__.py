"""Serving, across engines: what a server is asked to run, what it reports, and what it feeds the draft. (What each
engine does with a draft, by version, is `eagle3lib.engines`; each engine's own readers, driver and, for SGLang, its
emulator and draft trees: its home `eagle3lib.<name>_engine`.)

- `homes`             the engines' homes, found by name from the one list (`home(name)`, `homes()`).
- `launch`            a launch command of any engine the library knows into the settings it requests (`parse_launch`).
- `layer_reading`     which aux ids each engine reads from a draft config and the boundaries it captures, beside
                      the trained ones (each engine's reading: its home's `ids`); `layer_frame`, `draft_slots`.
- `loaded_view`       the draft as an engine loads it by the tables (`engine_view`: layout, d2t, embedding, lm_head;
                      the view itself is `engine_kit.view.EngineView`).
- `server_logs`       a server's startup log read by its engine's home (`read_startup_log`: the launch's engine, or
                      the home whose own lines it has) and what each engine's logged accept metrics mean.
- `traffic`           the requests a server answered and its answers as token ids (vllm_engine.serve's prompts.jsonl and
                      responses.jsonl; text re-tokenized only where the engine's count agrees).
- `crossengine`       one deployment's settings seen by SGLang and vLLM (steps/topk/ndt <-> K), and a lint.
"""
