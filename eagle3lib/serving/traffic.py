"""The served traffic: the requests a server answered and what it answered, as token ids.

A served τ is counted on the sequences the server generated: each prompt and the target's own answer to it, the
tokens its verification checked the draft against. So the replay that predicts a served τ belongs on those
sequences (replay.traffic_samples), not on held-out text the target never wrote. `read_traffic(path, tokenizer)` reads
what `vllm_engine.serve` saves (a user's own logging in the same shape works too):

- ``prompts.jsonl``: ``{"id": ..., "prompt_token_ids": [...]}`` (or ``"prompt": text``) per request;
- ``responses.jsonl``: ``{"id": ..., "text": ..., "finish_reason": ..., "completion_tokens": n}`` per answer, with
  ``"token_ids"`` (vLLM's ``return_token_ids``, SGLang's ``output_ids``) when the server returned them, and the
  request's ``"temperature"`` when recorded (`Traffic.greedy`: were the requests greedy?) and SGLang's
  ``"spec_verify_ct"`` (`Traffic.counted_tau`: τ as SGLang counts it over exactly these answers).

An answer without token ids is tokenized with the target's tokenizer and kept only when that gives the engine's
own ``completion_tokens`` count (the EOS a ``stop`` answer ends with is not in its text: it is appended); otherwise
it is set aside with the reason, never guessed.
    traffic = read_traffic("data/demo_vllm_mla/healthy/served", tokenizer)
    traffic.exchanges[0].prompt_ids, traffic.exchanges[0].answer_ids, traffic.skipped
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, MissingFileError
from ..jsonfiles import json_lines

PROMPTS, RESPONSES = "prompts.jsonl", "responses.jsonl"


@dataclass(frozen=True)
class Exchange:
    """One served request: its prompt and the answer the server generated, as token ids."""
    id: str
    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]
    finish_reason: str | None
    source: str                 # responses.jsonl:<line>
    ids_from: str               # "engine" (the server's token_ids) or "tokenizer" (its text, count checked)
    temperature: float | None = None   # the request's sampling temperature when the answer line records it
    verify_rounds: int | None = None   # SGLang's spec_verify_ct of the answer (its meta_info), when recorded
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Traffic:
    """The exchanges read, and the answers set aside (where, why)."""
    exchanges: tuple[Exchange, ...]
    skipped: tuple[tuple[str, str], ...]
    prompts: str
    responses: str

    @property
    def answered_tokens(self) -> int:
        return sum(len(e.answer_ids) for e in self.exchanges)

    @property
    def counted_tau(self) -> tuple[float, int] | None:
        """(τ as SGLang counts it: Σ completion_tokens / Σ spec_verify_ct, answers counted) when every answer records
        both (SGLang's /generate meta_info), else None."""
        ex = self.exchanges
        if not ex or any(e.verify_rounds is None or e.completion_tokens is None for e in ex):
            return None
        rounds = sum(e.verify_rounds for e in ex)
        return (sum(e.completion_tokens for e in ex) / rounds, len(ex)) if rounds else None

    @property
    def greedy(self) -> bool | None:
        """Every request asked for greedy decoding (temperature 0): True; one sampled: False; None when an answer
        line does not record its temperature."""
        temps = [e.temperature for e in self.exchanges]
        if any(t is not None and t > 0 for t in temps):
            return False
        return None if not temps or any(t is None for t in temps) else True


def traffic_files(path: str | os.PathLike) -> tuple[Path, Path]:
    """(prompts.jsonl, responses.jsonl) of a served folder, or of a responses.jsonl with its prompts beside it."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    responses = p if p.is_file() else folder / RESPONSES
    prompts = folder / PROMPTS
    for f, what in ((responses, "the server's answers"), (prompts, "the requests it answered")):
        if not f.is_file():
            raise MissingFileError(str(f), f"no {f.name} ({what})", expected=f"a served folder with {PROMPTS} and "
                                   f"{RESPONSES} (vllm_engine.serve writes them), or a {RESPONSES}",
                                   found="no such file", cause="the path of another folder, or a run that "
                                   "saved no answers")
    return prompts, responses


def _lines(path: Path):
    for no, obj in json_lines(path):
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{no}", "not a JSON object", expected="{...} per line", found=str(obj)[:80])
        yield no, obj


def _ids(v, where: str, key: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in v):
        raise DataError(where, f"{key} must be a list of token ids", expected="[int >= 0, ...]", found=str(v)[:120])
    return tuple(v)


def _prompts(path: Path) -> dict[str, tuple[int, ...] | str]:
    prompts: dict[str, tuple[int, ...] | str] = {}
    for no, obj in _lines(path):
        where = f"{path}:{no}"
        pid = str(obj.get("id", len(prompts)))
        if "prompt_token_ids" in obj:
            prompts[pid] = _ids(obj["prompt_token_ids"], where, "prompt_token_ids")
        elif isinstance(obj.get("prompt"), str):
            prompts[pid] = obj["prompt"]
        else:
            raise DataError(where, "not a prompt line", expected='{"prompt_token_ids": [...]} or {"prompt": "text"}',
                            found=str(obj)[:120])
    return prompts


def check_traffic(path: str | os.PathLike) -> int:
    """Read a served folder's files without a tokenizer (the inputs check): every prompt line parses, every answer
    line is an answer (token_ids, text or an error); returns the number of answers."""
    prompts_path, responses_path = traffic_files(path)
    _prompts(prompts_path)
    n = 0
    for no, obj in _lines(responses_path):
        where = f"{responses_path}:{no}"
        if obj.get("token_ids") is not None:
            _ids(obj["token_ids"], where, "token_ids")
        elif not isinstance(obj.get("text"), str) and "error" not in obj:
            raise DataError(where, "not an answer line", expected='{"id": ..., "text": ..., "completion_tokens": n} '
                            'or with "token_ids"', found=str(obj)[:120])
        n += 1
    if not n:
        raise DataError(str(responses_path), "no answers", expected="one answer per line", found="an empty file")
    return n


def read_traffic(path: str | os.PathLike, tokenizer=None) -> Traffic:
    """The exchanges of a served folder (see the module docstring); `tokenizer` (the target's) for answers that
    carry text only. A line that is not an answer, or a prompt given as text without a tokenizer, raises with the
    file and line; an answer that cannot be turned into the engine's tokens is skipped with its reason."""
    prompts_path, responses_path = traffic_files(path)
    prompts = _prompts(prompts_path)
    out, skipped = [], []
    for no, obj in _lines(responses_path):
        where = f"{responses_path}:{no}"
        rid = str(obj.get("id", no - 1))
        if "error" in obj:
            skipped.append((where, f"the request failed: {str(obj['error'])[:120]}"))
            continue
        if rid not in prompts:
            skipped.append((where, f"no prompt with id {rid!r} in {prompts_path.name}"))
            continue
        prompt = prompts[rid]
        if isinstance(prompt, str):
            if tokenizer is None:
                raise DataError(where, "a text prompt and no tokenizer", expected="prompt_token_ids, or the "
                                "target's tokenizer", found="text", cause="the target folder has no tokenizer")
            prompt = tuple(tokenizer.encode(prompt, add_special_tokens=False))
        if "token_ids" in obj and obj["token_ids"] is not None:
            out.append(Exchange(rid, prompt, _ids(obj["token_ids"], where, "token_ids"), obj.get("finish_reason"),
                                where, "engine", *_served(obj)))
            continue
        answer, why = _retokenized(obj, tokenizer)
        if answer is None:
            skipped.append((where, why))
            continue
        out.append(Exchange(rid, prompt, answer, obj.get("finish_reason"), where, "tokenizer", *_served(obj)))
    if not out:
        raise DataError(str(responses_path), "no answer to replay", expected="answers with token_ids, or text that "
                        "the target's tokenizer turns into the engine's completion_tokens",
                        found=f"{len(skipped)} set aside" + (f": {skipped[0][1]}" if skipped else ""),
                        cause="every request failed, or the answers came from another tokenizer")
    return Traffic(tuple(out), tuple(skipped), str(prompts_path), str(responses_path))


def _served(obj: dict) -> tuple[float | None, int | None, int | None]:
    """(temperature, verify rounds, completion tokens) an answer line records (None where it does not)."""
    num = lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool) else None     # noqa: E731
    t = num(obj.get("temperature", (obj.get("sampling_params") or {}).get("temperature")))
    v, c = num(obj.get("spec_verify_ct")), num(obj.get("completion_tokens"))
    return (None if t is None else float(t), None if v is None else int(v), None if c is None else int(c))


def _retokenized(obj: dict, tokenizer) -> tuple[tuple[int, ...] | None, str]:
    """An answer's token ids from its text, kept only when the count is the engine's own."""
    text, n = obj.get("text"), obj.get("completion_tokens")
    if not isinstance(text, str):
        return None, "no token_ids and no text"
    if tokenizer is None:
        return None, "no token_ids, and no tokenizer to read the text with"
    if not isinstance(n, int) or isinstance(n, bool):
        return None, "no token_ids and no completion_tokens to check the text's tokens against"
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    eos = getattr(tokenizer, "eos_token_id", None)
    if obj.get("finish_reason") == "stop" and len(ids) == n - 1 and eos is not None:
        ids.append(int(eos))                      # the EOS the engine generated is not in the text it returned
    if len(ids) != n:
        return None, (f"its text gives {len(ids)} tokens with the target's tokenizer, the engine generated {n}: "
                      "it does not round-trip (serve with token_ids returned)")
    return tuple(ids), ""
