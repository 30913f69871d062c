"""The prompts sent to a real engine: a prompts file, or the user turns of an eagle3lib training dataset.

A prompts file is JSON lines, one request each: ``{"prompt_token_ids": [1, 3, 46, ...]}`` or ``{"prompt": "text"}``
(an optional ``"id"`` is kept). Any other path is read as training data by `samples.readers.open_dataset` (every
format it knows); a sample's prompt is its tokens before the first scored one (``loss_mask == 1``): the user turn
up to and including the assistant marker, exactly the context the draft was trained to continue.
    prompts = read_prompts("data/demo/data/heldout/heldout.jsonl", n=32)
    write_prompts("data/demo/data/heldout", "out/prompts.jsonl", n=32)
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, MissingFileError
from ..jsonfiles import atomic_write
from ..samples.readers import open_dataset

PROMPT_KEYS = ("prompt_token_ids", "prompt")


@dataclass(frozen=True)
class Prompt:
    """One request: token ids (sent as ids, no tokenizer involved) or text."""

    id: str
    token_ids: tuple[int, ...] | None = None
    text: str | None = None

    def to_dict(self) -> dict:
        key = {"prompt_token_ids": list(self.token_ids)} if self.token_ids is not None else {"prompt": self.text}
        return {"id": self.id, **key}


def _prompt_line(obj, where: str, n: int) -> Prompt:
    if not isinstance(obj, dict) or not any(k in obj for k in PROMPT_KEYS):
        raise DataError(where, "not a prompt line", expected='{"prompt_token_ids": [...]} or {"prompt": "text"}',
                        found=str(obj)[:120])
    pid = str(obj.get("id", n))
    if "prompt_token_ids" in obj:
        ids = obj["prompt_token_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
            raise DataError(where, "prompt_token_ids must be a non-empty list of token ids",
                            expected="[int >= 0, ...]", found=str(ids)[:120])
        return Prompt(pid, token_ids=tuple(ids))
    if not isinstance(obj["prompt"], str) or not obj["prompt"]:
        raise DataError(where, "prompt must be non-empty text", expected="a string", found=repr(obj["prompt"])[:80])
    return Prompt(pid, text=obj["prompt"])


def is_prompts_file(path: str | os.PathLike) -> bool:
    """True when `path` is a JSON-lines file whose first record has prompt_token_ids or prompt."""
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(obj, dict) and any(k in obj for k in PROMPT_KEYS)
    return False


def prompts_from_dataset(path: str | os.PathLike, n: int | None = None) -> list[Prompt]:
    """The user turn of the first `n` samples of a dataset (tokens before the first scored token)."""
    ds = open_dataset(path)
    out = []
    for s in ds:
        scored = (s.loss_mask == 1).nonzero()
        first = int(scored[0]) if len(scored) else 0
        if first == 0:       # nothing scored, or scored from the start: no context to send
            continue
        out.append(Prompt(s.id, token_ids=tuple(int(t) for t in s.input_ids[:first])))
        if n is not None and len(out) >= n:
            break
    if not out:
        raise DataError(f"dataset {path}", "no sample gives a prompt",
                        expected="samples whose loss_mask starts scoring after a user turn",
                        found=f"{len(ds)} samples, {len(ds.skipped)} skipped",
                        cause="loss_mask all zeros or all ones (no chat template split)")
    return out


def read_prompts(source, n: int | None = None) -> list[Prompt]:
    """Prompts from a prompts file, a dataset path, or a list (of Prompt, dicts, token-id lists or strings)."""
    if isinstance(source, (list, tuple)):
        out = [x if isinstance(x, Prompt) else
               _prompt_line({"prompt_token_ids": list(x)} if isinstance(x, (list, tuple)) else
                            {"prompt": x} if isinstance(x, str) else x, "prompts list", i)
               for i, x in enumerate(source)]
    else:
        path = Path(source)
        if not path.exists():
            raise MissingFileError(str(path), "prompts not found", expected="a prompts .jsonl or a dataset path",
                                   found="no such path")
        if not is_prompts_file(path):
            return prompts_from_dataset(path, n)
        out = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{no}", "not valid JSON", expected="one JSON object per line",
                                        found=str(e)[:80]) from None
                    out.append(_prompt_line(obj, f"{path}:{no}", len(out)))
    if not out:
        raise DataError(str(source)[:120], "no prompts", expected="at least one prompt", found="none")
    return out[:n] if n is not None else out


def write_prompts(dataset, out: str | os.PathLike, n: int | None = None) -> Path:
    """Write the prompts of `dataset` (any `read_prompts` source) as a prompts file; returns its path."""
    prompts = read_prompts(dataset, n)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, "".join(json.dumps(p.to_dict()) + "\n" for p in prompts))
    return out
