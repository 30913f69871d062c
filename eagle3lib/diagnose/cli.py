"""``python -m eagle3lib.diagnose --draft D --target T [--train-data ...] [--launch "..."] [--server-log ...]
[--serving-dump ...]``

The notebooks' checks on one set of artifacts, for a GPU box over ssh: the problems met first (every given input
that could not be read, naming its flag), a plain-text table of the ranked causes, then, as the last line, one
JSON record (the diagnosis and its problems). With no --draft it diagnoses the embedded demo world.
Exit code 0 when every given input was read (whatever it found: the record's "healthy" says whether no fault was
found), 1 when a part of the workbook itself broke, 2 when the arguments could not be read, 3 when a given input
could not be read (the diagnosis covers the rest).
"""
from __future__ import annotations

import argparse
import json
import sys

from ..names import add_old_flags
from ..steps.part import Inputs
from .decision import with_decision
from .run import run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eagle3lib.diagnose", description=__doc__.splitlines()[0])
    a = p.add_argument
    a("--draft", default="", help="draft checkpoint dir (config.json + weights); none: the demo world")
    a("--target", default="", help="target model dir (config, embedding, lm_head, tokenizer; the model to recapture)")
    a("--train-data", default="", help="the draft's training data (any format eagle3lib reads)")
    a("--heldout-data", default="", help="held-out or served-prompt samples (generalization gap)")
    a("--launch", default="", help="the serving launch command, quoted (SGLang or vLLM)")
    a("--sglang-version", default="", help="SGLang version the server ran (rule table, capture rules)")
    a("--server-log", default="", help="the server's startup log")
    a("--served-log", default="", help="decode logs / benchmark outputs with accept lengths, comma-separated "
                                       "(compared with the replay under the setting each run ran)")
    a("--served-traffic", default="", help="the served requests and answers (a folder with prompts.jsonl + "
                                           "responses.jsonl, as vllm_driver.serve saves them): the replay that predicts "
                                           "the served τ runs on them")
    a("--server-url", default="", help="a live SGLang server (/server_info)")
    a("--serving-dump", default="", help="serving dump: SGLang --debug-tensor-dump-output-folder or an eagle3lib dump")
    a("--serving-layout", default="", help="the layout the server feeds, when known, e.g. layer_in.2,layer_in.4")
    a("--serving-engine", default="", help="sglang or vllm: use its capture rules for the serving layout")
    a("--recorded-acc", type=float, default=-1.0, help="step-0 validation accuracy training reported")
    a("--training-log", default="", help="jsonl training log holding val_acc_step0 (or eval/acc_0)")
    a("--n", type=int, default=32, help="samples per replay (default 32)")
    a("--num-steps", type=int, default=3, help="draft steps per round (default 3)")
    a("--drift-samples", type=int, default=4, help="samples recaptured for the drift check (0: skip)")
    a("--device", default="cpu")
    a("--dtype", default="float32")
    a("--quiet", action="store_true", help="no progress lines")
    add_old_flags(p)     # --data, --heldout, --log, --dump: the old names, for one release (a warning each)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    inp = Inputs(**{k: v for k, v in vars(args).items() if k != "quiet"})
    result = run(inp, progress=not args.quiet)
    d = result.diagnosis
    print(with_decision(d.text(), d.decision, len(d.problems)))   # the seed's decision first (diagnose.decision)
    for name, why in result.skipped.items():
        print(f"not run: {name} ({why})")
    print(json.dumps({**d.to_dict(), "skipped": result.skipped, "exit_code": result.exit_code},
                     allow_nan=False, default=str))
    sys.stdout.flush()
    return result.exit_code
