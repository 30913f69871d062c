"""What a vLLM log (server or offline `vllm.LLM`) says the engine did with the draft.

`read_vllm_log(source)` reads: the version, the model runner (V1 / V2 and the line that says why), the resolved
architectures of target and draft, the aux layer ids the runner captures, whether the draft got the target's
embedding and lm_head, the max model len, the speculative config, and every exception a traceback ended with (the
key, shape, file or "not supported" it names, its line). The message texts are vLLM 0.32's own:
`v1/spec_decode/llm_base_proposer.py` `_maybe_share_embeddings` / `_maybe_share_lm_head`, `v1/worker/gpu_model_runner.py`
`_setup_eagle3_aux_hidden_state_outputs`, `config/vllm.py` `use_v2_model_runner`. Never raises on garbage; only an
empty source is a `LogParseError` (as `sglang_engine.startup.read_sglang_startup_log`).
    r = read_vllm_log("out/server.log"); r.aux_layer_ids, r.embedding, r.root_error
"""
from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass

import pandas as pd

from ..errors import LogParseError
from ..jsonfiles import to_json_value
from ..engines.facts import default_ids, default_ids_row
from ..engines.engine_errors import LoggedError, root_error, scan_errors, source_lines, split_prefix
from ..engine_kit.log_scan import parse_call_kwargs
from ..once import parsed_once

_VERSION = re.compile(r"Initializing a V1 LLM engine \(v(?P<a>[^)]+)\)|vLLM API server version (?P<b>\S+)|"
                      r"█.*\bversion (?P<c>\d[\w.+-]*)")
_ARCH = re.compile(r"Resolved architecture: (\S+)")
_MAX_LEN = re.compile(r"Using max model len (\d+)")
_AUX = re.compile(r"Using (?:Eagle3 )?auxiliary layers from (speculative config|config|model): (\(.*\)|\[.*\])")
_READY = ("Starting vLLM server on", "init engine (profile, create kv cache, warmup model) took")
# the runner's own words (config/vllm.py use_v2_model_runner) -> runner
RUNNER_LINES = (("using the V1 model runner instead", "V1"),     # "requires Triton" / "does not yet support ..."
                ("Watermarking requires Model Runner V2", "V2"))
# llm_base_proposer.py _maybe_share_embeddings (0.32 :1436-1500); a later line overrides an earlier one
EMBEDDING_LINES = (("Detected EAGLE model without its own embed_tokens", "shared (no own embed_tokens)"),
                   ("Detected EAGLE model with embed_tokens identical to the target", "shared (identical)"),
                   ("Detected EAGLE model with distinct embed_tokens weights", "own (distinct)"),
                   ("Detected MTP model. Sharing target model embedding", "shared (MTP)"),
                   ("differs from draft embedding dim", "own (widths differ)"),
                   ("vocab embedding will be loaded separately from the target", "own (pipeline parallel)"))
# _maybe_share_lm_head (0.32 :1505-1560)
LM_HEAD_LINES = (("Detected EAGLE model without its own lm_head", "shared (no own lm_head)"),
                 ("Detected EAGLE model with lm_head identical to the target", "shared (identical)"),
                 ("Detected EAGLE model with distinct lm_head weights", "own (distinct)"),
                 ("Detected MTP model. Sharing target model lm_head", "shared (MTP)"))


@dataclass(frozen=True)
class VllmLogReading:
    """What the log says vLLM did with the draft; None where the log does not say."""

    source: str
    version: str | None
    runner: str | None                 # "V1" / "V2"
    runner_reason: str | None          # the log line that chose it
    target_architecture: str | None
    draft_architecture: str | None
    draft_loaded: bool                 # "Loading drafter model..." seen (it may still have failed)
    aux_layer_ids: tuple[int, ...] | None
    aux_layer_ids_from: str | None     # "speculative config" (the log line), or "target default (2, L//2, L-3)"
    embedding: str | None              # "shared (no own embed_tokens)", "shared (identical)", "own (distinct)", ...
    lm_head: str | None
    max_model_len: int | None
    method: str | None
    num_speculative_tokens: int | None
    speculative_config: dict | None
    errors: tuple[LoggedError, ...]
    evidence: dict                     # field -> (line number, text) it was read from
    lines: int
    warnings: tuple[str, ...]
    engine = "vllm"                    # the home that read it

    @property
    def own_lines(self) -> int:
        """How many lines only vLLM writes: those a fact was read from, and the drafter's loading."""
        return len({line for line, _ in self.evidence.values()}) + self.draft_loaded

    def summary(self) -> str:
        """What the log names: the version, the model runner, the facts read and the engine's own failure."""
        root = self.root_error
        return (f"{self.source}: {self.lines} lines, vLLM {self.version or '(version not logged)'}, runner "
                f"{self.runner or '(not logged)'}, {len(self.evidence)} facts read"
                + (f", failed: {root.exception} (line {root.line_no})" if root else ""))

    def proof(self, changed=()) -> pd.DataFrame:
        """The lines that show what vLLM ran (`frame`: every fact read, each with its line; `changed` is SGLang's
        rewrites, which vLLM does not make)."""
        return self.frame()

    @property
    def root_error(self) -> LoggedError | None:
        """The engine's own failure: the first exception that is not vLLM re-raising another process's."""
        return root_error(self.errors)

    @property
    def ok(self) -> bool:
        """No error but those of the asked-for shutdown."""
        return self.root_error is None

    def frame(self) -> pd.DataFrame:
        """One row per fact (what, value, line, log text) and one per error."""
        rows = []
        for name in ("version", "runner", "target_architecture", "draft_architecture", "aux_layer_ids", "embedding",
                     "lm_head", "max_model_len", "method", "num_speculative_tokens"):
            line, text = self.evidence.get(name, (None, ""))
            value = getattr(self, name)
            if name == "aux_layer_ids" and self.aux_layer_ids_from:
                text = text or self.aux_layer_ids_from
            rows.append({"what": name, "value": value, "line": line, "log": text[:200]})
        for e in self.errors:
            rows.append({"what": "error" if not e.wrapper else "error (re-raised)",
                         "value": f"{e.exception}: {e.message[:160]}", "line": e.line_no,
                         "log": ", ".join(f"{k} {v}" for k, v in (("kind", e.kind), ("key", e.key), ("shape", e.shape),
                                                                   ("file", e.file), ("phase", e.phase)) if v)})
        return pd.DataFrame(rows, columns=["what", "value", "line", "log"], dtype=object)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["root_error"] = asdict(self.root_error) if self.root_error else None
        return to_json_value(d)


def _ids(text: str) -> tuple[int, ...] | None:
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    v = (v,) if isinstance(v, int) else v
    return tuple(v) if isinstance(v, (list, tuple)) and all(isinstance(i, int) for i in v) else None


def spec_in_line(msg: str) -> dict | None:
    """vLLM's speculative config in one log message (``SpeculativeConfig(...)`` or the non-default args), else None."""
    if "SpeculativeConfig(" in msg:
        kw = parse_call_kwargs(msg[msg.index("SpeculativeConfig("):])
        if "num_spec_tokens" in kw:
            kw["num_speculative_tokens"] = kw.pop("num_spec_tokens")
        return kw or None      # `SpeculativeConfig(**self.speculative_config)` in a traceback says nothing
    if "non-default args:" in msg and "speculative_config" in msg:
        try:
            args = ast.literal_eval(msg[msg.index("non-default args:") + 17:].strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        spec = args.get("speculative_config") if isinstance(args, dict) else None
        return dict(spec) if isinstance(spec, dict) else None
    return None


def read_vllm_log(source, *, num_target_layers: int | None = None) -> VllmLogReading:
    """Read a vLLM log (path, text or lines). `num_target_layers` fills in the default aux ids when none are logged.
    A file is read and parsed once per case (`once`)."""
    return parsed_once("vllm log", source, lambda: _vllm_log(source, num_target_layers), num_target_layers)


def _vllm_log(source, num_target_layers: int | None) -> VllmLogReading:
    lines, where = source_lines(source, "a vLLM server or offline log, or its text")
    if not any(ln.strip() for ln in lines):
        raise LogParseError(where, "log is empty", expected="a vLLM server or offline log", found="no text")
    ev: dict = {}
    val: dict = {"archs": [], "draft_loaded": False}
    ready_at, engines, spec_seen = None, 0, []
    for no, raw in enumerate(lines, start=1):
        text = split_prefix(raw)[1].strip()
        if not text:
            continue
        if ready_at is None and any(r in text for r in _READY):
            ready_at = no
        if "Initializing a V1 LLM engine" in text:
            engines += 1
        if (vm := _VERSION.search(text)) and "version" not in val:
            val["version"], ev["version"] = vm["a"] or vm["b"] or vm["c"], (no, text)
        if am := _ARCH.search(text):
            val["archs"].append(am.group(1))
            ev["target_architecture" if len(val["archs"]) == 1 else "draft_architecture"] = (no, text)
        if (mm := _MAX_LEN.search(text)) and "max_model_len" not in val:
            val["max_model_len"], ev["max_model_len"] = int(mm.group(1)), (no, text)
        if (found := spec_in_line(text)) is not None:
            spec_seen.append((no, text))
            val["spec"] = found
        if "Loading drafter model" in text:
            val["draft_loaded"] = True
        if xm := _AUX.search(text):
            val["aux"], val["aux_from"], ev["aux_layer_ids"] = _ids(xm.group(2)), xm.group(1), (no, text)
        for table, name in ((RUNNER_LINES, "runner"), (EMBEDDING_LINES, "embedding"), (LM_HEAD_LINES, "lm_head")):
            hit = next((v for needle, v in table if needle in text), None)
            if hit:
                val[name], ev[name] = hit, (no, text)
    warnings = []
    aux, aux_from = val.get("aux"), val.get("aux_from")
    if aux_from in ("speculative config", "config"):
        aux_from = "speculative config"
    elif aux_from == "model":
        aux_from = "target default (the model's own)"
    elif val["draft_loaded"] and ("embedding" in val or "lm_head" in val):   # loaded, and no ids line after it
        at = val.get("version")
        rule = default_ids_row("vllm", at)
        aux_from = f"target default ({rule.subject if rule else 'not in the engine facts'})"
        aux = default_ids("vllm", num_target_layers, at) if num_target_layers and rule else None
        if aux is None:
            warnings.append("no 'Using auxiliary layers' line: the runner used the target's default ids "
                            f"({rule.subject if rule else 'not in the engine facts at this version'}); pass "
                            "num_target_layers= to have them")
    spec = val.get("spec") or None
    if spec_seen:
        ev["method"] = ev["num_speculative_tokens"] = spec_seen[0]
    errors = scan_errors(lines, ready_at)
    if engines > 1:
        warnings.append(f"{engines} engine starts in this log: the facts are those of the last one that logged them")
    if not (val.get("version") or spec or val["archs"]):
        warnings.append("no vLLM start-up line found (version, Resolved architecture, speculative config): "
                        "is this a vLLM log?")
    nst = spec.get("num_speculative_tokens") if spec else None
    archs = val["archs"]
    return VllmLogReading(
        where, val.get("version"), val.get("runner"), ev.get("runner", (None, None))[1],
        archs[0] if archs else None, archs[1] if len(archs) > 1 else None, val["draft_loaded"], aux, aux_from,
        val.get("embedding"), val.get("lm_head"), val.get("max_model_len"),
        spec.get("method") if spec else None, nst if isinstance(nst, int) and not isinstance(nst, bool) else None,
        spec, tuple(errors), ev, len(lines), tuple(warnings))
