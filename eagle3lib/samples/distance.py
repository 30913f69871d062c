"""How far served sequences are from the training samples, in what a draft can tell apart: the tokens, the template
around them, and their lengths.

A draft that passes its own training samples and fails the served traffic has a generalization gap only if the
served prompts are unlike what it was trained on; these numbers say how unlike, and which way:
- **tokens**: the share of served tokens (and of served token bigrams) that occur anywhere in the training samples;
- **template**: the training samples' most common opening tokens (the template's start: a BOS, a role marker) and
  answer header (the tokens right before the first supervised one: the assistant's role marker), and the share of
  served sequences that open alike and whose answer follows the same header;
- **length**: the median prompt (tokens before the first supervised one) and answer (supervised tokens) lengths.
Usage: ``served_distance([(s.input_ids, s.loss_mask) for s in train], [(s.input_ids, s.loss_mask) for s in served])``.
"""
from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Iterable, Sequence

OPENING = 2                 # tokens compared at the start of each sequence
HEADER = 2                  # ... and right before its first supervised token


def _ids(x) -> list[int]:
    return [int(t) for t in (x.tolist() if hasattr(x, "tolist") else x)]


def _split(ids: list[int], mask: list[int]) -> tuple[list[int], int]:
    """(the prompt: tokens before the first supervised one, the number of supervised tokens)."""
    first = next((i for i, m in enumerate(mask) if m), len(ids))
    return ids[:first], sum(1 for m in mask if m)


def served_distance(train: Iterable[tuple[Sequence[int], Sequence[int]]],
                    served: Iterable[tuple[Sequence[int], Sequence[int]]]) -> dict:
    """The distance numbers (module docstring) of `served` (input_ids, loss_mask) pairs from `train`'s; {} when
    either side is empty."""
    tr = [(_ids(i), _ids(m)) for i, m in train]
    sv = [(_ids(i), _ids(m)) for i, m in served]
    if not tr or not sv:
        return {}
    seen = {t for ids, _ in tr for t in ids}
    seen2 = {p for ids, _ in tr for p in zip(ids, ids[1:])}
    s_tok = [t for ids, _ in sv for t in ids]
    s_big = [p for ids, _ in sv for p in zip(ids, ids[1:])]
    tr_split = [_split(i, m) for i, m in tr]
    sv_split = [_split(i, m) for i, m in sv]
    opening = Counter(tuple(ids[:OPENING]) for ids, _ in tr).most_common(1)[0][0]
    header = Counter(tuple(p[-HEADER:]) for p, _ in tr_split).most_common(1)[0][0]
    return {"token_overlap": round(sum(t in seen for t in s_tok) / max(len(s_tok), 1), 4),
            "bigram_overlap": round(sum(p in seen2 for p in s_big) / max(len(s_big), 1), 4),
            "header_training": list(header),
            "header_match": round(sum(tuple(p[-HEADER:]) == header for p, _ in sv_split) / len(sv), 4),
            "opening_training": list(opening),
            "opening_match": round(sum(tuple(ids[:OPENING]) == opening for ids, _ in sv) / len(sv), 4),
            "prompt_len_training": median(len(p) for p, _ in tr_split),
            "prompt_len_served": median(len(p) for p, _ in sv_split),
            "answer_len_training": median(a for _, a in tr_split),
            "answer_len_served": median(a for _, a in sv_split),
            "training_samples": len(tr), "served_sequences": len(sv)}


def distance_text(d: dict) -> str:
    """The distance in one clause: tokens and bigrams seen, template (opening, answer header), lengths."""
    if not d:
        return "distance not measured"
    return (f"tokens {d['token_overlap']:.0%} seen in training (bigrams {d['bigram_overlap']:.0%}), the training "
            f"template's opening in {d['opening_match']:.0%} of served sequences and its answer header in "
            f"{d['header_match']:.0%}, prompts {d['prompt_len_served']:g} vs {d['prompt_len_training']:g} tokens, "
            f"answers {d['answer_len_served']:g} vs {d['answer_len_training']:g} (served vs training, medians)")
