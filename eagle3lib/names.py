"""One name per input, in the notebooks' parameters cells, the YAML parameters files and the command lines.

The seven inputs a user points at their own artifacts: `INPUTS`. A notebook parameter or YAML key is the name
itself (``train_data``), a command-line flag the name with dashes (``--train-data``). The names they had before
(issue 38) still work for one release: `OLD_PARAMS` and `OLD_FLAGS`, each use warned with a `FutureWarning`
naming the new name.

- `renamed(params, where)`: a parameters mapping with the old keys under their new names (YAML, papermill).
- `adopt_old_names(namespace)`: in a notebook, after papermill injected its parameters: an old name's value
  moves to the new name (``names.adopt_old_names(globals())``).
- `add_old_flags(parser)`: the old flags of a parser's new ones, hidden from --help, each warning when used.
- `how_to_give(name)`: how a user gives an input, "--launch (YAML key launch)"; `inputs_asked(text)`: the inputs a
  "not checked" finding's `needs` asks for (`GIVE`: each input's flag, key and the words findings use for it).
"""
from __future__ import annotations

import argparse
import warnings
from typing import Any, Mapping, MutableMapping

# the inputs, by their one name: a notebook parameter / YAML key as is, a flag as --name-with-dashes
INPUTS = ("draft", "target", "train_data", "heldout_data", "launch", "server_log", "serving_dump")

# what each input is, in one line (the template's top-level lines, docs/inputs.md)
WHAT = {
    "draft": "the draft checkpoint folder (config.json + weights); empty: the embedded demo world's draft",
    "target": "the target model folder (config, embedding, lm_head, tokenizer; the model to recapture)",
    "train_data": "the samples the draft was trained on (SpecForge, seed, speculators or ModelOpt format)",
    "heldout_data": "held-out samples: the prompts the served τ was measured on (01), the held-out replay (02)",
    "launch": "the serving launch command (SGLang or vLLM), or the file holding it",
    "server_log": "the server's startup log (SGLang or vLLM)",
    "serving_dump": "what the server fed the draft (an SGLang tensor dump or an eagle3lib dump folder)",
}

# how a user gives each input a finding may ask for: the flag of `eagle3lib diagnose`, the key of a parameters file
# (top level, or the section of the notebook that takes it) and the words a "not checked" finding's `needs` uses
GIVE = {
    "launch": ("--launch", "launch", ("launch command", "serving launch", "the launch", "benchmark command")),
    "train_data": ("--train-data", "train_data", ("training data", "training samples", "train_data", "--data")),
    "heldout_data": ("--heldout-data", "heldout_data", ("held-out", "heldout_data", "new-prompt data")),
    "server_log": ("--server-log", "server_log", ("startup log", "server log", "server's log", "model runner")),
    "served_log": ("--served-log", "served_log_path", ("served accept length", "decode log", "served_log_path")),
    "served_traffic": ("--served-traffic", "served_traffic_path", ("served prompt", "served traffic",
                                                                   "served requests")),
    "serving_dump": ("--serving-dump", "serving_dump", ("serving dump", "serving_dump", "tensor dump")),
    "server_info": ("--server-info", "server_info_path", ("/server_info", "server_info")),
    "serving_engine": ("--serving-engine", "serving_engine", ("serving engine", "serving_engine")),
    "sglang_version": ("--sglang-version", "sglang_version", ("sglang version", "engine version",
                                                              "engine and version")),
    "target": ("--target", "target", ("the target", "target's")),
    "training_log": ("--training-log", "training_log_path", ("training log",)),
}


def how_to_give(name: str) -> str:
    """How a user gives input `name`: "--launch (YAML key launch)"."""
    flag_, key, _ = GIVE[name]
    return f"{flag_} (YAML key {key})"


def inputs_asked(text: str) -> tuple[str, ...]:
    """The inputs of `GIVE` a finding's `needs` text names, in `GIVE`'s order (none: it asks for something no flag
    gives, e.g. an A/B measurement)."""
    low = str(text).lower()
    return tuple(n for n, (_, _, words) in GIVE.items() if any(w.lower() in low for w in words))


# old notebook parameter / YAML key -> its name now (deprecated: they work for this release, then go)
OLD_PARAMS = {
    "draft_path": "draft",               # 00, 01, 02, 03
    "target_path": "target",             # 00, 01, 02, 03
    "sample_data": "train_data",         # 00
    "train_data_path": "train_data",     # 01, 02
    "training_data": "train_data",       # 03
    "heldout_data_path": "heldout_data",  # 02
    "served_data_path": "heldout_data",  # 01 (the prompts the served τ was measured on: the held-out samples)
    "launch_command": "launch",          # 01
    "server_log_path": "server_log",     # 01
}
# old command-line flag -> its flag now (python -m eagle3lib.diagnose, eagle3lib.replay, eagle3lib.hidden.recapture)
OLD_FLAGS = {"--data": "--train-data", "--heldout": "--heldout-data", "--log": "--server-log",
             "--dump": "--serving-dump"}


def deprecated(old: str, new: str, where: str = "") -> None:
    """Warn (FutureWarning, shown by default) that `old` is the deprecated name of `new`."""
    at = f" ({where})" if where else ""
    warnings.warn(f"'{old}'{at} is deprecated: it is now called '{new}'; the old name works for one more release",
                  FutureWarning, stacklevel=3)


def renamed(params: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """`params` with every old key under its new name, each warned; given both, the new name's value is kept."""
    out = {k: v for k, v in params.items() if k not in OLD_PARAMS}
    for old, value in params.items():
        new = OLD_PARAMS.get(old)
        if new is None:
            continue
        deprecated(old, new, where)
        at = f" ({where})" if where else ""
        if new in params:
            warnings.warn(f"both '{old}' and '{new}' given{at}: '{new}' is used", FutureWarning, stacklevel=2)
            continue
        if new in out:      # two old names of one input (sample_data and train_data_path): the first is kept
            warnings.warn(f"'{old}' and another old name of '{new}' given{at}: the first is used", FutureWarning,
                          stacklevel=2)
            continue
        out[new] = value
    return out


def adopt_old_names(namespace: MutableMapping[str, Any]) -> list[str]:
    """In a notebook run by papermill with an old parameter name: its value moves to the new name (warned), so
    the notebook reads only the new names. Returns the old names found."""
    found = [old for old in OLD_PARAMS if old in namespace]
    for old in found:
        new, value = OLD_PARAMS[old], namespace.pop(old)
        deprecated(old, new, "notebook parameter")
        if new in namespace and namespace[new] not in ("", None, [], ()) and namespace[new] != value:
            warnings.warn(f"both '{old}' and '{new}' given: '{new}' is used", FutureWarning, stacklevel=2)
        else:
            namespace[new] = value
    return found


class _OldFlag(argparse.Action):
    """An old flag: stores into the new flag's destination and warns."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        deprecated(option_string or self.option_strings[0], self.new, parser.prog)
        setattr(namespace, self.dest, values)


def add_old_flags(parser: argparse.ArgumentParser, flags: Mapping[str, str] = OLD_FLAGS) -> None:
    """Add to `parser` the old flags (`flags`: old -> new) of the new flags it has: hidden from --help, stored
    where the new one stores, typed as it is, each use warned. A required new flag is then satisfied by either:
    argparse's own check is replaced by one after parsing, with argparse's message naming the new flag."""
    by_flag = {s: a for a in parser._actions for s in a.option_strings}
    required = []
    for old, new in flags.items():
        action = by_flag.get(new)
        if action is None or old in by_flag:
            continue
        parser.add_argument(old, dest=action.dest, action=_OldFlag, new=new, type=action.type,
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if action.required:
            action.required, action.default = False, None
            required.append((new, action.dest))
    if not required:
        return
    parse_known_args = parser.parse_known_args

    def checked(args=None, namespace=None):
        ns, rest = parse_known_args(args, namespace)
        missing = [new for new, dest in required if getattr(ns, dest, None) is None]
        if missing:
            parser.error("the following arguments are required: " + ", ".join(missing))
        return ns, rest

    parser.parse_known_args = checked
