"""SGLang driver: the real SGLang run from eagle3lib, in its own venv and reached only by subprocess (what SGLang does,
by version, as data: `eagle3lib.engines`).

- `env`     where the real SGLang lives (its own venv, `make sglang`), whether this host can run it (the host rows:
            avx512_bf16 for the CPU build), the flags and variables a CPU build needs.
- `server`  one real SGLang server as a child process group: its launch arguments, start, /health, stop by its pid.
- `serve`   serve a draft, send prompts to /generate, read /server_info: τ (SGLang's own per-request counts), the
            served traffic, the effective settings; optionally with the in-process hook.
- `dump`    what the hook saw -> an eagle3lib dump of what the draft's fc got, and the load facts (keys taken or
            dropped, embedding / lm_head replaced, layers captured).
- `inside/hook/sitecustomize.py`  the in-process hook, imported by every process of the server (never imports
            eagle3lib): it patches SGLang's draft and target model files to record, never to change.
"""
