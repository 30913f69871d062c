"""Check 7 (launch vs draft): wrong method, lossy thresholds, greedy sampling, quantized target, hidden sizes."""
from __future__ import annotations

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.launch_settings import check_launch
from tests.checks.world import TARGET, draft_raw, statuses, write_draft, write_target

SG = "python -m sglang.launch_server --model-path t --speculative-draft-model-path d --speculative-algorithm {a}"


def _f(tmp_path, launch=None, target=None, raw=None):
    art = read_artifacts(draft=write_draft(tmp_path, raw or draft_raw()), target=write_target(tmp_path, target),
                         launch=launch)
    return check_launch(art)


def test_clean_launch_rules_out_what_it_can(tmp_path):
    """EAGLE3 on SGLang with exact verification, an unquantized target of the same width: all ruled out."""
    f = _f(tmp_path, SG.format(a="EAGLE3"))
    for c in ("wrong_method", "lossy_threshold", "quantized_target", "hidden_size_mismatch"):
        assert statuses(f, c) == {"ruled out"}, c
    assert statuses(f, "sampling_settings") == {"not checked"}


def test_eagle_algorithm_with_an_eagle3_draft_is_confirmed(tmp_path):
    """--speculative-algorithm EAGLE with an EAGLE-3 draft: confirmed, source sglang PR#21272."""
    f = [x for x in _f(tmp_path, SG.format(a="EAGLE")) if x.cause == "wrong_method"]
    assert f[0].status == "confirmed" and "21272" in f[0].source


def test_vllm_method_inferred_from_the_path(tmp_path):
    """No method and no 'eagle3' in the path: vLLM loads a draft_model -> confirmed; explicit eagle3: ruled out."""
    cmd = "vllm serve t --speculative-config '{\"model\": \"/ckpt/mydraft\", \"num_speculative_tokens\": 3}'"
    assert statuses(_f(tmp_path, cmd), "wrong_method") == {"confirmed"}
    cmd = ("vllm serve t --speculative-config "
           "'{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'")
    assert statuses(_f(tmp_path, cmd), "wrong_method") == {"ruled out"}


def test_lossy_threshold_and_quantized_target_and_width(tmp_path):
    """threshold 0.5 -> confirmed; fp8 target -> suspected; slot width 64 vs target 32 -> confirmed."""
    f = _f(tmp_path, SG.format(a="EAGLE3") + " --speculative-accept-threshold-single 0.5",
           {**TARGET, "quantization_config": {"quant_method": "fp8"}}, draft_raw(target_hidden_size=64))
    assert statuses(f, "lossy_threshold") == {"confirmed"}
    assert statuses(f, "quantized_target") == {"suspected"}
    assert statuses(f, "hidden_size_mismatch") == {"confirmed"}


def test_without_inputs_everything_is_not_checked(tmp_path):
    f = check_launch(read_artifacts())
    assert {x.status for x in f} == {"not checked"} and all(x.needs for x in f)


def test_a_speculative_config_that_does_not_parse_is_never_evidence(tmp_path):
    """Issue 28: `--speculative-config {bad json` once confirmed wrong_method ("vLLM runs method None") and, read as
    vLLM's engine, two layout causes. Now: wrong_method not checked naming the flag, and no engine layer reading."""
    from eagle3lib.checks.judge import run_checks
    cmd = "vllm serve x --speculative-config {bad json"
    (f,) = [x for x in _f(tmp_path, cmd) if x.cause == "wrong_method"]
    assert f.status == "not checked" and "--speculative-config" in f.summary and "--speculative-config" in f.needs
    found = run_checks(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path), launch=cmd)
    assert not [(x.cause, x.status) for x in found if x.status in ("confirmed", "suspected")]
    good = run_checks(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path),
                      launch=cmd.replace("{bad json", "'{\"method\": \"eagle3\", \"model\": \"d\", "
                                                       "\"num_speculative_tokens\": 3}'"))
    assert {x.cause for x in good if x.status != "not checked"} >= {"wrong_method", "aux_layout_mismatch"}
