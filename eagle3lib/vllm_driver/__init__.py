"""vLLM driver: the real vLLM run from eagle3lib, in its own venv and reached only by subprocess (what vLLM does,
by version, as data: `eagle3lib.engines`).

- `env`      where the real vLLM lives (its own venv, `make vllm`) and how to run a script of `inside/` in it.
- `probe`    vLLM's own answers about one draft beside its target (`probe`: ids per runner, fc, keys, d2t,
             embedding / lm_head, lengths), cached on disk; what the engine tests check the tables against.
- `server`   one real vLLM OpenAI server as a child process group: start, /health, HTTP, stop by its pid.
- `prompts`  the prompts sent to a real engine: a prompts .jsonl, or a dataset's user turns (`write_prompts`).
- `serve`    serve a draft with the real vLLM OpenAI server, send prompts, measure τ (/metrics and log), stop it.
- `dump`     the real vLLM's offline engine on prompts -> an eagle3lib dump of what its draft's fc got
             (+ its first-step draft logits); `identify` names the dumped slots' boundaries.
- `inside/`  the scripts that run inside the vLLM venv (they never import eagle3lib).
"""
