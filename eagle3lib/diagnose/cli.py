"""``python -m eagle3lib.diagnose --draft D --target T [--train-data ...] [--launch "..."] [--server-log ...]
[--serving-dump ...] [--json FILE]``

The notebooks' checks on one set of artifacts, for a GPU box over ssh: the answer, wrapped to the terminal's width
(`answer.answer_text`): what could not be read first (naming its flag), each confirmed or suspected cause with its
evidence and its whole fix, the causes ruled out, and those not checked with the flag that would check them.
``--json FILE`` writes the machine record (the diagnosis, its problems, the exit code) to FILE (``-``: stdout).
With no --draft it diagnoses the embedded demo world.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from ..errors import ReportError
from ..jsonfiles import atomic_write
from ..names import add_old_flags
from ..steps.part import Inputs
from .answer import answer_text, terminal_width
from .decision import with_decision
from .parts import EXIT, run

EXIT_MEANING = {EXIT["ok"]: "every given input was read: the answer above is the diagnosis",
                EXIT["failed"]: "a part of the workbook itself broke (named under PROBLEMS)",
                EXIT["arguments"]: "the arguments could not be read",
                EXIT["unreadable"]: "a given input could not be read (named under PROBLEMS); the rest was diagnosed"}
EPILOG = """examples:
  eagle3lib diagnose --draft /models/my-draft --target /models/target --train-data /data/train \\
      --launch "python -m sglang.launch_server ... --speculative-num-draft-tokens 16" --sglang-version 0.5.6
  eagle3lib diagnose --draft /models/my-draft --target /models/target --train-data /data/train \\
      --serving-dump /dumps/sglang_tensor_dump --served-log server.log --json diagnosis.json

exit codes:
""" + "\n".join(f"  {code}  {why}" for code, why in EXIT_MEANING.items()) + """
A cause found is exit 0: the diagnosis is the answer ("healthy" in the --json record says whether no fault was
found)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eagle3lib diagnose", description=__doc__.split("\n\n")[1].replace("\n", " "),
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
                                           "responses.jsonl, as vllm_engine.serve saves them): the replay that predicts "
                                           "the served τ runs on them")
    a("--server-url", default="", help="a live SGLang server (/server_info)")
    a("--server-info", default="", help="a saved GET /server_info JSON of the SGLang server (its effective settings "
                                        "and version)")
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
    a("--json", metavar="FILE", default="", help="write the machine record (diagnosis, problems, exit code) to "
                                                 "FILE; '-' prints it on stdout after the answer")
    add_old_flags(p)     # --data, --heldout, --log, --dump: the old names, for one release (a warning each)
    return p


def machine_record(result) -> dict:
    """The machine record of a run: the diagnosis, the parts not run and why, and the exit code."""
    return {**result.diagnosis.to_dict(), "skipped": result.skipped, "exit_code": result.exit_code}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    inp = Inputs(**{k: v for k, v in vars(args).items() if k not in ("quiet", "json")})
    result = run(inp, progress=not args.quiet)
    width = terminal_width()
    d = result.diagnosis
    # the seed's decision first (diagnose.decision), then the answer (diagnose.answer)
    print(with_decision(answer_text(d, width, result.given), d.decision, len(d.problems), width), end="")
    say = lambda text: print(textwrap.fill(text, width, subsequent_indent="    ", break_long_words=False,  # noqa: E731
                                           break_on_hyphens=False))
    for name, why in result.skipped.items():
        say(f"not run: {name} ({why})")
    text = json.dumps(machine_record(result), allow_nan=False, default=str)
    if args.json and args.json != "-":
        try:
            atomic_write(Path(args.json), text + "\n")
        except OSError as e:
            print(f"error: {ReportError(args.json, 'could not write the --json record', found=str(e))}",
                  file=sys.stderr)
            return EXIT["arguments"]
    say(f"exit code {result.exit_code}: {EXIT_MEANING[result.exit_code]}"
        + (f"; the record: {args.json}" if args.json not in ("", "-") else
           "" if args.json else " (--json FILE writes the machine record)"))
    if args.json == "-":             # the record last, on a line of its own, for a script's pipe
        print(text)
    sys.stdout.flush()
    return result.exit_code
