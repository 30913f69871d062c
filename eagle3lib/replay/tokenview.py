"""Token view of a replay: each token marked accepted / rejected, with the draft's top-k against the reference.

At step k, the token at index p is what the draft drafts from position t = p-2-k (eagle3-formats.md §3.4):
green = the chain from t reached and accepted it, red = rejected, grey = not scored (mask / end). `collect` runs
the draft on a few samples keeping top-k; `sample_html` / `static_view` give HTML (for exported reports),
`browser` an ipywidgets browser (sample, position, step) for JupyterLab, opening each sample on its first
scored position (`first_scored`); `show` displays both.
"""
from __future__ import annotations

import html
import itertools
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from .loop import draft_run
from .items import as_samples, prepared_items, requested_layout
from .stats import ReplayItem, ReplaySetup

_COLORS = {"accepted": "#c8f0c8", "rejected": "#f6c4c4", "unscored": "#f2f2f2", "input": "#d0e2ff"}


@dataclass(frozen=True, eq=False)
class SampleDetail:
    """One sample's replay kept position by position: top-k per step vs the reference, chain and acceptance."""
    id: str
    source: str
    input_ids: Tensor          # (T,)
    loss_mask: Tensor          # (T,)
    reference: Tensor          # (K, T) reference target id of token t+2+k, -1 where none
    valid: Tensor              # (K, T) scored positions
    correct: Tensor            # (K, T) teacher-forced top-1 == reference
    topk_ids: Tensor           # (K, T, topk) target ids, teacher-forced
    topk_probs: Tensor         # (K, T, topk)
    chain_ids: Tensor          # (K, T) target ids the chain drafted from position t
    accepted: Tensor           # (T,) accept length of the chain from t, bonus counted (0 = nothing scored)
    reference_kind: str        # "target" or "data"

    @property
    def num_steps(self) -> int:
        return int(self.reference.shape[0])

    def status(self, step: int) -> list[str]:
        """Per token index p: accepted / rejected / unscored as drafted at `step` from position p-2-step."""
        T, out = len(self.input_ids), []
        for p in range(T):
            t = p - 2 - step
            if t < 0 or not bool(self.valid[step, t]):
                out.append("unscored")
            else:
                out.append("accepted" if int(self.accepted[t]) >= step + 2 else "rejected")
        return out


def collect(setup: ReplaySetup, data, *, layout=None, n: int = 3, seed: int = 0, num_steps: int = 3,
            topk: int = 5, fill: str = "error", d2t: str = "offsets", reference: str = "auto",
            data_format: str | None = None, recapture=None) -> list[SampleDetail]:
    """Replay `n` samples one at a time keeping top-k per step and the chain (skips bad samples silently)."""
    layout = requested_layout(setup, layout)        # parsed once
    samples, _, _ = as_samples(data, n, seed, data_format)
    items = prepared_items(samples, setup, layout, fill=fill, recapture=recapture, reference=reference)
    runs = draft_run(setup.model, items, num_steps=num_steps, d2t=d2t, topk=topk, batch_tokens=0,
                     tokenizer=setup.tokenizer)
    return [SampleDetail(r.item.id, r.item.source, r.item.ids, r.item.mask, r.scored.reference, r.scored.valid,
                         r.scored.correct, r.topk_ids, r.topk_probs, r.chain, r.scored.accepted, r.item.kind)
            for r in itertools.islice(runs, n)]


def preview_table(model, input_ids: Tensor, aux: Tensor, tokenizer=None, num_steps: int = 3,
                  max_rows: int = 12) -> pd.DataFrame:
    """Draft predictions on one real sample: per position, the next tokens vs the draft's steps 0..K-1.

    input_ids (T,), aux (T, k*Ht) in the draft's training layout. Step k at position t predicts token t+2+k (a
    P-EAGLE draft: its depth k); the reference is the sample's own tokens.
    """
    T = input_ids.numel()
    ref = torch.full((T,), -1, dtype=torch.long)
    ref[:-1] = input_ids[1:]
    item = ReplayItem(0, "preview", "preview", input_ids, torch.ones(T, dtype=torch.long), (), aux, ref, "data")
    (r,) = draft_run(model, [item], num_steps=num_steps, simulate=False, only_scored=False, tokenizer=tokenizer)

    def tok(i):
        return tokenizer.decode([int(i)]) if tokenizer is not None else str(int(i))

    rows = []
    for t in range(min(T - 2, max_rows)):
        row = {"pos": t, "context token": tok(input_ids[t + 1])}
        for k in range(num_steps):
            if t + 2 + k < T:
                pred = int(r.teacher[k, t])
                row[f"step {k}: next"] = tok(input_ids[t + 2 + k])
                row[f"step {k}: draft"] = tok(pred) + (" ✓" if pred == int(input_ids[t + 2 + k]) else " ✗")
        rows.append(row)
    return pd.DataFrame(rows)


def token_strings(tokenizer, ids) -> list[str]:
    """Display string of each token id (the tokenizer's decoding, else '#id')."""
    ids = [int(i) for i in ids]
    if tokenizer is None:
        return [f"#{i}" for i in ids]
    return [tokenizer.decode([i]) if i >= 0 else "—" for i in ids]


def _show(s: str) -> str:
    return html.escape(s.replace("\n", "⏎").replace("\t", "⇥")) or "∅"


def sample_html(detail: SampleDetail, tokenizer=None, step: int = 0, position: int | None = None,
                max_tokens: int = 600) -> str:
    """HTML of one sample's text, each token coloured by its status at `step`, hover = top-k vs reference."""
    toks = token_strings(tokenizer, detail.input_ids[:max_tokens])
    status = detail.status(step)
    spans = []
    window = range(position + 1, position + 2 + detail.num_steps) if position is not None else range(0)
    for p, tok in enumerate(toks):
        st, t = status[p], p - 2 - step
        tip = ""
        if st != "unscored":
            cands = ", ".join(f"{_show(s)} {float(q):.2f}" for s, q in
                              zip(token_strings(tokenizer, detail.topk_ids[step, t]), detail.topk_probs[step, t]))
            ref = _show(token_strings(tokenizer, [detail.reference[step, t]])[0])
            tip = f"from t={t}, step {step}: draft {cands} | reference {ref} | accept length {int(detail.accepted[t])}"
        border = "border-bottom:2px solid #2060c0;" if p in window else ""
        spans.append(f'<span title="{html.escape(tip, quote=True)}" style="background:{_COLORS[st]};{border}'
                     f'white-space:pre-wrap">{_show(tok)}</span>')
    legend = " ".join(f'<span style="background:{c};padding:0 4px">{k}</span>' for k, c in _COLORS.items()
                      if k != "input")
    return (f'<div style="font-family:monospace;font-size:12px;line-height:1.7"><b>{html.escape(detail.id)}</b> '
            f'(step {step}, reference: {detail.reference_kind}) {legend}<br>{"".join(spans)}</div>')


def position_table(detail: SampleDetail, position: int, tokenizer=None) -> pd.DataFrame:
    """For one position t: per step, the reference token, the draft's top-k (teacher-forced) and the chain token."""
    rows = []
    for k in range(detail.num_steps):
        ok = bool(detail.valid[k, position])
        ref = token_strings(tokenizer, [detail.reference[k, position]])[0]
        top = token_strings(tokenizer, detail.topk_ids[k, position])
        rows.append({"step": k, "predicts token": position + 2 + k, "reference": ref if ok else "(not scored)",
                     "draft top-k": ", ".join(f"{s!r} {float(q):.2f}" for s, q in
                                              zip(top, detail.topk_probs[k, position])),
                     "top-1 right": bool(detail.correct[k, position]) if ok else None,
                     "chain token": token_strings(tokenizer, [detail.chain_ids[k, position]])[0],
                     "accepted in chain": ok and int(detail.accepted[position]) >= k + 2})
    return pd.DataFrame(rows)


def first_scored(detail: SampleDetail) -> int:
    """The first position t scored at any step (where the token view opens); 0 when none is scored."""
    scored = detail.valid.any(0).nonzero()
    return int(scored[0, 0]) if len(scored) else 0


def static_view(details, tokenizer=None, step: int = 0, n: int = 3):
    """IPython HTML of the first `n` samples at `step` (what the exported report shows)."""
    from IPython.display import HTML
    return HTML("<hr>".join(sample_html(d, tokenizer, step) for d in list(details)[:n]))


TABLE_CLASS = "eagle3lib-position-table"   # the browser's position-table widget (a CSS class in the page)


def browser(details, tokenizer=None):
    """An ipywidgets browser over samples, positions and steps (live in JupyterLab)."""
    import ipywidgets as w
    details = list(details)
    if not details:
        return w.HTML("<i>no sample to show</i>")
    sample = w.Dropdown(options=[(d.id, i) for i, d in enumerate(details)], description="sample")
    step = w.IntSlider(0, 0, details[0].num_steps - 1, description="step")
    pos = w.IntSlider(first_scored(details[0]), 0, max(len(details[0].input_ids) - 1, 0), description="position t")
    # the table is an HTML widget, not an Output widget: a headless run's client (nbclient) answers an Output
    # widget's captures with comm messages on the shell socket it awaits the cell's reply on, and twice in this
    # project's planted suite that reply never arrived (papermill waited out its per-cell timeout)
    text, table = w.HTML(), w.HTML()
    table.add_class(TABLE_CLASS)                  # what a live page finds the table by

    def redraw(*_):
        d = details[sample.value]
        text.value = sample_html(d, tokenizer, step.value, pos.value)
        table.value = position_table(d, pos.value, tokenizer).to_html(index=False)

    def new_sample(_):                      # a sample opens on its first scored position too
        d = details[sample.value]
        with pos.hold_trait_notifications():
            pos.max = max(len(d.input_ids) - 1, 0)
            pos.value = first_scored(d)
        redraw()

    sample.observe(new_sample, names="value")
    for c in (step, pos):
        c.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([sample, step, pos]), text, table])


def show(details, tokenizer=None, n_static: int = 3, step: int = 0) -> None:
    """Display the widget browser (JupyterLab) and the static HTML of the first samples (exported HTML)."""
    from IPython.display import display
    try:
        display(browser(details, tokenizer))
    except ImportError:
        pass
    display(static_view(details, tokenizer, step, n_static))

