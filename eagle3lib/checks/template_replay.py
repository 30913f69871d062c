"""Chat template, measured: the training conversations rendered as the served template renders them, and both
renderings replayed through the target (its states recaptured for each) and the draft, step-0 accuracy on the same
answer tokens. Two aspects are rendered: the default system prompt the template adds to a request without one
(inserted before the first user header), and the generation prompt it opens each answer with (its missing part
inserted where each answer starts), the role markers (the training rendering's user and assistant headers, inferred
from what every training conversation holds there, replaced by the served template's) and the think block (the one
the served generation prompt opens each answer with, inserted after the assistant header). The accuracy the served
rendering costs decides the aspect.

Usage: ``RenderingReplay(art, tok, marks).measure("system prompt")`` -> {acc_0_training_rendering, ...} or {}; one
RenderingReplay per check loads the target and the draft once and captures each training rendering once, whatever
the aspects it measures.
"""
from __future__ import annotations

import re


from ..errors import Eagle3Error
from ..samples.sample import Sample
from .inputs import Artifacts

REPLAY_N = 4          # training conversations rendered both ways (two target captures and two replays each)
MARGIN = 0.05         # step-0 accuracy the served rendering loses that confirms the aspect
EMPTY_THINK = re.compile(r"<think>\s*</think>")
EMPTY_THINK_TAIL = re.compile(EMPTY_THINK.pattern + r"\s*")        # with the whitespace after it
MEASUREMENT = "training conversations rendered with the served template, both renderings replayed through the " \
              "target and the draft"


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"]) if text else []


def with_default_system(ids: list[int], mask: list[int], prefix: list[int]) -> tuple[list[int], list[int]] | None:
    """`ids` as a request without a system turn renders under a template whose user-turn prefix is `prefix` (its
    default system block and the user header): the part of `prefix` the sample lacks is inserted before the first
    occurrence of the longest suffix of `prefix` it holds ahead of its first answer; None when it holds none."""
    first = mask.index(1) if 1 in mask else len(ids)
    for k in range(len(prefix), 0, -1):
        tail = prefix[len(prefix) - k:]
        at = next((i for i in range(first - k + 1) if ids[i:i + k] == tail), None)
        if at is not None:
            add = prefix[:len(prefix) - k]
            return (ids[:at] + add + ids[at:], mask[:at] + [0] * len(add) + mask[at:]) if add else None
    return None


def with_generation_prompt(ids: list[int], mask: list[int], gen: list[int]) -> tuple[list[int], list[int]] | None:
    """`ids` with each answer (a rise of the loss mask) opened by the generation prompt `gen`: the longest head
    of `gen` already ending there is kept and the rest inserted; None when every answer already opens with it."""
    out_ids, out_mask, changed = [], [], False
    for i, (t, m) in enumerate(zip(ids, mask)):
        if m == 1 and (i == 0 or mask[i - 1] == 0):
            have = next((k for k in range(min(len(gen), i), -1, -1) if ids[i - k:i] == gen[:k]), 0)
            add = gen[have:]
            out_ids += add
            out_mask += [0] * len(add)
            changed = changed or bool(add)
        out_ids.append(t)
        out_mask.append(m)
    return (out_ids, out_mask) if changed else None


def _prompt_parts(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each prompt part: the tokens before an answer (a rise of the loss mask), since the last one."""
    out, start = [], 0
    for i, m in enumerate(mask):
        if m == 1 and (i == 0 or mask[i - 1] == 0):
            out.append((start, i))
        elif m == 0 and i > 0 and mask[i - 1] == 1:
            start = i
    return out


def _common(seqs: list[list[int]], tail: bool = False) -> list[int]:
    """The longest common prefix (suffix with `tail`) of token sequences."""
    seqs = [s[::-1] for s in seqs] if tail else seqs
    out: list[int] = []
    for col in zip(*seqs):
        if len(set(col)) != 1:
            break
        out.append(col[0])
    return out[::-1] if tail else out


def _markerish(tok, special: set[int], t: int, at_end: bool) -> bool:
    """Whether token `t` can end (`at_end`) or start a role marker: a special token, or text ending (starting) in
    whitespace; a word of the content never does (so a first word every conversation shares stays out)."""
    if t in special:
        return True
    text = tok.decode([t])
    return bool(text) and (text[-1] if at_end else text[0]).isspace()


def training_markers(tok, samples: list[tuple[list[int], list[int]]]) -> dict | None:
    """The training rendering's role markers, inferred from its samples ((ids, loss mask) each): 'lead' (the bos
    every sample opens with), 'assistant' (what every prompt part ends with before an answer, from its first
    marker-like token) and 'user' (what every first turn opens with after the lead, up to the last marker-like
    token before the turns' contents part); None when fewer than two first turns differ (the samples cannot tell a
    marker from a content they share) or no marker-like token bounds them."""
    parts = [(ids, _prompt_parts(mask)) for ids, mask in samples]
    parts = [(ids, p) for ids, p in parts if p and p[0][1] > 0]
    if len(parts) < 2:
        return None
    special = set(getattr(tok, "all_special_ids", None) or ())
    bos = getattr(tok, "bos_token_id", None)
    lead = [bos] if bos is not None and all(ids[:1] == [bos] for ids, _ in parts) else []
    asst = _common([ids[a:b] for ids, p in parts for a, b in p], tail=True)
    start = next((i for i, t in enumerate(asst) if _markerish(tok, special, t, False)), len(asst))
    asst = asst[start:]
    turns = [ids[len(lead):p[0][1] - len(asst)] for ids, p in parts]
    if not asst or len({tuple(t) for t in turns}) < 2:
        return None
    user = _common(turns)
    cut = max((i + 1 for i, t in enumerate(user) if _markerish(tok, special, t, True)), default=0)
    return {"lead": lead, "user": user[:cut], "assistant": asst} if cut else None


def with_role_markers(ids: list[int], mask: list[int], found: dict, user: list[int],
                      assistant: list[int]) -> tuple[list[int], list[int]] | None:
    """`ids` with the training rendering's role markers (`found`, `training_markers`) replaced by the served
    template's: `user` where a user turn opens (after the lead, and after each answer), `assistant` before each
    answer; None when nothing changes."""
    tu, ta, lead = found["user"], found["assistant"], found["lead"]
    out_ids, out_mask, i, changed = list(ids[:len(lead)]), list(mask[:len(lead)]), len(lead), False
    turn_start = True
    while i < len(ids):
        if turn_start and mask[i] == 0 and tu != user and ids[i:i + len(tu)] == tu:
            out_ids += user
            out_mask += [0] * len(user)
            i, changed, turn_start = i + len(tu), True, False
            continue
        turn_start = False
        nxt = i + len(ta)
        if ta != assistant and ids[i:nxt] == ta and nxt < len(ids) and mask[nxt] == 1 and \
                all(m == 0 for m in mask[i:nxt]):
            out_ids += assistant
            out_mask += [0] * len(assistant)
            i, changed = nxt, True
            continue
        out_ids.append(ids[i])
        out_mask.append(mask[i])
        turn_start = mask[i] == 1 and i + 1 < len(ids) and mask[i + 1] == 0
        i += 1
    return (out_ids, out_mask) if changed else None


def ends_alike(a: list[int], b: list[int]) -> bool:
    """Whether one token sequence ends the other (a served user header after a default system block's end still
    is the trained header: that block is the system-prompt aspect's)."""
    n = min(len(a), len(b))
    return n > 0 and a[len(a) - n:] == b[len(b) - n:]


def served_role_markers(tok, marks: dict) -> tuple[list[int], list[int]]:
    """(user header, what comes between a user turn's content and the answer) as the served template renders
    them, in tokens (its default system prompt, an aspect of its own, left out)."""
    return _ids(tok, marks["user"]), _ids(tok, marks["assistant"])


def think_block(gen: str) -> str:
    """The empty think block (and the whitespace after it) a generation prompt opens the answer with ("" none)."""
    m = EMPTY_THINK_TAIL.search(gen)
    return m.group(0) if m else ""


def generation_head(gen: str) -> str:
    """The generation prompt without its think block (that is the think-blocks aspect)."""
    block = think_block(gen)
    return gen.replace(block, "", 1) if block else gen


def _renderer(aspect: str, tok, marks: dict, found: dict | None):
    """(ids, mask) -> the rendering the served template gives for `aspect` (None: unchanged); None when the
    training rendering cannot be read for it (`found`: its role markers, `training_markers`)."""
    if aspect == "system prompt":
        text = marks["no_system_rendering"]
        prefix = _ids(tok, text[:text.find("QQUSRQQ")].removeprefix(getattr(tok, "bos_token", None) or ""))
        return lambda ids, mask: with_default_system(ids, mask, prefix)
    if aspect == "role markers":
        if found is None:
            return None
        user, asst = (s if not ends_alike(t, s) else t for s, t in zip(served_role_markers(tok, marks),
                                                                         (found["user"], found["assistant"])))
        return lambda ids, mask: with_role_markers(ids, mask, found, user, asst)   # only the roles that differ
    gen = marks["generation_prompt"] if aspect == "think blocks" else generation_head(marks["generation_prompt"])
    gen_ids = _ids(tok, gen)
    return lambda ids, mask: with_generation_prompt(ids, mask, gen_ids)


class RenderingReplay:
    """Step-0 accuracy of the draft on `n` training conversations as rendered for training and as the served
    template renders them, per aspect (causes.ASPECTS of chat_template_mismatch), the target's states recaptured
    for both. `found`: the training rendering's role markers as the check inferred them (`training_markers`);
    `layout`: the trained layout (default: the data's). The target, the draft and each training rendering's capture
    are loaded once for every aspect measured."""

    def __init__(self, art: Artifacts, tok, marks: dict, found: dict | None = None, n: int = REPLAY_N,
                 layout=None):
        self.art, self.tok, self.marks, self.found, self.n = art, tok, marks, found, n
        self.layout = layout or (art.data.layout if art.data is not None else None)
        self._loaded = None                  # (target model, replay setup)
        self._captured: dict[str, Sample] = {}   # sample id -> its training rendering, captured

    def measure(self, aspect: str) -> dict:
        """{acc_0_training_rendering, acc_0_served_rendering, rendered_samples, inserted_tokens, measurement} for
        `aspect`; {} when it cannot run (no weights, target, trained layout, or no sample the template changes);
        {"replay_error"} when the replay failed."""
        art, layout = self.art, self.layout
        if self.n <= 0 or art.data is None or not art.draft_path or not art.target_path or not art.tensors \
                or not layout:
            return {}
        from ..replay.evidence import step0_acc
        pairs, drawn = [], list(art.data.sample(min(self.n, len(art.data)), 0))
        samples = [(s.input_ids.tolist(), s.loss_mask.tolist()) for s in drawn]
        found = self.found if self.found is not None or aspect != "role markers" else training_markers(self.tok,
                                                                                                        samples)
        render = _renderer(aspect, self.tok, self.marks, found)
        for s, (ids, mask) in zip(drawn if render is not None else (), samples):
            served = render(ids, mask)
            if served is not None:
                pairs.append(((ids, mask), served, s.id))
        if not pairs:
            return {}
        try:
            setup = self._setup()
            trained = [self._training_capture(ids, mask, sid) for (ids, mask), _, sid in pairs]
            served = [self._capture(*p[1], f"{p[2]}:served") for p in pairs]
            acc = {label: step0_acc(setup, items, n=len(items))
                   for label, items in (("training", trained), ("served", served))}
        except Eagle3Error as e:
            return {"replay_error": str(e)[:200]}
        return {"acc_0_training_rendering": acc["training"], "acc_0_served_rendering": acc["served"],
                "rendered_samples": len(pairs), "inserted_tokens": sum(len(p[1][0]) - len(p[0][0]) for p in pairs),
                "measurement": MEASUREMENT}

    def _setup(self):
        if self._loaded is None:
            self._loaded = (self.art.target_model, self.art.replay_setup)
        return self._loaded[1]

    def _training_capture(self, ids: list[int], mask: list[int], sid: str) -> Sample:
        if sid not in self._captured:
            self._captured[sid] = self._capture(ids, mask, f"{sid}:training")
        return self._captured[sid]

    def _capture(self, ids: list[int], mask: list[int], sid: str) -> Sample:
        """One rendering through the target: its aux states at the trained layout, as a replayable Sample."""
        from ..hidden.drift import captured_sample
        self._setup()
        return captured_sample(self._loaded[0], ids, mask, self.layout, sid)
