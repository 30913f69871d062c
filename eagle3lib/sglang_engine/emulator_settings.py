"""What an emulated SGLang server runs with and prints: launch settings -> effective settings -> log lines.

`resolve_settings(SpecSettings(...))` applies the version's startup rewrites and refusals (`sglang_engine.resolver`) and returns
the `Effective` settings with SGLang's startup warnings word for word; `decode_line` / `batch_line` write
`Prefill batch` / `Decode batch` lines in that version's punctuation, and `accept_rate` the version's logged accept
rate (serving-and-throughput.md A.2). Used by the emulator (`emulator`) and the demo sweep.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ServingArgsError
from ..engines.versions import DEFAULT_VERSION, parse_version
from .resolver import adjustment_warning, resolve

_V = parse_version
# Decode-line format by SGLang version (A.2): '[cuda graph: B, ]' from #6201 (2025-05-12, first in v0.4.7); 'accept
# rate' from #11572 (v0.5.3.post2); 'Decode batch,' prefix from #12116 (v0.5.4); trailing ', ' seen v0.5.1-v0.5.10.


@dataclass(frozen=True)
class SpecSettings:
    """A request's serving settings as launched (SGLang flag values; None = flag not given)."""

    num_steps: int | None = 3               # --speculative-num-steps
    topk: int | None = 1                    # --speculative-eagle-topk (1 = chain; > 1 = SGLang tree drafting)
    num_draft_tokens: int | None = 4        # --speculative-num-draft-tokens
    version: str = DEFAULT_VERSION          # SGLang version whose rules and log format are emulated
    decode_log_interval: int = 40           # --decode-log-interval: one decode line every N decode iterations
    speculative: bool = True                # False = no --speculative-algorithm (target-only greedy baseline)

    @classmethod
    def baseline(cls, version: str = DEFAULT_VERSION, decode_log_interval: int = 40) -> SpecSettings:
        """Target-only greedy decoding (no speculation)."""
        return cls(None, None, None, version, decode_log_interval, speculative=False)


@dataclass(frozen=True)
class Effective:
    """What the emulated server runs with after SGLang's normalization, and what it printed at startup."""

    num_steps: int                          # 0 for the baseline
    topk: int | None
    num_draft_tokens: int | None            # verify width incl. the root; drafts verified = num_draft_tokens - 1
    version: str
    decode_log_interval: int
    startup: tuple[str, ...]                # SGLang's startup warning lines, word for word (no timestamps)
    server_args: dict                       # effective ServerArgs fields shown in the server_args= line

    @property
    def speculative(self) -> bool:
        return self.num_steps > 0


def _bad(field_: str, value, allowed: str, problem: str, cause: str) -> ServingArgsError:
    return ServingArgsError(f"setting {field_}", problem, expected=allowed, found=value, cause=cause)


def resolve_settings(settings: SpecSettings, target_arch: str | None = None, device: str = "cpu") -> Effective:
    """Effective settings for `settings` (sglang_engine.resolver), or ServingArgsError for what SGLang / this engine refuse."""
    version = str(_V(settings.version))
    if not isinstance(settings.decode_log_interval, int) or settings.decode_log_interval < 1:
        raise _bad("decode_log_interval", settings.decode_log_interval, "an integer >= 1",
                   "a decode line every N iterations needs N >= 1", "SGLang's argparse takes a positive int")
    if not settings.speculative:
        args = {"speculative_algorithm": None, "decode_log_interval": settings.decode_log_interval, "device": device}
        return Effective(0, None, None, version, settings.decode_log_interval, (), args)
    for name, v in (("speculative_num_steps", settings.num_steps), ("speculative_eagle_topk", settings.topk),
                    ("speculative_num_draft_tokens", settings.num_draft_tokens)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise _bad(name, v, "an integer >= 1", "not a positive integer", "a typo in the launch flags")
    res = resolve({"speculative_algorithm": "EAGLE3", "speculative_num_steps": settings.num_steps,
                   "speculative_eagle_topk": settings.topk, "speculative_num_draft_tokens": settings.num_draft_tokens,
                   "decode_log_interval": settings.decode_log_interval, "device": device},
                  version=version, target_arch=target_arch)
    eff = res.effective
    steps, topk, ndt = (eff["speculative_num_steps"], eff["speculative_eagle_topk"],
                        eff["speculative_num_draft_tokens"])
    most = topk + (steps - 1) * topk * topk                  # candidates a round drafts (sglang_engine.tree.num_candidates)
    if ndt - 1 > most or ndt < 2:
        raise _bad("speculative_num_draft_tokens", ndt, f"2..{most + 1} for num_steps {steps}, topk {topk}",
                   "more verify positions than drafted tokens" if ndt > 2 else "no draft token to verify",
                   f"SGLang {version} has no topk=1 rewrite and fails at the first decode (torch.topk in "
                   "organize_draft_results)" if ndt > 2 and topk == 1 else
                   "SGLang fails at the first decode (torch.topk in organize_draft_results)" if ndt > 2 else
                   "num_draft_tokens counts the root: use >= 2")
    startup = tuple(line for line in (adjustment_warning(h) for h in res.hits) if line)
    keys = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens", "max_running_requests", "disable_overlap_schedule",
            "decode_log_interval", "device")
    return Effective(steps, topk, ndt, version, settings.decode_log_interval, startup,
                     {k: eff.get(k) for k in keys})


def batch_line(kind: str, version: str, fields: list[tuple[str, str]]) -> str:
    """`Decode batch. #running-req: 1, ...` (or `Prefill batch`) in `version`'s punctuation."""
    v = _V(version)
    body = ", ".join(f"{k}: {val}" for k, val in fields)
    trail = ", " if _V("0.5.0") <= v < _V("0.5.11") else ""
    return f"{kind} batch{',' if v >= _V('0.5.4') else '.'} {body}{trail}"


def decode_line(version: str, *, tokens: int, usage: float, throughput: float, accept_len: float | None = None,
                rate: float | None = None) -> str:
    """One SGLang decode log line (batch of one running request, empty queue, no CUDA graph)."""
    f = [("#running-req", "1"), ("#token", str(tokens)), ("token usage", f"{usage:.2f}")]
    if accept_len is not None:
        f.append(("accept len", f"{accept_len:.2f}"))
        if rate is not None:
            f.append(("accept rate", f"{rate:.2f}"))
    if _V(version) >= _V("0.4.7"):
        f.append(("cuda graph", "False"))
    f += [("gen throughput (token/s)", f"{throughput:.2f}"), ("#queue-req", "0")]
    return batch_line("Decode", version, f)
