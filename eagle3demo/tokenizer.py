"""The demo world's BPE tokenizer, trained on its corpus and saved beside the target (the builder's stage
"corpus + tokenizer"; the library restores the shipped one). ``save_tokenizer(train_tokenizer(texts, 3072), out,
model_max_length=512)``, then ``AutoTokenizer.from_pretrained(out)``.
"""
from __future__ import annotations

import json
from pathlib import Path

from eagle3lib.demo.corpus import ASSISTANT, BOS, CHAT_TEMPLATE, EOT, PAD, SPECIAL_TOKENS, SYSTEM, USER


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE (HF `tokenizers`) trained on `texts`, with the chat special tokens at ids 0..5."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def save_tokenizer(tok, out_dir: str | Path, model_max_length: int) -> None:
    """Write tokenizer.json + tokenizer_config.json (chat template) + special_tokens_map.json for AutoTokenizer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOT, "pad_token": PAD,
               "additional_special_tokens": [USER, ASSISTANT, SYSTEM]}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
           "clean_up_tokenization_spaces": False,
           "model_max_length": model_max_length, "add_bos_token": False, "add_eos_token": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
