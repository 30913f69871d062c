"""checks.ndt_override: the launch's engine's home decides whether its startup rewrote the speculative settings
(`EngineHome.rewrite_rule`); a home that resolves nothing runs them as given."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from eagle3lib.checks.ndt_override import ndt_override_findings
from eagle3lib.serving.homes import homes
from eagle3lib.serving.launch import parse_launch

SEED = ("python -m sglang.launch_server --model-path /m/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /m/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")
ARCH = "LlamaForCausalLM"


def _find(command, resolution=None):
    return ndt_override_findings(parse_launch(command), resolution, "0.5.6", "given", False, pd.DataFrame(), ARCH)


def test_no_launch_is_not_checked_and_a_vllm_launch_runs_k_as_given():
    (f,) = ndt_override_findings(None, None, "0.5.6", "given", False, pd.DataFrame(), ARCH)
    assert f.status == "not checked" and "(launch)" in f.needs
    (g,) = _find("vllm serve /m/target --speculative-config "
                         "'{\"method\": \"eagle3\", \"model\": \"/m/draft\", \"num_speculative_tokens\": 3}'")
    assert g.status == "ruled out" and g.evidence == {"engine": "vllm", "num_speculative_tokens": 3}   # K: its cap


def test_the_launchs_home_decides_and_a_home_that_resolves_without_a_rule_is_not_checked(monkeypatch):
    """The SGLang launch is judged by SGLang's rewrite rule, given what discovery read; a home that resolves its
    settings but has no rule says "not checked", naming the rule, never another engine's verdict; a speculative flag
    that did not parse is never evidence."""
    asked = []
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], rewrite_rule=lambda *a: asked.append(a) or "x"))
    assert _find(SEED, "a resolution") == ["x"]
    assert asked[0][:4] == (parse_launch(SEED), "a resolution", "0.5.6", "given") and asked[0][-1].startswith("serving")
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], rewrite_rule=None))
    (f,) = _find(SEED)
    assert f.status == "not checked" and "EngineHome.rewrite_rule" in f.needs
    (g,) = ndt_override_findings(parse_launch(SEED.replace("topk 1", "topk one"), strict=False), None, "0.5.6",
                                 "given", False, pd.DataFrame(), ARCH)
    assert g.status == "not checked" and "--speculative-eagle-topk" in g.summary and not asked[1:]
