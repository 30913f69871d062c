"""What the installed vLLM makes of a draft beside its target, asked of vLLM itself (`inside/probe.py`).

`probe(draft, target)` builds vLLM's engine config and both models on the meta device in the vLLM venv (about
10 s, no weights, no server) and returns a `VllmProbe`: the runner in force and why, the method and K vLLM
resolved, the aux layer ids V1 / V2 read and from which key, fc as built, which checkpoint keys load and which are
dropped, d2t, the embedding / lm_head vLLM uses, vocab and context lengths after vLLM's rewriting. A config vLLM
refuses is an answer (`error`), not an exception. Answers are cached on disk under `$EAGLE3LIB_CACHE/vllm_probe/`
(default ``~/.cache/eagle3lib/vllm_probe/``), keyed by the draft's path, config and safetensors header, the
target's config, the request and the probe script. `probe_many` answers several in one vLLM process.
Usage: ``p = probe("data/demo/draft", "data/demo/target"); p.frame()``.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import EngineError, MissingFileError
from ..jsonfiles import atomic_write
from ..model.config import read_config_json
from ..model.safefiles import read_safetensors_header
from ..engines.facts import id_key_names
from .env import SIDE_DIR, run_script, unavailable_reason, vllm_python

CACHE_ENV = "EAGLE3LIB_CACHE"
SCRIPT = "probe.py"


def vllm_available() -> bool:
    """Whether a vLLM venv is there to ask."""
    return vllm_python() is not None


def cache_dir() -> Path:
    """Where probe answers are kept: $EAGLE3LIB_CACHE/vllm_probe, else ~/.cache/eagle3lib/vllm_probe."""
    root = os.environ.get(CACHE_ENV, "").strip()
    return (Path(root) if root else Path.home() / ".cache" / "eagle3lib") / "vllm_probe"


@dataclass(frozen=True)
class VllmProbe:
    """vLLM's own answers about one (draft, target) request; None = not reached (see `error`)."""
    draft: str
    target: str
    requested: dict                          # method (None: inferred), num_speculative_tokens, max_model_len, dtype
    vllm_version: str
    error: dict | None                       # {stage, type, message, raised_at}: the first stage vLLM refused
    runner: str | None = None                # "v1" / "v2": the model runner this build uses
    runner_why: str = ""
    method: str | None = None
    num_speculative_tokens: int | None = None
    draft_architectures: tuple[str, ...] = ()
    draft_class: str | None = None           # the vLLM model class built, e.g. Eagle3LlamaForCausalLM
    draft_module: str | None = None          # its module, e.g. vllm.model_executor.models.llama_eagle3
    ids_v1: tuple[int, ...] | None = None    # ids the V1 runner reads (None: none found -> the default)
    ids_v1_key: tuple[str, ...] = ()         # config key(s) holding exactly those ids
    ids_v2: tuple[int, ...] | None = None
    ids_v2_key: tuple[str, ...] = ()
    ids_default: tuple[int, ...] | None = None
    ids_used: tuple[int, ...] | None = None  # what the runner in force sets on the target (sorted, deduplicated)
    fc_slots: int | None = None
    fc_input_size: int | None = None
    use_aux_hidden_state: bool | None = None
    aux_states_v1: bool | None = None        # the V1 runner captures aux states for this draft (False: it feeds the
    #                                          target's last hidden state; ids_used is then empty)
    norm_before_fc: bool | None = None
    fc_norm: int | None = None               # per-slot norms built (None: none)
    norm_output: bool | None = None
    norm_before_residual: bool | None = None
    rope: dict | None = None                 # the first layer's rotary embedding: class, base, rope_type, scale
    keys_loaded: dict = field(default_factory=dict)    # checkpoint key -> vLLM parameter it filled
    keys_dropped: tuple[str, ...] = ()       # checkpoint keys that reached no parameter (load succeeded)
    load_error: dict | None = None
    params_unfilled: tuple[str, ...] = ()    # draft parameters no checkpoint key filled
    d2t_param: bool | None = None
    d2t_filled: bool | None = None
    has_own_embed_tokens: bool | None = None
    has_own_lm_head: bool | None = None
    embed_shared: bool | None = None         # None: decided by value at load (the draft ships its own copy)
    lm_head_shared: bool | None = None
    share_error: dict | None = None          # the proposer's sharing step raised (its answer up to there stands)
    lm_head_vocab: int | None = None         # rows of the head the draft computes logits with
    logit_columns: int | None = None         # logit columns kept (draft_vocab_size) before d2t places them
    draft_vocab: int | None = None
    target_vocab: int | None = None
    draft_max_model_len: int | None = None
    draft_max_position_embeddings: int | None = None   # after vLLM's rewriting
    config_max_position_embeddings: int | None = None  # as the draft's config.json says
    target_max_model_len: int | None = None
    log: tuple[str, ...] = ()

    @classmethod
    def from_answer(cls, ans: dict, version: str, config_mpe: int | None) -> "VllmProbe":
        """Flatten one answer of the side script."""
        job, ids, dr = ans.get("job", {}), ans.get("ids") or {}, ans.get("draft") or {}
        ld, sh, vc = ans.get("load") or {}, ans.get("share") or {}, ans.get("vocab_context") or {}
        run = ans.get("runner") or {}
        tup = lambda v: None if v is None else tuple(v)       # noqa: E731
        return cls(draft=job.get("draft", ""), target=job.get("target", ""),
                   requested={k: job.get(k) for k in ("method", "num_speculative_tokens", "max_model_len", "dtype")},
                   vllm_version=version, error=ans.get("error"), runner=run.get("in_use"),
                   runner_why=run.get("why", ""), method=ans.get("method"),
                   num_speculative_tokens=ans.get("num_speculative_tokens"),
                   draft_architectures=tuple(ans.get("draft_architectures") or ()), draft_class=dr.get("class"),
                   draft_module=dr.get("module"),
                   ids_v1=tup(ids.get("v1")), ids_v1_key=tuple(ids.get("v1_key") or ()), ids_v2=tup(ids.get("v2")),
                   ids_v2_key=tuple(ids.get("v2_key") or ()), ids_default=tup(ids.get("default")),
                   ids_used=tup(ids.get("used")), fc_slots=dr.get("fc_slots"), fc_input_size=dr.get("fc_input_size"),
                   use_aux_hidden_state=dr.get("use_aux_hidden_state"),
                   aux_states_v1=(ans.get("aux_states") or {}).get("v1"), norm_before_fc=dr.get("norm_before_fc"),
                   fc_norm=dr.get("fc_norm"), norm_output=dr.get("norm_output"),
                   norm_before_residual=dr.get("norm_before_residual"), rope=dr.get("rope"),
                   keys_loaded=dict(ld.get("loaded") or {}),
                   keys_dropped=tuple(ld.get("not_loaded") or ()) if ld and not ld.get("error") else (),
                   load_error=ld.get("error"), params_unfilled=tuple(ld.get("params_unfilled") or ()),
                   d2t_param=dr.get("d2t_param"), d2t_filled=ld.get("d2t_filled"),
                   has_own_embed_tokens=ld.get("has_own_embed_tokens"), has_own_lm_head=ld.get("has_own_lm_head"),
                   embed_shared=sh.get("embed_shared"), lm_head_shared=sh.get("lm_head_shared"),
                   share_error=sh.get("error"),
                   lm_head_vocab=sh.get("lm_head_vocab"), logit_columns=sh.get("logit_columns_kept"),
                   draft_vocab=vc.get("draft_vocab_size"), target_vocab=vc.get("target_vocab"),
                   draft_max_model_len=vc.get("draft_max_model_len"),
                   draft_max_position_embeddings=vc.get("draft_max_position_embeddings"),
                   config_max_position_embeddings=config_mpe, target_max_model_len=vc.get("target_max_model_len"),
                   log=tuple(ans.get("log") or ()))

    @property
    def ok(self) -> bool:
        """vLLM accepted the config and loaded the checkpoint."""
        return self.error is None and self.load_error is None

    @property
    def ids_key(self) -> str:
        """Where the runner in force took its ids from (or that it fell back to the target's default)."""
        keys = self.ids_v1_key if self.runner == "v1" else self.ids_v2_key
        ids = self.ids_v1 if self.runner == "v1" else self.ids_v2
        return " / ".join(keys) if ids else "none -> the target's default"

    @property
    def head_used(self) -> str:
        """The lm_head the draft computes logits with, in words."""
        if self.has_own_lm_head is None:
            return "not reached"
        if self.has_own_lm_head:
            return f"its own lm_head ({self.lm_head_vocab} rows; shared only if identical to the target's)"
        if self.logit_columns is not None and self.lm_head_vocab and self.logit_columns < self.lm_head_vocab:
            return (f"the target's lm_head ({self.lm_head_vocab} rows) sliced to its first {self.logit_columns} "
                    f"columns: target ids 0..{self.logit_columns - 1}, then placed by d2t as if they were draft ids")
        return f"the target's lm_head ({self.lm_head_vocab} rows)"

    @property
    def _v1_stop(self) -> str:
        short = (self.runner == "v1" and self.draft_max_model_len and self.target_max_model_len
                 and self.draft_max_model_len < self.target_max_model_len)
        return f" (the V1 runner stops drafting past {self.draft_max_model_len} tokens)" if short else ""

    def to_dict(self) -> dict:
        """Plain JSON data."""
        return json.loads(json.dumps(asdict(self), default=list))

    def frame(self) -> pd.DataFrame:
        """One row per question: what vLLM answered (what a notebook shows)."""
        err = self.error or self.load_error
        rows = [("vLLM version", self.vllm_version),
                ("refused", f"{err['stage']}: {err['type']}: {err['message'][:300]}" if err else "no"),
                ("model runner", f"{self.runner} ({self.runner_why})" if self.runner else None),
                ("method / K", f"{self.method} / {self.num_speculative_tokens}"),
                ("draft class", f"{self.draft_class} ({', '.join(self.draft_architectures)})"),
                ("ids V1 reads", f"{self.ids_v1} from {' / '.join(self.ids_v1_key) or 'no key'}"),
                ("ids V2 reads", f"{self.ids_v2} from {' / '.join(self.ids_v2_key) or 'no key'}"),
                ("target default ids", self.ids_default),
                ("ids used", f"{self.ids_used} ({self.ids_key})"),
                ("fc", f"{self.fc_slots} slots, input {self.fc_input_size}; use_aux_hidden_state "
                       f"{self.use_aux_hidden_state}, norm_before_fc {self.norm_before_fc}, fc_norm "
                       f"{self.fc_norm}, norm_output {self.norm_output}, norm_before_residual "
                       f"{self.norm_before_residual}"),
                ("rope", None if not self.rope else f"{self.rope.get('class')} base {self.rope.get('base')}, "
                         f"rope_type {self.rope.get('rope_type')}, softmax scale {self.rope.get('softmax_scale')}"),
                ("keys loaded", len(self.keys_loaded)),
                ("keys dropped silently", ", ".join(self.keys_dropped) or "none"),
                ("d2t", f"parameter {'present' if self.d2t_param else 'absent'}"
                        + (f", {'filled' if self.d2t_filled else 'NOT filled (zeros)'} by the checkpoint"
                           if self.d2t_param else "")),
                ("embedding", "the draft's own" if self.has_own_embed_tokens else
                 "the target's" if self.embed_shared else
                 "NOT shared: stays at init" if self.embed_shared is False else "not reached"),
                ("lm_head", self.head_used),
                ("vocab draft / target", f"{self.draft_vocab} / {self.target_vocab}"),
                ("max positions", f"draft {self.config_max_position_embeddings} in config -> "
                                  f"{self.draft_max_position_embeddings} in vLLM; draft max_model_len "
                                  f"{self.draft_max_model_len}, target {self.target_max_model_len}" + self._v1_stop)]
        return pd.DataFrame(rows, columns=["question", "vLLM's answer"])


def _config(folder: Path, what: str) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise MissingFileError(f"vLLM probe {what}", "no config.json", expected=f"{path}", found="nothing",
                               cause=f"the {what} path is not a Hugging Face model folder")
    return read_config_json(path, what)[0]          # the case's one parse of it (`once.kept`)


def _job(draft, target, method, k, max_model_len, dtype) -> tuple[dict, str, int | None]:
    """The side script's job for one request, its cache key and the draft config's max_position_embeddings."""
    d, t = Path(draft).resolve(), Path(target).resolve()
    dcfg, tcfg = _config(d, "draft"), _config(t, "target")
    headers = {f.name: read_safetensors_header(f) for f in sorted(d.glob("*.safetensors"))}
    job = {"draft": str(d), "target": str(t), "method": method, "num_speculative_tokens": int(k),
           "max_model_len": max_model_len, "dtype": dtype,
           "id_keys": list(id_key_names("vllm"))}     # where the side script looks for the key each runner read
    h = hashlib.sha256()
    for part in (job, dcfg, headers, tcfg, str(vllm_python()), (SIDE_DIR / SCRIPT).read_text()):
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
    return job, h.hexdigest()[:32], dcfg.get("max_position_embeddings")


def cache_key(draft, target, *, method: str | None = "eagle3", num_speculative_tokens: int = 3,
              max_model_len: int | None = None, dtype: str = "float32") -> str:
    """The key a probe answer is cached under (changes with the draft's path, config, header, the target's config,
    the request, the vLLM interpreter and the probe script)."""
    return _job(draft, target, method, num_speculative_tokens, max_model_len, dtype)[1]


def probe_many(requests: list[dict], *, use_cache: bool = True, timeout: float = 900) -> list[VllmProbe]:
    """`probe` for several requests (dicts of probe's arguments); the uncached ones run in one vLLM process."""
    jobs = [_job(r["draft"], r["target"], r.get("method", "eagle3"), r.get("num_speculative_tokens", 3),
                 r.get("max_model_len"), r.get("dtype", "float32")) for r in requests]   # bad paths fail first
    if not vllm_available():
        raise EngineError("vllm_probe", "the real vLLM is not available", expected="a vLLM venv",
                          found=unavailable_reason())
    out: list[dict | None] = [None] * len(jobs)
    if use_cache:
        for i, (_, key, _) in enumerate(jobs):
            f = cache_dir() / f"{key}.json"
            if f.is_file():
                out[i] = json.loads(f.read_text())
    todo = [i for i, a in enumerate(out) if a is None]
    if todo:
        with tempfile.TemporaryDirectory() as tmp:
            jf = Path(tmp) / "jobs.json"
            jf.write_text(json.dumps([jobs[i][0] for i in todo]))
            reply = run_script(SCRIPT, ["--jobs", str(jf)], timeout=timeout)
        for i, ans in zip(todo, reply.get("answers", [])):
            out[i] = {"vllm_version": reply.get("vllm_version", "?"), "answer": ans}
            cache_dir().mkdir(parents=True, exist_ok=True)
            atomic_write(cache_dir() / f"{jobs[i][1]}.json", json.dumps(out[i], default=str))
    return [VllmProbe.from_answer(a["answer"], a["vllm_version"], jobs[i][2]) for i, a in enumerate(out)]


def probe(draft, target, *, method: str | None = "eagle3", num_speculative_tokens: int = 3,
          max_model_len: int | None = None, dtype: str = "float32", use_cache: bool = True) -> VllmProbe:
    """vLLM's own answers about serving `draft` beside `target` (method None: vLLM infers it from the path).

    EngineError when there is no vLLM venv (`vllm_env.unavailable_reason()`) or the probe process itself fails;
    a config or checkpoint vLLM refuses is returned with `error` / `load_error` set."""
    return probe_many([{"draft": draft, "target": target, "method": method,
                        "num_speculative_tokens": num_speculative_tokens, "max_model_len": max_model_len,
                        "dtype": dtype}], use_cache=use_cache)[0]
