"""Check 8 (chat template): training samples vs the target tokenizer's template and served prompts."""
from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.template import check_template, template_markers
from eagle3lib.samples.readers import Sample
from eagle3lib.samples.writers import write_seed_dataset

SPECIAL = ["<|begin|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<think>", "</think>", "###"]
WORDS = ["hello", "how", "are", "you", "fine", "thanks", "be", "brief", "User:", "Assistant:", "[UNK]"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A target folder holding only config.json and a word-level tokenizer with a chat template."""
    d = tmp_path_factory.mktemp("tmpl") / "target"
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|begin|>", unk_token="[UNK]",
                                  additional_special_tokens=SPECIAL[1:], chat_template=TEMPLATE)
    tok.save_pretrained(d)
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
                                               "hidden_size": 8, "vocab_size": len(vocab)}))
    return d, tok


def _answer_mask(tok, ids: list[int]) -> list[int]:
    """SpecForge's loss mask: 1 on each answer (after an assistant header) up to and including its <|end|>."""
    a, e = tok.convert_tokens_to_ids("<|assistant|>"), tok.convert_tokens_to_ids("<|end|>")
    out, on = [], False
    for t in ids:
        out.append(int(on))
        on = (on and t != e) or t == a
    return out


def _data(root, tok, texts, name, masked=False):
    samples = []
    for i, t in enumerate(texts):
        ids = tok(t, add_special_tokens=False)["input_ids"]
        mask = _answer_mask(tok, ids) if masked else [1] * len(ids)
        samples.append(Sample(f"s{i}", torch.tensor(ids), torch.tensor(mask), torch.zeros(len(ids), 1, 8),
                              ("layer_in.1",), None, f"mem:{i}"))
    write_seed_dataset(root / name, samples, layout=("layer_in.1",), info={"num_target_layers": 2})
    return root / name


CHAT = "<|begin|><|user|>hello how are you<|end|><|assistant|>fine thanks<|end|>"
THINK = "<|begin|><|user|>hello<|end|><|assistant|><think></think>fine<|end|>"
SYS = "<|begin|><|system|>be brief<|end|><|user|>hello<|end|><|assistant|>fine<|end|>"
OTHER = "### User: hello how are you ### Assistant: fine thanks"


def _f(tmp_path, target, texts, served=None):
    d, tok = target
    return check_template(read_artifacts(target=d, data=_data(tmp_path, tok, texts, "data"),
                                         served_prompts=served))


def test_markers_of_the_template(target):
    m = template_markers(target[1])
    assert (m["user"], m["assistant"], m["system"]) == ("<|user|>", "<|end|><|assistant|>", "<|system|>")


def test_clean_training_data_and_served_prompts_rule_everything_out(tmp_path, target):
    f = _f(tmp_path, target, [CHAT, CHAT], served=["<|begin|><|user|>hello<|end|><|assistant|>"])
    assert {x.status for x in f} == {"ruled out"}, f


def test_data_rendered_with_another_template_is_confirmed_with_both_renderings(tmp_path, target):
    f = [x for x in _f(tmp_path, target, [OTHER, OTHER]) if x.where.endswith("markers")]
    assert [x.status for x in f] == ["confirmed"]
    assert "###" in f[0].evidence["training_rendering"] and "<|user|>" in f[0].evidence["template_rendering"]


def test_think_and_system_prompt_differences_with_served_prompts(tmp_path, target):
    """Training with empty think blocks, serving without: confirmed; a system prompt only in serving: confirmed."""
    f = _f(tmp_path, target, [THINK, THINK], served=[CHAT])
    assert [x.status for x in f if x.where.endswith("think")] == ["confirmed"]
    f = _f(tmp_path, target, [CHAT, CHAT], served=[SYS, SYS])
    hit = [x for x in f if x.where.endswith("system")]
    assert [x.status for x in hit] == ["confirmed"] and "be brief" in hit[0].evidence["served_rendering"]
    f = _f(tmp_path, target, [THINK, THINK])
    assert [x.status for x in f if x.where.endswith("think")] == ["suspected"]


def test_without_a_tokenizer_not_checked(tmp_path, target):
    f = check_template(read_artifacts(data=_data(tmp_path, target[1], [CHAT], "d")))
    assert [x.status for x in f] == ["not checked"] and "tokenizer" in f[0].needs


def test_no_readable_sample_decides_nothing(tmp_path, target):
    """Training data of which no sample reads (an empty index): not checked, never 'confirmed' from 0 samples."""
    (f,) = _f(tmp_path, target, [])
    assert f.status == "not checked" and "no training sample could be read" in f.summary


DEFAULT_SYS = ("{{ bos_token }}{% if messages[0]['role'] != 'system' %}<|system|>be brief<|end|>{% endif %}"
               "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
THINK_GEN = TEMPLATE.replace("<|assistant|>{% endif %}", "<|assistant|><think></think>{% endif %}")


@pytest.fixture()
def retemplated(target, tmp_path):
    """The target's tokenizer with another chat template (a copy of the folder)."""
    import shutil

    def make(template):
        d = tmp_path / "retemplated"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(target[0], d)
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        cfg["chat_template"] = template
        (d / "tokenizer_config.json").write_text(json.dumps(cfg))
        (d / "chat_template.jinja").unlink(missing_ok=True)
        return d, target[1]
    return make


def _by_aspect(findings):
    return {x.aspects: x.status for x in findings}


def test_each_aspect_has_its_own_finding_and_a_healthy_template_rules_them_all_out(tmp_path, target):
    """Without served prompts: role markers, think blocks, the system prompt (the template adds none of its own,
    the training samples carry none) and the generation prompt are each checked, so the cause is ruled out."""
    from eagle3lib.diagnose.combine import combine_aspects
    f = _f(tmp_path, target, [CHAT, CHAT])
    assert _by_aspect(f) == {("role markers",): "ruled out", ("think blocks",): "ruled out",
                             ("system prompt",): "ruled out", ("generation prompt",): "ruled out"}
    assert combine_aspects("chat_template_mismatch", f)[0] == "ruled out"


def test_a_template_that_adds_a_default_system_prompt_is_confirmed_not_ruled_out(tmp_path, retemplated):
    """Issue 25: markers and think blocks agree, but the served template adds "<|system|>be brief" to every
    request without a system prompt, which no training sample carries: the system-prompt aspect confirms it."""
    from eagle3lib.diagnose.combine import combine_aspects
    d, tok = retemplated(DEFAULT_SYS)
    assert template_markers(tok.__class__.from_pretrained(d))["default_system"].strip() == "<|system|>be brief"
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [CHAT, CHAT], "data")))
    got = _by_aspect(f)
    assert got[("system prompt",)] == "confirmed" and got[("role markers",)] == "ruled out"
    hit = next(x for x in f if x.aspects == ("system prompt",))
    assert "be brief" in hit.summary and hit.evidence["training_default_system_share"] == 0.0
    assert combine_aspects("chat_template_mismatch", f)[0] == "confirmed"
    # trained on data that carries the default: ruled out
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [SYS, SYS], "data2")))
    assert _by_aspect(f)[("system prompt",)] == "ruled out"


def test_an_empty_think_block_the_served_generation_prompt_opens_is_the_think_aspect(tmp_path, retemplated):
    """Issue 25: the served generation prompt now opens each answer with <think></think>, no training sample holds
    one: the think-blocks aspect is confirmed (not "ruled out" from the samples' text), and the generation prompt
    without its think block is what the samples hold, so that aspect is ruled out. Trained with them: ruled out."""
    d, tok = retemplated(THINK_GEN)
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [CHAT, CHAT], "data")))
    assert (_by_aspect(f)[("think blocks",)], _by_aspect(f)[("generation prompt",)]) == ("confirmed", "ruled out")
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [THINK, THINK], "data2")))
    assert _by_aspect(f)[("think blocks",)] == "ruled out"


GEN_MORE = TEMPLATE.replace("<|assistant|>{% endif %}", "<|assistant|>###{% endif %}")
ROLES = TEMPLATE.replace("<|{{ m['role'] }}|>", "{% if m['role'] == 'user' %}User:{% else %}<|{{ m['role'] }}|>"
                         "{% endif %}")
CHAT2 = "<|begin|><|user|>hello<|end|><|assistant|>fine<|end|>"


def test_a_generation_prompt_the_training_answers_never_open_with_is_confirmed(tmp_path, retemplated):
    """The generation prompt is compared token for token before each answer (the loss mask's rise): one token more
    than the training rendering holds there is confirmed; the template the data was rendered with rules it out."""
    d, tok = retemplated(GEN_MORE)
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [CHAT, CHAT2], "data", masked=True)))
    hit = _aspect(f, "generation prompt")
    assert hit.status == "confirmed" and hit.evidence["training_share"] == 0.0
    d, tok = retemplated(TEMPLATE)
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [CHAT, CHAT2], "data2", masked=True)))
    assert _aspect(f, "generation prompt").status == "ruled out"


def test_role_markers_are_read_from_the_training_rendering_and_replaced_by_the_served_ones(target):
    """The user header every first turn opens with and what every prompt ends with before an answer are the
    training rendering's markers; the served rendering swaps them where turns open and answers start."""
    from eagle3lib.checks.template_replay import training_markers, with_role_markers
    tok = target[1]
    samples = [(ids := tok(t, add_special_tokens=False)["input_ids"], _answer_mask(tok, ids)) for t in (CHAT, CHAT2)]
    found = training_markers(tok, samples)
    assert [tok.convert_ids_to_tokens(found[k]) for k in ("lead", "user", "assistant")] == [
        ["<|begin|>"], ["<|user|>"], ["<|end|>", "<|assistant|>"]]
    assert training_markers(tok, samples[:1] * 2) is None          # identical turns: marker and content inseparable
    ids, mask = samples[1]
    user = tok("###", add_special_tokens=False)["input_ids"]
    new_ids, new_mask = with_role_markers(ids, mask, found, user, found["assistant"])
    assert tok.convert_ids_to_tokens(new_ids)[:3] == ["<|begin|>", "###", "hello"] and sum(new_mask) == sum(mask)
    assert with_role_markers(ids, mask, found, found["user"], found["assistant"]) is None


def test_a_served_template_with_other_role_markers_is_not_ruled_out_from_the_text(tmp_path, retemplated):
    """Issue 25: the served template writes the user turn as 'User:' where the training samples hold <|user|> (the
    assistant marker is unchanged, so some of the template's markers are in every sample): the role-marker aspect is
    confirmed (no draft weights here to replay it), not ruled out; the training template rules it out."""
    d, tok = retemplated(ROLES)
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [CHAT, CHAT2], "data", masked=True)))
    hit = _aspect(f, "role markers")
    assert hit.status == "confirmed" and "User:" in hit.summary, hit
    assert hit.evidence["training_role_markers"]["user"] == "<|user|>"
    d, tok = retemplated(TEMPLATE)
    f = check_template(read_artifacts(target=d, data=_data(tmp_path, tok, [CHAT, CHAT2], "data2", masked=True)))
    assert _by_aspect(f) == {("role markers",): "ruled out", ("think blocks",): "ruled out",
                             ("system prompt",): "ruled out", ("generation prompt",): "ruled out"}


# --- measured: the training conversations rendered with the served template, both renderings replayed

def test_renderings_insert_what_the_served_template_adds_and_nothing_else():
    """A default system block goes before the first user header the sample holds; a generation prompt's missing
    part goes where each answer starts (the loss mask rises); a sample that already has them is not re-rendered."""
    from eagle3lib.checks.template_replay import with_default_system, with_generation_prompt
    ids, mask = [0, 1, 5, 6, 2, 7, 8], [0, 0, 0, 0, 0, 1, 1]          # bos user w w assistant answer answer
    assert with_default_system(ids, mask, [3, 9, 4, 1]) == ([0, 3, 9, 4, 1, 5, 6, 2, 7, 8], [0] * 8 + [1, 1])
    assert with_default_system(ids, mask, [1]) is None
    assert with_generation_prompt(ids, mask, [2, 11, 12]) == ([0, 1, 5, 6, 2, 11, 12, 7, 8], [0] * 7 + [1, 1])
    assert with_generation_prompt(ids, mask, [6, 2]) is None


def _served_target(tmp_path, w, old: str, new: str):
    """A copy of the demo target whose tokenizer_config.json chat template has `old` replaced by `new`."""
    import shutil
    t = tmp_path / "target"
    shutil.copytree(w.target, t)
    cfg = json.loads((t / "tokenizer_config.json").read_text())
    cfg["chat_template"] = cfg["chat_template"].replace(old, new)
    (t / "tokenizer_config.json").write_text(json.dumps(cfg))
    return t


def _aspect(findings, aspect):
    (f,) = [x for x in findings if x.aspects == (aspect,)]
    return f


@pytest.mark.slow
def test_a_think_block_the_draft_never_saw_is_confirmed_by_the_replay(tmp_path):
    """The served template (named by --chat-template) opens answers with an empty think block the demo draft was
    never trained on: the served rendering replays worse: the think-blocks aspect confirmed, measured."""
    from eagle3lib.demo import world as demo
    w = demo.ensure_world(progress=False)
    tmpl = json.loads((w.target / "tokenizer_config.json").read_text())["chat_template"]
    (tmp_path / "served.jinja").write_text(tmpl.replace("<|assistant|>{% endif %}",
                                                        "<|assistant|><think>\n\n</think>\n\n{% endif %}"))
    launch = ("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
              f"--speculative-draft-model-path D --chat-template {tmp_path / 'served.jinja'}")
    found = check_template(read_artifacts(draft=w.draft, target=w.target, data=w.seed_data, launch=launch))
    assert _aspect(found, "generation prompt").status == "ruled out"        # '<|assistant|>' as trained
    f = _aspect(found, "think blocks")
    assert (f.status, f.measured) == ("confirmed", True), f
    ev = f.evidence
    assert ev["acc_0_training_rendering"] - ev["acc_0_served_rendering"] > 0.05 and ev["inserted_tokens"] > 0


@pytest.mark.slow
def test_a_short_default_system_prompt_the_draft_does_not_notice_is_ruled_out_by_the_replay(tmp_path):
    """The target's template now adds '<|system|>Be brief.<|end|>' to requests without a system turn (no training
    sample has it): the markers say it differs, the replay shows the draft keeps its accuracy: ruled out, measured."""
    from eagle3lib.demo import world as demo
    w = demo.ensure_world(progress=False)
    t = _served_target(tmp_path, w, "{{ bos_token }}", "{{ bos_token }}{% if messages[0]['role'] != 'system' %}"
                       "<|system|>Be brief.<|end|>{% endif %}")
    f = _aspect(check_template(read_artifacts(draft=w.draft, target=t, data=w.seed_data)), "system prompt")
    assert (f.status, f.measured) == ("ruled out", True), f
    assert f.evidence["training_default_system_share"] < 0.5 and f.evidence["rendered_samples"] > 0
