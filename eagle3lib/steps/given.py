"""Every input a user gives, read once before anything uses it. One that cannot be read is a `Problem` naming the
parameter, the path or text, the error class and message, and what was expected: never silence, never a guess.

`check_input(param, value, kind)` -> a Problem or None; `check_all({param: (value, kind)})` -> [Problem]. Reading is
cheap and never runs code: configs, safetensors headers, `.bin`/`.pt` only through `torch.load(weights_only=True)`
(`model.safefiles`), the first samples of a dataset, a dump's manifest and requests, a log's lines, a launch
command parsed strictly. `CLI` and `NOTEBOOK` give the kind of every parameter of `python -m eagle3lib.diagnose`
and of the notebooks' parameters cells (tests/test_bad_inputs_given.py keeps `NOTEBOOK` complete).

This builds on `checks.inputs`, the one reader of each artifact the checks read: a draft, a target, training
data and a launch command are read here by its functions (`read_draft_config`, `tensor_headers`,
`read_target_config`, `read_target_weights`, `read_data`, `read_launch`), never parsed a second way. What is added
here: the path resolved against the repository, a launch command's file read (`case.command_text`), the
checks on top (a folder, not a file; weights that hold a tensor; one readable sample among the first), and what
was raised turned into a Problem naming the parameter. The other kinds (logs, dumps, traffic, versions, numbers)
have their readers in the modules that use them.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..checks.inputs import (read_data, read_draft_config, read_launch, read_target_config, read_target_weights,
                             tensor_headers)
from ..demo.world import REPO_ROOT, world_name
from ..engines.versions import SERVING_ENGINES, parse_version
from ..errors import (ConfigError, DataError, Eagle3Error, LogParseError, MissingFileError, ParameterError,
                      ServingArgsError)
from ..hidden.dumps import load_dump
from ..replay.verdict import read_recorded_accuracy
from ..samples.readers import FORMATS
from ..serving.server_logs import read_startup_log
from ..serving.traffic import check_traffic
from ..sglang_engine.startup import read_server_info
from ..throughput.benchparse import parse_file
from ..layout import parse_layout
from .case import command_text

# kind -> (what it is, in a headline; what was expected)
KINDS = {
    "draft": ("the draft", "a draft checkpoint folder: config.json and its weights (safetensors, or .bin/.pt "
                           "that torch reads with weights_only=True)"),
    "target": ("the target", "the target model folder (config.json, and readable weights when it has any)"),
    "data": ("the training data", "training samples eagle3lib reads (SpecForge .ckpt[.gz], seed .jsonl, "
                                  "speculators hs_<i>.safetensors, ModelOpt .pt), as a file or a folder"),
    "launch": ("the launch command", "an SGLang or vLLM launch command, or the file holding it, whose flags and "
                                     "JSON parse"),
    "startup_log": ("the server log", "the SGLang or vLLM server's log: a text file with the engine's own lines"),
    "run_logs": ("the served runs", "decode logs or benchmark outputs with accept lengths (SGLang / vLLM logs, "
                                    "bench JSON, /metrics text, RunRecord .jsonl), comma-separated"),
    "run_logs_list": ("the served runs", "a list of decode logs or benchmark outputs with accept lengths"),
    "training_log": ("the training log", "the training log jsonl holding val_acc_step0 (or eval/acc_0)"),
    "server": ("the server", "a live server URL (http://host:port) or a saved GET /server_info JSON"),
    "url": ("the server", "a live server URL (http://host:port)"),
    "server_info": ("the /server_info", "a saved GET /server_info JSON"),
    "traffic": ("the served traffic", "a served folder with prompts.jsonl and responses.jsonl (as "
                                      "vllm_engine.serve saves them), or its responses.jsonl"),
    "dump": ("the serving dump", "an eagle3lib serving dump folder (manifest.json + req_<n>.safetensors)"),
    "version": ("the engine version", "an engine version such as 0.5.6"),
    "layout": ("the serving layout", "boundary names, e.g. embed,layer_in.2,layer_in.4"),
    "engine": ("the serving engine", "sglang or vllm"),
    "data_format": ("the data format", f"one of {', '.join(FORMATS)} (empty: detected)"),
    "device": ("the device", "a torch device this machine has (cpu; cuda on a GPU box)"),
    "dtype": ("the dtype", "float32, float16, bfloat16 or float64"),
    "dtype_auto": ("the dtype", "float32, float16, bfloat16, float64 or auto"),
    "demo_world": ("the demo world", "llama or mla (empty: llama)"),
    "count": ("a count", "an integer >= 0"),
    "positive": ("a count", "an integer >= 1"),
    "integer": ("a number", "an integer"),
    "accuracy": ("the recorded accuracy", "a number <= 1 (negative: not given)"),
    "rate": ("a rate", "a number >= 0"),
    "flag": ("a switch", "true or false"),
    "steps_list": ("the num_steps sweep", "a list of integers >= 1"),
}

# python -m eagle3lib.diagnose: Inputs field -> kind (the flag is --field-with-dashes)
CLI = {"draft": "draft", "target": "target", "train_data": "data", "heldout_data": "data", "launch": "launch",
       "sglang_version": "version", "server_log": "startup_log", "served_log": "run_logs", "served_traffic": "traffic",
       "server_url": "server", "serving_dump": "dump", "serving_layout": "layout", "serving_engine": "engine",
       "recorded_acc": "accuracy", "training_log": "training_log", "n": "positive", "num_steps": "positive", "drift_samples": "count",
       "device": "device", "dtype": "dtype_auto"}

# the notebooks' parameters cells: name -> kind (a notebook in NOTEBOOK_OVERRIDES reads one differently)
NOTEBOOK = {"draft": "draft", "target": "target", "train_data": "data", "heldout_data": "data",
            "new_prompt_data_path": "data", "served_traffic_path": "traffic", "launch": "launch",
            "fixed_command": "launch", "sglang_version": "version", "serving_version": "version",
            "server_info_path": "server_info", "server_url": "url", "server_log": "startup_log",
            "served_log_path": "run_logs",
            "serving_dump": "dump", "serving_layout": "layout", "serving_engine": "engine",
            "train_data_format": "data_format", "training_log_path": "training_log", "recorded_val_acc": "accuracy",
            "device": "device", "dtype": "dtype", "demo_world": "demo_world", "num_steps": "positive",
            "n_samples": "positive", "n_search": "positive", "recapture": "flag", "seed": "integer",
            "sample_index": "count", "dump_request": "count", "replay_samples": "positive", "drift_samples": "count",
            "log_paths": "run_logs_list", "json_paths": "run_logs_list", "run_demo_sweep": "flag",
            "sweep_num_steps": "steps_list", "sweep_repeats": "positive", "tree_replay_samples": "count",
            "baseline_tok_s": "rate"}
NOTEBOOK_OVERRIDES = {"02_training_sample_replay": {"dtype": "dtype_auto"}}


@dataclass(frozen=True)
class Problem:
    """A given input that could not be read (or, `failure`, a part of the workbook that broke on its own)."""
    param: str              # as the user spelled it: "--draft", "draft"; a part's name for a failure
    given: str              # the path or text given (cut)
    error: str              # the error class
    message: str
    expected: str           # what the parameter should be
    what: str = ""          # the input in words ("the draft"), for a headline
    failure: bool = False   # the workbook itself failed (not the input)
    notebooks: tuple[str, ...] = ()     # the notebooks given it (report runs)

    def __str__(self) -> str:
        given = f" {self.given!r}" if self.given else ""
        head = f"{self.param}{given}: {self.error}: {self.message}"
        return head + (f" (expected: {self.expected})" if self.expected else "")

    def headline(self) -> str:
        """One clause: "could not read the draft (--draft '/x'): UnsafeFileError: ..." (a failure: what broke)."""
        if self.failure:
            return f"the workbook failed in {self.param}: {self.error}: {_cut(self.message, 160)}"
        given = f" {_cut(self.given, 60)!r}" if self.given else ""
        return f"could not read {self.what or self.param} ({self.param}{given}): {self.error}: " \
               f"{_cut(self.message, 160)}"

    def to_dict(self) -> dict:
        return {**asdict(self), "notebooks": list(self.notebooks)}

    @classmethod
    def from_dict(cls, d: dict) -> "Problem":
        keys = cls.__dataclass_fields__
        return cls(**{k: (tuple(v) if k == "notebooks" else v) for k, v in d.items() if k in keys})


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def given(value) -> bool:
    """Whether a parameter value was given (not "", None or an empty list)."""
    return not (value is None or (isinstance(value, str) and not value.strip()) or
                (isinstance(value, (list, tuple)) and not value))


def resolve_path(value: str, base: Path | None = None) -> Path:
    """A path as given when it exists or is absolute, else relative to `base` (the repository root)."""
    p = Path(str(value).strip())
    return p if p.is_absolute() or p.exists() else Path(base or REPO_ROOT) / p


def check_input(param: str, value, kind: str, base: Path | None = None) -> Problem | None:
    """None when `value` reads as `kind`, else the Problem (never raises; never runs code from a file)."""
    if kind not in KINDS:
        raise ParameterError(f"given.check_input({param!r})", "unknown kind of input", expected=sorted(KINDS),
                             found=kind)
    if not given(value) and kind not in ("count", "positive", "integer", "accuracy", "rate", "flag"):
        return None
    try:
        READERS[kind](value, Path(base or REPO_ROOT))
    except Exception as e:        # noqa: BLE001 - an input eagle3lib cannot read, whatever broke on it
        what, expected = KINDS[kind]
        message = str(e) if isinstance(e, Eagle3Error) else (str(e) or repr(e))
        return Problem(param, _cut(value if isinstance(value, str) else repr(value), 200), type(e).__name__,
                       _cut(message, 600), expected, what)
    return None


def check_all(inputs: dict[str, tuple[object, str]], base: Path | None = None) -> list[Problem]:
    """The problems of `{param: (value, kind)}`, in order."""
    return [p for name, (value, kind) in inputs.items() if (p := check_input(name, value, kind, base)) is not None]


def notebook_kinds(stem: str) -> dict[str, str]:
    """name -> kind of the parameters of notebook `stem`."""
    return {**NOTEBOOK, **NOTEBOOK_OVERRIDES.get(stem, {})}


def check_params(stem: str, params: dict, base: Path | None = None) -> list[Problem]:
    """The problems of the parameters given to one notebook (names without a kind are left to the notebook)."""
    kinds = notebook_kinds(stem)
    found = check_all({k: (v, kinds[k]) for k, v in params.items() if k in kinds}, base)
    return [Problem(**{**p.to_dict(), "notebooks": (stem,)}) for p in found]


# ---------------------------------------------------------------- readers: raise on what cannot be read

def _want_dir(p: Path, err, what: str) -> None:
    if not p.exists():
        raise MissingFileError(str(p), f"{what} not found", expected="a folder", found="no such path")
    if not p.is_dir():
        raise err(str(p), f"is a file, not {what}", expected="a folder", found=f"a file of {p.stat().st_size} bytes")


def _want_file(p: Path, err, what: str) -> None:
    if not p.exists():
        raise MissingFileError(str(p), f"{what} not found", expected="a file", found="no such path")
    if not p.is_file():
        raise err(str(p), f"is a folder, not {what}", expected="a file",
                  found=f"a folder of {sum(1 for _ in p.iterdir())} entries")
    if p.stat().st_size == 0:
        raise err(str(p), f"is empty, not {what}", expected="a file with content", found="0 bytes")


def _draft(value, base):
    p = resolve_path(value, base)
    _want_dir(p, ConfigError, "a draft checkpoint folder")
    read_draft_config(p)
    if not tensor_headers(p):
        raise ConfigError(str(p), "its weight files hold no tensor", expected="the draft's weights", found="none")


def _target(value, base):
    p = resolve_path(value, base)
    _want_dir(p, ConfigError, "a target model folder")
    read_target_config(p)
    read_target_weights(p)          # a config-only target folder reads: the steps that need weights say so


def _data(value, base):
    p = resolve_path(value, base)
    if p.is_file() and p.stat().st_size == 0:
        raise DataError(str(p), "is empty, not training data", expected="a file with samples", found="0 bytes")
    ds = read_data(p, on_error="raise")
    if len(ds) == 0:
        raise DataError(str(p), "holds no sample", expected="at least one training sample", found="0 samples")
    first = None
    for i in range(min(len(ds), 4)):       # one readable sample among the first few: the data reads
        try:
            ds[i]
            return
        except Eagle3Error as e:
            first = first or e
    raise first


def _launch(value, base):
    text = str(value).strip()
    if text and not re.search(r"\s", text) and ("/" in text or text.endswith((".txt", ".sh", ".cmd"))):
        p = resolve_path(text, base)            # a path: the file that holds the command
        if p.is_dir():
            raise ServingArgsError(str(p), "is a folder, not a launch command or its file",
                                   expected="a launch command or a text file holding one", found="a folder")
        if not p.is_file():
            raise MissingFileError(str(p), "launch command file not found", expected="a launch command or a "
                                   "text file holding one", found="no such file")
        if p.stat().st_size == 0:
            raise ServingArgsError(str(p), "the launch command file is empty", expected="one launch command",
                                   found="0 bytes")
        text = str(p)
    read_launch(command_text(text), strict=True)


def _server_lines(p: Path) -> bool:
    """Whether a log has a line a server of an engine the library knows writes (its startup lines, as its home reads
    them, or decode statistics)."""
    if read_startup_log(p).own_lines:
        return True
    try:
        return bool(parse_file(p).records)
    except Eagle3Error:
        return False


def _startup_log(value, base):
    p = resolve_path(value, base)
    _want_file(p, LogParseError, "a server log")
    if not _server_lines(p):
        raise LogParseError(str(p), "no line an SGLang or vLLM server writes", expected="the server's own lines "
                            "(server_args=ServerArgs(...), vLLM start-up lines, Decode batch / SpecDecoding "
                            "metrics)", found="none", cause="another file than the server's log")


def _run_file(p: Path):
    """A file with served runs, or a server's log without any (a server that died at start: that is evidence)."""
    _want_file(p, LogParseError, "a log or benchmark file")
    try:
        if parse_file(p).records:
            return
    except LogParseError:
        pass
    if not _server_lines(p):
        raise LogParseError(str(p), "no served run and no server line in it", expected="decode statistics, "
                            "benchmark results or /metrics text", found="none of these",
                            cause="another file than a decode log, a benchmark output or a server log")


def _run_logs(value, base):
    paths = [x.strip() for x in str(value).split(",") if x.strip()]
    if not paths:
        raise LogParseError(repr(value), "names no file", expected="comma-separated paths", found="nothing")
    for x in paths:
        _run_file(resolve_path(x, base))


def _run_logs_list(value, base):
    if not isinstance(value, (list, tuple)):
        raise ParameterError(repr(value)[:80], "not a list", expected="a list of paths",
                             found=type(value).__name__)
    for x in value:
        if not isinstance(x, str):
            raise ParameterError(repr(x)[:80], "not a path", expected="a string", found=type(x).__name__)
        _run_file(resolve_path(x, base))


def _training_log(value, base):
    p = resolve_path(value, base)
    _want_file(p, DataError, "a training log")
    read_recorded_accuracy(p)


def _url(value, base):
    u = urlparse(str(value).strip())
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ServingArgsError(repr(value)[:120], "not a server URL", expected="http://host:port",
                               found=f"scheme {u.scheme!r}" if u.scheme else "no scheme")


def _server_info(value, base):
    p = resolve_path(value, base)
    _want_file(p, ServingArgsError, "a saved /server_info")
    info = read_server_info(str(p))
    if info.version is None and "model_path" not in info.settings:     # another JSON (a model config, a result)
        raise ServingArgsError(str(p), "not a /server_info answer", expected="ServerArgs fields (model_path, "
                               "speculative_*) and 'version'", found=f"keys {sorted(info.settings)[:6]}")


def _server(value, base):
    (_url if "://" in str(value) else _server_info)(value, base)


def _dump(value, base):
    p = resolve_path(value, base)
    _want_dir(p, DataError, "a serving dump folder")
    load_dump(p)


def _traffic(value, base):
    check_traffic(resolve_path(value, base))


def _version(value, base):
    errors = []
    for engine in SERVING_ENGINES:
        try:
            parse_version(str(value), engine)
            return
        except ServingArgsError as e:
            errors.append(e)
    raise errors[0]


def _one_of(choices, err):
    def read(value, base):
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise err(repr(value)[:80], "not a known value", expected=" / ".join(choices), found=repr(value)[:80])
    return read


def _device(value, base):
    try:
        dev = torch.device(str(value).strip())
    except (RuntimeError, TypeError, ValueError) as e:
        raise ParameterError(f"device {value!r}"[:120], "not a torch device", expected="cpu, cuda, cuda:0",
                             found=str(e)[:120]) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device {value!r}", "this machine has no CUDA device", expected="cpu here",
                             found="torch.cuda.is_available() is False")


def _number(low=None, high=None, integer=True):
    def read(value, base):
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or (low is not None and value < low) or \
                (high is not None and value > high) or value != value:
            raise ParameterError(repr(value)[:80], "not a usable number",
                                 expected=("an integer" if integer else "a number") +
                                 (f" >= {low}" if low is not None else "") + (f" <= {high}" if high is not None
                                                                             else ""),
                                 found=repr(value)[:80])
    return read


def _flag(value, base):
    if not isinstance(value, bool):
        raise ParameterError(repr(value)[:80], "not a switch", expected="true or false", found=repr(value)[:80])


def _steps_list(value, base):
    if not isinstance(value, (list, tuple)) or not value:
        raise ParameterError(repr(value)[:80], "not a list of num_steps", expected="a list such as [1, 2, 3]",
                             found=repr(value)[:80])
    for x in value:
        _number(1)(x, base)


READERS = {
    "draft": _draft, "target": _target, "data": _data, "launch": _launch, "startup_log": _startup_log,
    "run_logs": _run_logs, "run_logs_list": _run_logs_list, "training_log": _training_log, "server": _server,
    "url": _url, "server_info": _server_info, "dump": _dump, "traffic": _traffic, "version": _version,
    "layout": lambda v, b: parse_layout(str(v)), "engine": _one_of(SERVING_ENGINES, ServingArgsError),
    "data_format": _one_of(FORMATS, DataError), "device": _device,
    "dtype": _one_of(("float32", "float16", "bfloat16", "float64"), ParameterError),
    "dtype_auto": _one_of(("float32", "float16", "bfloat16", "float64", "auto"), ParameterError),
    "demo_world": lambda v, b: world_name(str(v)), "count": _number(0), "positive": _number(1),
    "integer": _number(), "accuracy": _number(high=1, integer=False), "rate": _number(0, integer=False),
    "flag": _flag, "steps_list": _steps_list,
}
