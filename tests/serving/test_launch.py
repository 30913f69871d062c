"""Tests for eagle3lib.serving.launch: launch commands as users write them -> requested settings."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3lib.errors import Eagle3Error, ServingArgsError
from eagle3lib.serving.launch import parse_launch

SEED = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path data/demo/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")


def test_seed_command_reads_the_three_knobs():
    """The seed's first command gives steps 1, topk 1, ndt 16 and the model/draft paths."""
    a = parse_launch(SEED)
    assert (a.engine, a.entrypoint) == ("sglang", "python -m sglang.launch_server")
    assert (a.model_path, a.draft_path, a.algorithm) == ("data/demo/target", "data/demo/draft", "EAGLE3")
    assert (a.num_steps, a.topk, a.num_draft_tokens) == (1, 1, 16)
    assert a.unknown == () and a.notes == ()


def test_unset_knobs_are_none():
    """Knobs not on the command line are None, not a default."""
    a = parse_launch("sglang serve --model-path m --speculative-algorithm EAGLE3")
    assert (a.num_steps, a.topk, a.num_draft_tokens) == (None, None, None)
    assert a.entrypoint == "sglang serve"


def test_equals_form_line_continuations_env_and_shell_tail():
    """`--flag=value`, backslash-newline, VAR=value prefixes and a trailing redirection are all understood."""
    cmd = ("CUDA_VISIBLE_DEVICES=0,1 SGLANG_ENABLE_SPEC_V2=1 nohup python3 -u -m sglang.launch_server \\\n"
           "  --model-path=/m --tp 2 \\\n  --speculative-num-steps=3 --enable-mixed-chunk > server.log 2>&1 &")
    a = parse_launch(cmd)
    assert a.env == {"CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_ENABLE_SPEC_V2": "1"}
    assert a.flags["tp_size"] == 2 and a.num_steps == 3 and a.flags["enable_mixed_chunk"] is True
    assert any("server.log" in n for n in a.notes)
    assert "server.log" not in a.argv


def test_unknown_flags_are_kept_and_reported():
    """Unknown flags (with and without a value) stay in flags and are listed in unknown."""
    a = parse_launch(SEED + " --my-new-flag 7 --some-switch --other=x")
    assert a.unknown == ("--my-new-flag", "--some-switch", "--other")
    assert a.flags["my_new_flag"] == "7" and a.flags["some_switch"] is True and a.flags["other"] == "x"
    frame = a.frame()
    assert set(frame.loc[~frame["known"], "field"]) == {"my_new_flag", "some_switch", "other"}


def test_negative_number_is_a_value_not_a_flag():
    """`--chunked-prefill-size -1` reads -1 as the value."""
    a = parse_launch("python -m sglang.launch_server --model-path m --chunked-prefill-size -1")
    assert a.flags["chunked_prefill_size"] == -1


def test_vllm_serve_with_speculative_config_json():
    """`vllm serve MODEL --speculative-config '{...}'` gives model, draft, method and K."""
    cmd = ("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --speculative-config "
           "'{\"method\": \"eagle3\", \"model\": \"/d/eagle3\", \"num_speculative_tokens\": 3}' --no-enable-prefix-caching")
    a = parse_launch(cmd)
    assert (a.engine, a.model_path, a.draft_path, a.algorithm) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct",
                                                                    "/d/eagle3", "eagle3")
    assert a.num_speculative_tokens == 3 and a.flags["tensor_parallel_size"] == 2
    assert a.flags["enable_prefix_caching"] is False


def test_vllm_api_server_dotted_and_legacy_forms():
    """The api_server module, dotted --speculative-config.key and the removed legacy flags are all read."""
    a = parse_launch("python -m vllm.entrypoints.openai.api_server --model m --speculative-config.method eagle3 "
                     "--speculative-config.num_speculative_tokens 4")
    assert a.speculative_config == {"method": "eagle3", "num_speculative_tokens": 4} and a.model_path == "m"
    b = parse_launch("vllm serve m --speculative-model /d --num-speculative-tokens 2")
    assert b.num_speculative_tokens == 2 and b.draft_path == "/d"
    assert any("#15466" in n for n in b.notes)


def test_argv_list_and_flags_only():
    """A list of args works, with or without the entrypoint; flags alone need a recognisable engine."""
    a = parse_launch(["python", "-m", "sglang.launch_server", "--speculative-eagle-topk", "4"])
    assert a.topk == 4
    b = parse_launch(["--model-path", "m", "--speculative-num-steps", "2"])
    assert b.engine == "sglang" and b.entrypoint == "(flags only)"
    c = parse_launch(["--model", "m"], engine="vllm")
    assert c.engine == "vllm"


@pytest.mark.parametrize("cmd, needle", [
    ("ls -la", "not a SGLang or vLLM"),
    ("", "is empty"),
    ("python -m sglang.launch_server --speculative-config '{\"a\": 1", "balanced quotes"),
    ("python train.py --lr 1e-4", "not a SGLang or vLLM"),
])
def test_not_a_launch_command_raises_a_clear_error(cmd, needle):
    """Unbalanced quotes and other programs raise ServingArgsError saying what was expected."""
    with pytest.raises(ServingArgsError, match=needle):
        parse_launch(cmd)


def test_bad_value_raises_or_is_kept_as_a_note():
    """A non-integer knob raises (strict) naming flag and value, or becomes a note (strict=False)."""
    cmd = "python -m sglang.launch_server --model-path m --speculative-num-steps three"
    with pytest.raises(ServingArgsError, match="--speculative-num-steps.*'three'"):
        parse_launch(cmd)
    a = parse_launch(cmd, strict=False)
    assert a.num_steps is None and a.flags["speculative_num_steps"] == "three"
    assert any("speculative-num-steps" in n for n in a.notes)


def test_bad_speculative_config_json():
    """Invalid --speculative-config JSON raises with a quoting hint."""
    with pytest.raises(ServingArgsError, match="JSON"):
        parse_launch('vllm serve m --speculative-config {method:eagle3}')


def test_repeated_flag_keeps_the_last_and_notes_it():
    """argparse keeps the last of a repeated flag; we do too, and say so."""
    a = parse_launch(SEED + " --speculative-num-steps 5")
    assert a.num_steps == 5 and any("given twice" in n for n in a.notes)


def test_argparse_abbreviations_are_read_with_a_note():
    """A unique prefix (argparse allow_abbrev) maps to its flag, with a note; an ambiguous one stays unknown."""
    a = parse_launch("python -m sglang.launch_server --model-path m --speculative-num-d 8 --speculative-draft x")
    assert a.num_draft_tokens == 8 and any("abbreviation" in n for n in a.notes)
    assert "--speculative-draft" in a.unknown       # draft-model-path, -revision, -quantization: ambiguous


def test_get_by_flag_or_field():
    """get() accepts a flag spelling or a field name."""
    a = parse_launch(SEED + " --max-running-requests 8")
    assert a.get("--max-running-requests") == a.get("max_running_requests") == 8


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_no_string_crashes_the_parser(text):
    """Any text either parses or raises an eagle3lib error, never anything else."""
    try:
        parse_launch(text)
    except Eagle3Error:
        pass


_tok = st.one_of(st.sampled_from(["--speculative-num-steps", "--speculative-eagle-topk", "--model-path", "--tp",
                                  "--speculative-config", "--enable-mixed-chunk", "--no-x", "-1", "=", "'", '"',
                                  "{", "--cuda-graph-bs", "--speculative-config.method"]), st.text(max_size=12))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["sglang", "vllm"]), st.lists(_tok, max_size=12), st.booleans())
def test_no_argv_crashes_the_parser(engine, tokens, strict):
    """Random argv after a real entrypoint never raises anything but an eagle3lib error."""
    head = ["python", "-m", "sglang.launch_server"] if engine == "sglang" else ["vllm", "serve"]
    try:
        a = parse_launch(head + tokens, strict=strict)
    except Eagle3Error:
        return
    assert a.engine == engine


def test_flags_the_2026_cause_checks_read_are_known_and_typed():
    """LoRA, grammar, adaptive depth, PD and prefix-caching flags are known (not `unknown`) and typed per engine."""
    a = parse_launch(SEED + " --enable-lora --lora-paths a=/x --max-loras-per-batch 2 --grammar-backend none "
                     "--speculative-adaptive --speculative-adaptive-config /c.json --disaggregation-mode decode")
    assert a.unknown == ()
    assert (a.flags["enable_lora"], a.flags["lora_paths"], a.flags["max_loras_per_batch"]) == (True, "a=/x", 2)
    assert (a.flags["grammar_backend"], a.flags["speculative_adaptive"]) == ("none", True)
    v = parse_launch("vllm serve m --no-enable-prefix-caching --enable-lora --lora-modules a=/x --max-loras 2 "
                     "--structured-outputs-config '{\"backend\": \"xgrammar\"}' --enable-auto-tool-choice")
    assert v.unknown == () and v.flags["enable_prefix_caching"] is False
    assert v.flags["structured_outputs_config"] == {"backend": "xgrammar"} and v.flags["max_loras"] == 2


def test_values_that_do_not_parse_are_listed_as_unread():
    """strict=False keeps a bad value as text and lists its field in `unread` (never evidence); strict raises."""
    la = parse_launch("vllm serve x --speculative-config {bad json", strict=False)
    assert la.unread == ("speculative_config",) and la.speculation_unread and la.speculative_config is None
    la = parse_launch("python -m sglang.launch_server --model-path m --speculative-num-steps three "
                      "--mem-fraction-static lots --disable-radix-cache=perhaps --speculative-draft-model-path",
                      strict=False)
    assert la.unread == ("speculative_num_steps", "mem_fraction_static", "disable_radix_cache",
                         "speculative_draft_model_path")
    assert la.speculation_unread
    la = parse_launch("python -m sglang.launch_server --model-path m --mem-fraction-static lots", strict=False)
    assert la.unread == ("mem_fraction_static",) and not la.speculation_unread
    ok = parse_launch("vllm serve x --speculative-config '{\"method\": \"eagle3\"}' --speculative-config.model d")
    assert ok.unread == () and ok.speculative_config == {"method": "eagle3", "model": "d"}
    with pytest.raises(ServingArgsError, match="--speculative-config"):
        parse_launch("vllm serve x --speculative-config {bad json")
