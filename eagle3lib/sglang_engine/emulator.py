"""Offline speculative engine: greedy EAGLE-3 chain or tree drafting on an HF target, with SGLang-format output.

`SpecEngine(target, draft, capture).generate(prompt_ids, max_new_tokens, SpecSettings(...))` drafts `num_steps`
tokens per round (topk 1; topk > 1: an SGLang tree of num_draft_tokens nodes, `tree`), verifies
num_draft_tokens positions in ONE target forward (trees under a tree attention mask), keeps both KV caches (HF
cache cropped on rejection, a tree's accepted path moved into place; the draft's cache is addressed by position)
and returns exactly the target's greedy tokens. Settings go through `emulator_settings` (SGLang's startup rewrites and
warnings for the version); each request prints SGLang `Prefill batch` / `Decode batch` lines in that version's
format (serving-and-throughput.md A.2).
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from torch import Tensor

from ..hidden.dumps import save_dump
from ..engine_kit.capturespec import CaptureSpec, HiddenTap
from ..hidden.decoders import decoder_stack
from ..model.draft import Eagle3Draft
from ..errors import DataError, LayoutError, ServingArgsError, VocabError
from .emulator_settings import Effective, SpecSettings, batch_line, decode_line, resolve_settings
from .resolver import accept_rate
from .tree import SlotCache, draft_tree, greedy_path, keep_cache_rows, verify_inputs

@dataclass(frozen=True, eq=False)
class GenerateResult:
    """One request: tokens, acceptance counters, timings and the server log lines it produced."""

    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]             # generated tokens; the first comes from the prefill
    effective: Effective
    capture: str                            # the capture's label ('' for the baseline)
    layout: tuple[str, ...]                 # boundaries captured, in fc order (before padding)
    accept_lengths: tuple[int, ...]         # per verify round: accepted drafts + 1 (bonus)
    accepted_per_position: tuple[int, ...]  # rounds whose drafts 1..j+1 were all accepted (tree: depth j+1)
    dropped: int                            # emitted by the last round past max_new_tokens / EOS, then cut
    finish_reason: str                      # "length" or "stop" (EOS)
    prefill_s: float
    decode_s: float
    draft_s: float                          # draft forwards inside decode (chain steps + extend)
    verify_s: float                         # target verify forwards inside decode
    log_lines: tuple[str, ...]
    aux: Tensor | None = field(default=None, repr=False)        # (T, m*H) rows handed to fc, when dumped
    aux_ids: Tensor | None = field(default=None, repr=False)    # (T,) token of each aux row

    rounds = property(lambda self: len(self.accept_lengths), doc="verify rounds (SGLang spec_verify_ct)")

    @property
    def drafted(self) -> int:
        """Draft tokens verified (rounds x (num_draft_tokens - 1))."""
        return self.rounds * ((self.effective.num_draft_tokens or 1) - 1)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted (bonus tokens excluded)."""
        return sum(self.accept_lengths) - self.rounds

    @property
    def accept_length(self) -> float | None:
        """tau = tokens per verify round, bonus included (SGLang's 'accept len')."""
        return sum(self.accept_lengths) / self.rounds if self.rounds else None

    @property
    def per_position(self) -> tuple[float, ...]:
        """P(drafts 1..j+1 all accepted) per position j (unconditional, as vLLM reports it)."""
        return tuple(c / self.rounds for c in self.accepted_per_position) if self.rounds else ()

    @property
    def tok_s(self) -> float:
        """Decode tokens per second (tokens after the prefill's / decode wall time)."""
        return (len(self.output_ids) - 1) / self.decode_s if self.decode_s > 0 else float("nan")


class SpecEngine:
    """Greedy speculative decoding of an HF causal LM target with an `Eagle3Draft`, wired by a `CaptureSpec`."""

    def __init__(self, target, draft: Eagle3Draft | None = None, capture: CaptureSpec | None = None, *,
                 model_path: str = "", draft_path: str = "", max_total_tokens: int = 131072, log=None,
                 stop_at_eos: bool = True, clock=time.perf_counter):
        self.target, self.draft, self.capture = target.eval(), draft, capture
        base, layers, _ = decoder_stack(target)
        text = getattr(base, "config", target.config)      # a VLM wrapper's decoder has the text config
        self.num_layers, self.hidden, self.vocab = len(layers), int(text.hidden_size), int(text.vocab_size)
        self.model_path, self.draft_path, self.log = model_path, draft_path, log
        self.clock = clock        # seconds for timings: wall (perf_counter) or this thread's CPU (thread_time)
        self.max_total_tokens = max_total_tokens          # the KV pool size 'token usage' is printed against
        eos = getattr(target.config, "eos_token_id", None) if stop_at_eos else None
        self.eos = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        params = inspect.signature(target.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None
        self.arch = (getattr(target.config, "architectures", None) or [None])[0]
        # window of the target's sliding-window layers (gpt-oss), for the tree verify mask; None without such layers
        self._window = (getattr(text, "sliding_window", None)
                        if "sliding_attention" in (getattr(text, "layer_types", None) or ()) else None)
        self.layout: tuple[str, ...] = ()
        self._server = None      # counters of the emulated server: launch key, decode iterations, log window
        self.lines: list[str] = []
        if draft is not None:
            self._check_draft(draft, capture)

    def _check_draft(self, draft: Eagle3Draft, capture: CaptureSpec | None):
        if capture is None:
            raise LayoutError("SpecEngine(capture=None)", "a draft needs a capture spec", expected="a CaptureSpec",
                              found=None)
        cfg = draft.cfg
        if cfg.target_hidden_size != self.hidden or draft.fc.in_features % self.hidden:
            raise LayoutError(f"draft fc ({draft.fc.in_features} inputs, {cfg.num_aux} slots)",
                              "slot width does not match the target's hidden size", expected=self.hidden,
                              found=cfg.target_hidden_size, cause="a draft trained on another target")
        if cfg.vocab_size != self.vocab:
            raise VocabError(f"draft {self.draft_path or cfg.source}", "target vocab size differs",
                             expected=self.vocab, found=cfg.vocab_size, cause="a draft for another target")
        self.fc_slots = draft.fc.in_features // self.hidden
        self.layout = capture.layout(self.num_layers)
        capture.check(len(self.layout), self.fc_slots)

    # ---- model calls ----------------------------------------------------------------------------------
    def _sync(self):
        if next(self.target.parameters()).is_cuda:
            torch.cuda.synchronize()

    def _forward(self, ids: Tensor, cache, last_only: bool, **extra) -> Tensor:
        """Target logits (1, T or 1, V) for ids (1, T) appended to `cache` (extra: position_ids, attention_mask)."""
        kw = {self._cache_kw: cache, "use_cache": True, **extra}
        if last_only and self._keep_kw:
            kw[self._keep_kw] = 1
        return self.target(input_ids=ids, **kw).logits

    def _new_cache(self):
        """An HF DynamicCache for the target in which every layer keeps every position.

        transformers gives a sliding-window layer (gpt-oss, every other layer) a cache of its last window only, which
        cannot be cropped back once the window is full, so a rejected verify could not be rolled back. A full layer
        attends the same (the sliding mask comes from the config, not the cache) at the cost of memory."""
        from transformers import DynamicCache
        try:
            cache = DynamicCache(config=self.target.config)
        except TypeError:                                  # transformers < 4.56: no config argument
            return DynamicCache()
        layers = getattr(cache, "layers", None)
        if layers and any(getattr(ly, "is_sliding", False) for ly in layers):
            from transformers.cache_utils import DynamicLayer
            for i, ly in enumerate(layers):
                if getattr(ly, "is_sliding", False):
                    layers[i] = DynamicLayer()
        return cache

    @staticmethod
    def _crop(cache, keep: int):
        """Drop cached positions >= keep (negative crop works in transformers 4.x and 5.x alike)."""
        extra = cache.get_seq_length() - keep
        if extra > 0:
            cache.crop(-extra)

    def _aux(self, tap: HiddenTap) -> Tensor:
        dtype = self.draft.fc.weight.dtype
        return self.capture.fit(tap.take(self.layout), self.fc_slots).to(dtype)   # -> (1, T, k*H)

    # ---- the emulated server's log --------------------------------------------------------------------
    def _emit(self, out: list[str], text: str, rank: bool = True):
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{' TP0' if rank else ''}] {text}"
        out.append(line)
        self.lines.append(line)
        if self.log:
            self.log(line)

    def _launch(self, eff: Effective, out: list[str]):
        """Emit the startup lines when settings or capture change (a relaunch), and reset the counters."""
        key = (eff, self.capture.label if self.capture and eff.speculative else "")
        if self._server is not None and self._server.key == key:
            return
        # win_*: decode iterations (verify rounds), tokens emitted and decode seconds since the last decode line
        self._server = SimpleNamespace(key=key, forward_ct=0, win_ct=0, win_tokens=0, win_time=0.0)
        for line in eff.startup:
            self._emit(out, line, rank=False)
        args = {"model_path": self.model_path, **eff.server_args}
        if eff.speculative:
            args["speculative_draft_model_path"] = self.draft_path
        self._emit(out, "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")",
                   rank=False)

    def _decode_tick(self, eff: Effective, out: list[str], tokens: int, seq_len: int, dt: float):
        """Count one decode iteration that emitted `tokens`; every decode_log_interval-th prints a line."""
        srv = self._server
        srv.forward_ct += 1
        srv.win_ct, srv.win_tokens, srv.win_time = srv.win_ct + 1, srv.win_tokens + tokens, srv.win_time + dt
        if srv.forward_ct % eff.decode_log_interval:
            return
        tau = rate = None
        if eff.speculative:
            tau = srv.win_tokens / srv.win_ct     # accept len = accepted tokens incl. bonus / verify count
            rate = accept_rate(eff.version, tau, eff.num_steps, eff.num_draft_tokens)[0]
        thr = srv.win_tokens / srv.win_time if srv.win_time > 0 else 0.0   # window decode time only
        self._emit(out, decode_line(eff.version, tokens=seq_len, usage=seq_len / self.max_total_tokens,
                                    throughput=thr, accept_len=tau, rate=rate))
        srv.win_ct, srv.win_tokens, srv.win_time = 0, 0, 0.0

    # ---- generation -----------------------------------------------------------------------------------
    def resolve(self, settings: SpecSettings) -> Effective:
        """The effective settings this engine would run `settings` with (ServingArgsError if refused)."""
        eff = resolve_settings(settings, self.arch, next(self.target.parameters()).device.type)
        if eff.speculative and self.draft is None:
            raise ServingArgsError("setting speculative_algorithm", "speculative settings but no draft loaded",
                                   expected="a draft (or SpecSettings.baseline())", found="EAGLE3")
        return eff

    def _prompt(self, prompt_ids) -> Tensor:
        ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1)
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= self.vocab:
            raise DataError("prompt_ids", "empty or outside the target vocabulary",
                            expected=f"ids in 0..{self.vocab - 1}",
                            found=(ids.min().item(), ids.max().item()) if ids.numel() else "no tokens")
        return ids[None].to(next(self.target.parameters()).device)          # (T,) -> (1, T)

    @torch.inference_mode()
    def generate(self, prompt_ids, max_new_tokens: int, settings: SpecSettings | None = None, *,
                 keep_aux: bool = False, tree: bool | None = None) -> GenerateResult:
        """Greedy-decode up to `max_new_tokens` tokens (speculatively unless settings.speculative is False).

        tree: draft SGLang trees (default: when topk > 1); tree=True with topk 1 runs the tree code on a chain.
        """
        settings = settings or SpecSettings()
        eff = self.resolve(settings)
        if max_new_tokens < 1:
            raise DataError("max_new_tokens", "nothing to generate", expected="an integer >= 1", found=max_new_tokens)
        ids = self._prompt(prompt_ids)
        lines: list[str] = []
        self._launch(eff, lines)
        cache = self._new_cache()
        st = _Req(ids, max_new_tokens, self.eos)
        if eff.speculative:
            with HiddenTap(self.target, self.layout) as tap:
                self._spec_loop(eff, st, cache, tap, lines, keep_aux, eff.topk > 1 if tree is None else tree)
        else:
            self._baseline_loop(eff, st, cache, lines)
        spec = eff.speculative
        return GenerateResult(tuple(ids[0].tolist()), tuple(st.out), eff, self.capture.label if spec else "",
                              self.layout if spec else (), tuple(st.taus), tuple(st.per_pos), st.dropped,
                              st.finish, st.prefill_s, st.decode_s, st.draft_s, st.verify_s, tuple(lines),
                              torch.cat(st.aux_rows) if st.aux_rows else None,
                              torch.cat(st.aux_ids) if st.aux_ids else None)

    def _prefill_line(self, eff: Effective, lines: list[str], n: int):
        self._emit(lines, batch_line("Prefill", eff.version, [
            ("#new-seq", "1"), ("#new-token", str(n)), ("#cached-token", "0"),
            ("token usage", f"{n / self.max_total_tokens:.2f}"), ("#running-req", "0"), ("#queue-req", "0")]))

    def _baseline_loop(self, eff: Effective, st: _Req, cache, lines: list[str]):
        t0 = self.clock()
        x = self._forward(st.ids, cache, last_only=True)[0, -1].argmax()
        self._sync()
        st.prefill_s = self.clock() - t0
        self._prefill_line(eff, lines, st.ids.shape[1])
        st.push([int(x)])
        while not st.done:
            t0 = self.clock()
            x = self._forward(x.view(1, 1), cache, last_only=True)[0, -1].argmax()
            self._sync()
            dt = self.clock() - t0
            st.decode_s += dt
            st.push([int(x)])
            self._decode_tick(eff, lines, 1, cache.get_seq_length() + 1, dt)

    def _spec_loop(self, eff: Effective, st: _Req, cache, tap: HiddenTap, lines: list[str], keep_aux: bool,
                   tree: bool = False):
        draft, dev = self.draft, st.ids.device
        n = st.ids.shape[1]
        m = eff.num_draft_tokens - 1                                   # drafts verified per round
        slots = SlotCache(draft.new_cache(eff.topk if tree else 1, n + st.max_new + eff.num_steps + 2))
        dcache = slots.lead                                            # row 0: prefill and extends write here
        st.per_pos = [0] * min(m, eff.num_steps)                       # per draft depth
        t0 = self.clock()
        x = int(self._forward(st.ids, cache, last_only=True)[0, -1].argmax())
        aux = self._aux(tap)                                           # (1, n, k*H), k = fc slots
        nxt = torch.cat([st.ids[:, 1:], torch.tensor([[x]], device=dev)], dim=1)     # token t+1 for row t
        logits, h = draft.step(aux, nxt, torch.arange(n, device=dev)[None], dcache, fuse=True)
        slots.share(0, n)
        self._sync()
        st.prefill_s = self.clock() - t0
        self._prefill_line(eff, lines, n)
        if keep_aux:
            st.aux_rows.append(aux[0].cpu()), st.aux_ids.append(st.ids[0].cpu())
        st.push([x])
        p = n                                                          # position of x (not yet in the target cache)
        logits, h = logits[:, -1], h[:, -1:]                           # (1, Vd), (1, 1, H)
        while not st.done:
            t0 = self.clock()
            if tree:
                new, rows, verify, t1 = self._tree_round(eff, cache, slots, logits, h, p, x)
            else:
                new, rows, verify, t1 = self._chain_round(eff, cache, dcache, logits, h, p, x, m)
            a = len(new) - 1
            aux = self._aux(tap)[:, rows]                              # (1, T_verify, k*H) -> (1, a+1, k*H)
            self._sync()
            t2 = self.clock()
            logits, h = draft.step(aux, torch.tensor([new], device=dev),        # draft extend over the kept rows:
                                   torch.arange(p, p + a + 1, device=dev)[None], dcache, fuse=True)  # overwrites KV
            slots.share(p, p + a + 1)
            logits, h = logits[:, -1], h[:, -1:]
            self._sync()
            t3 = self.clock()
            if keep_aux:
                st.aux_rows.append(aux[0].cpu()), st.aux_ids.append(verify[0, rows].cpu())
            st.taus.append(a + 1)
            for j in range(a):
                st.per_pos[j] += 1
            st.decode_s += t3 - t0
            st.draft_s += (t1 - t0) + (t3 - t2)
            st.verify_s += t2 - t1
            st.push(new)
            p, x = p + a + 1, new[-1]
            self._decode_tick(eff, lines, a + 1, p + 1, t3 - t0)

    def _tree_round(self, eff: Effective, cache, slots: SlotCache, logits, h, p: int, x: int):
        """Draft an SGLang tree, verify it in one masked forward, keep the accepted path in the target cache."""
        tr = draft_tree(self.draft, logits, h, p, slots, eff.num_steps, eff.topk, eff.num_draft_tokens, x)
        self._sync()
        t1 = self.clock()
        verify = tr.tokens[None]                                       # (n,) -> (1, n) at positions p + depth
        kw = verify_inputs(tr, p, next(self.target.parameters()).dtype, self._window)
        y = self._forward(verify, cache, last_only=False, **kw)[0].argmax(-1)   # y[j] = target's token after node j
        path = greedy_path(tr, y)                                      # accepted nodes, root first
        keep_cache_rows(cache, p, path)                                # x, d_1..d_a moved to p..p+a; rest dropped
        return [int(tr.tokens[j]) for j in path[1:]] + [int(y[path[-1]])], path, verify, t1

    def _chain_round(self, eff: Effective, cache, dcache, logits, h, p: int, x: int, m: int):
        """Draft a chain of num_steps tokens, verify the first m in one forward, crop the rejected positions."""
        draft, dev = self.draft, logits.device
        drafts = []
        for k in range(eff.num_steps):                                 # chain: top-1 of each step, k = 0..K-1
            d = draft.to_target_ids(logits.argmax(-1))                 # (1, Vd) -> (1,) target id
            drafts.append(int(d))
            if k + 1 < eff.num_steps:                                  # step k+1 reads d_{k+1} at position p+k
                logits, h = draft.step(h, d.view(1, 1), torch.tensor([[p + k]], device=dev), dcache)
                logits = logits[:, -1]
        self._sync()
        t1 = self.clock()
        verify = torch.tensor([[x] + drafts[:m]], device=dev)          # (1, m+1) at positions p..p+m
        y = self._forward(verify, cache, last_only=False)[0].argmax(-1).tolist()   # y[i] = target's token p+i+1
        a = 0
        while a < m and drafts[a] == y[a]:                             # accept draft i+1 iff it equals the target's
            a += 1                                                     # greedy token there and all before it did
        self._crop(cache, p + a + 1)                                   # keep x, d_1..d_a; drop rejected positions
        return drafts[:a] + [y[a]], list(range(a + 1)), verify, t1     # accepted drafts + the bonus token

    def save_dump(self, results, path) -> str:
        """Write kept aux rows (generate(keep_aux=True)) as an eagle3lib-dump/1 directory (see capture.py).

        Maps to SGLang's --debug-tensor-dump-output-folder: SGLang writes one `Pass<NNNNN>.pt` per forward under
        `target/` and `draft/` (module name -> output); the aux states are no module output there (only the draft's
        `model.fc` output is). Here each request's rows are the fc inputs of its draft-extend passes, in order:
        prefill rows 0..n-1, then per verify pass the accepted rows (x, d_1..d_a). Slots are declared only when no
        padding was applied (padded slots are not boundaries).
        """
        results = [r for r in results if r.aux is not None]
        if not results:
            raise DataError("SpecEngine.save_dump", "no captured rows", expected="results of generate(keep_aux=True)",
                            found="none")
        padded = len(self.layout) < self.fc_slots
        return str(save_dump(path, [r.aux for r in results], [r.aux_ids for r in results],
                             slots=None if padded else self.layout, hidden_size=self.hidden,
                             source=f"eagle3lib demo engine ({self.capture.label})", num_layers=self.num_layers))


class _Req:
    """Mutable state of one request while it decodes (internal)."""

    def __init__(self, ids: Tensor, max_new: int, eos: set):
        self.ids, self.max_new, self.eos = ids, max_new, eos
        # emitted tokens, accept length per round, accepts per draft position, kept aux rows and their token ids
        self.out, self.taus, self.per_pos, self.aux_rows, self.aux_ids = [], [], [], [], []
        self.dropped, self.finish, self.done = 0, "length", False
        self.prefill_s = self.decode_s = self.draft_s = self.verify_s = 0.0

    def push(self, tokens: list[int]):
        """Append emitted tokens, cutting at EOS (kept) or max_new_tokens; count what was cut."""
        for i, t in enumerate(tokens):
            if len(self.out) >= self.max_new:
                self.dropped += len(tokens) - i
                break
            self.out.append(t)
            if t in self.eos:
                self.dropped += len(tokens) - i - 1
                self.finish = "stop"
                break
        self.done = self.finish == "stop" or len(self.out) >= self.max_new
