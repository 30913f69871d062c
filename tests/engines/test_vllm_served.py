"""The vLLM rows whose effect only a served draft shows, on the running engine (vLLM's offline engine, greedy, K=3,
vLLM's own speculative counters: vllm_engine/inside/accept.py). Slow (four engine starts, ~2 minutes on 2 cores);
benchmarks/bench_vllm_facts.py measures the same variants on more prompts for the rows' notes."""
from __future__ import annotations

import json

import pytest

from eagle3lib.engines import facts
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.vllm_engine.env import run_script, unavailable_reason

from .vllm_variants import DRAFT, NESTED, TARGET, TOP

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason())]

QA = [("I am going to Lisbon in July. What weather should I expect?",
       "In July, Lisbon is usually cloudy with temperatures around 20 degrees. Pack light clothes for your trip."),
      ("What can I use instead of butter?", "You can use oil instead of butter. Use the same amount."),
      ("Tell me about the otter.", "To see the otter, you need patience, a map and a warm coat.")]


def prompts() -> dict[str, list[list[int]]]:
    """Chat prompts of the demo target: short ones (< 64 tokens with the reply) and multi-turn ones past 64."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(TARGET))
    enc = lambda msgs: tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,  # noqa: E731
                                               return_dict=False)
    short = [enc([{"role": "user", "content": q}]) for q, _ in QA]
    history = [m for q, a in QA * 2 for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
    long = [enc(history + [{"role": "user", "content": q}]) for q, _ in QA]
    assert max(map(len, short)) + 16 < 64 < min(map(len, long))
    assert [len(p) for p in short] == [18, 12, 10]          # the token counts the ids_in_eagle_config case needs
    return {"short": short, "long": long, "alone18": short[:1]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root, groups, out = tmp_path_factory.mktemp("served"), prompts(), {}
    variants = {"base": dict(config=TOP, drop_config=[NESTED]),
                "mpe64": dict(config={**TOP, "max_position_embeddings": 64}, drop_config=[NESTED]),
                "d2t_long_name": dict(config=TOP, drop_config=[NESTED], rename={"d2t": "draft_id_to_target_id"}),
                "ids_in_eagle_config": {}}
    for name, edits in variants.items():
        job = {"target": str(TARGET), "draft": str(edited_copy(DRAFT, root / name, **edits)), "method": "eagle3",
               "num_speculative_tokens": 3, "max_model_len": 512, "dtype": "float32", "max_tokens": 16,
               "groups": groups}
        (root / f"{name}.json").write_text(json.dumps(job))
        out[name] = run_script("accept.py", ["--job", str(root / f"{name}.json")], timeout=600)
    return out


def tau(served, variant: str, group: str) -> float:
    g = served[variant]["groups"][group]
    assert g["drafts"] > 0, (variant, group)
    return g["mean_acceptance_length"]


def test_served_rows(served):
    """The demo draft with its ids at the top level accepts drafts; d2t saved under its long name collapses τ
    (d2t stays zeros); max_position_embeddings 64 stops drafting past 64 on V1 (every draft a rejected
    placeholder: τ exactly 1); ids left in eagle_config are read by V1 as they are ([-1, 1, 3, 5]: three states for
    a 4-slot fc), which fails in fc once a batch's token count x 3 is not a multiple of 4 (the CPU build's linear
    views its input as [-1, 4H]: a batch that fits runs on scrambled inputs), at the latest on the 18-token
    prompt alone."""
    assert served["base"]["error"] is None and tau(served, "base", "short") > 1.8
    assert facts.reads("vllm", "keys", "draft_id_to_target_id dropped silently", "0.32.0") is True
    assert tau(served, "d2t_long_name", "short") < min(1.5, tau(served, "base", "short") - 0.5)
    assert facts.reads("vllm", "context", "stops_drafting_past_max_position_embeddings@v1", "0.32.0") is True
    assert tau(served, "mpe64", "short") == tau(served, "base", "short")
    assert tau(served, "mpe64", "long") == 1.0 < tau(served, "base", "long")
    bad = served["ids_in_eagle_config"]     # which batch fails first depends on how vLLM batched the tokens
    assert bad["error"] and bad["error"]["type"] == "EngineDeadError" and "alone18" not in bad["groups"]
    assert all(tau(served, "ids_in_eagle_config", g) < 1.5 for g in bad["groups"])   # fitted batches: scrambled
