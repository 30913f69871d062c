"""Bad-input fuzz over every parameter a user gives (issue 28: no "healthy" without evidence).

Every input parameter of `python -m eagle3lib.diagnose` and of the notebooks' parameters cells gets each case of
`CASES`: a missing path, a folder where a file is expected (or a file where a folder is), an empty file, random
bytes, a file of another kind (a config where a log is expected, a log where a config is), and a pickle that would
run code (it would create a marker directory). For each: no healthy verdict, a problem naming that parameter, no
traceback (no error outside `eagle3lib.errors`, no part that broke), and the marker never created.

The CLI's parts run in process (`diagnose.parts.run(Inputs(...))`, on the shipped demo draft and target). The
notebooks' parameters go through the report runner's front door (`steps.given.check_params`, which names the
parameter) and then to the step function each notebook calls with them, which must refuse them with an eagle3lib
error or return without deciding a cause from them. One end-to-end report run refuses a bad parameter (exit 3).
docs/bad-inputs.md lists the table (`docs_section`, generated with the rest of that file).
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.replay.traffic_samples import served_traffic
from eagle3lib.diagnose.cli import main as cli_main
from eagle3lib.report import params as report_params
from eagle3lib.diagnose.parts import Inputs, flag, run
from eagle3lib.errors import ALL_ERRORS
from eagle3lib.steps import given as G
from tests.test_bad_inputs import Payload

ROOT = Path(__file__).resolve().parents[1]
DRAFT, TARGET = ROOT / "data/demo_artifacts/draft", ROOT / "data/demo_artifacts/target"
SAMPLES = ROOT / "data/samples"
LOG = SAMPLES / "sglang_seed_startup.log"
LAUNCH = ("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
          "--speculative-draft-model-path D --speculative-num-steps 3 --speculative-eagle-topk 1 "
          "--speculative-num-draft-tokens 4")

FOLDERS = {"draft": "config.json", "target": "config.json", "dump": "manifest.json"}   # kind -> its main file
FILES = {"startup_log": "server.log", "run_logs": "decode.log", "run_logs_list": "decode.log",
         "training_log": "training_log.jsonl", "server": "server_info.json", "server_info": "server_info.json",
         "launch": "launch.txt"}
CASES = ("missing", "wrong_shape", "empty", "random_bytes", "other_kind", "unsafe_pickle")
WHAT = {"missing": "a path that does not exist", "wrong_shape": "a folder where a file is expected, a file where "
        "a folder is", "empty": "an empty file (a folder's main file empty)", "random_bytes": "random bytes (a "
        "folder's main file of random bytes)", "other_kind": "a config where a log is expected, a log where a config "
        "is, a model folder as training data", "unsafe_pickle": "a pickle whose unpickling would run code"}


def hostile(path: Path, marker: Path) -> Path:
    """torch.save of a dict holding a Payload that would create `marker` if unpickled without restriction."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"w": torch.ones(2), "x": Payload(marker)}, path)
    return path


def noise(n: int = 4096, seed: int = 28) -> bytes:
    return random.Random(seed).randbytes(n)


def build(case: str, kind: str, tmp: Path, marker: Path):
    """The value a user would have typed for a parameter of `kind`, written under `tmp` for `case`."""
    tmp.mkdir(parents=True, exist_ok=True)
    listed = kind in ("run_logs_list",)
    main = FOLDERS.get(kind)
    name = FILES.get(kind, "input.txt")

    def out(p):
        return [str(p)] if listed else str(p)

    if case == "missing":
        return out(tmp / "no" / "such" / name)
    if case == "wrong_shape":
        if main or kind == "data":             # a file where a folder (or a dataset) is expected
            p = tmp / "notes.txt"
            p.write_text("not a folder\n")
            return out(p)
        d = tmp / "a_folder"
        d.mkdir()
        (d / "inside.txt").write_text("x\n")
        return out(d)
    if case in ("empty", "random_bytes"):
        content = b"" if case == "empty" else noise()
        if main:
            d = tmp / "folder"
            d.mkdir()
            (d / main).write_bytes(content)
            return out(d)
        if kind == "data":
            d = tmp / "data"
            d.mkdir()
            (d / "data_0.ckpt").write_bytes(content)
            return out(d if case == "random_bytes" else _empty_file(tmp / "train.jsonl"))
        p = tmp / name
        p.write_bytes(content)
        return out(p)
    if case == "other_kind":
        if main:                               # a folder whose config / manifest is a server log
            d = tmp / "folder"
            d.mkdir()
            shutil.copy(LOG, d / main)
            return out(d)
        if kind == "data":                     # a model folder given as training data
            d = tmp / "model"
            d.mkdir()
            shutil.copy(TARGET / "config.json", d / "config.json")
            save_file({"model.embed_tokens.weight": torch.zeros(4, 4)}, str(d / "model.safetensors"))
            return out(d)
        p = tmp / name                         # a config where a log / a command / a JSON answer is expected
        shutil.copy(DRAFT / "config.json", p)
        return out(p)
    if case == "unsafe_pickle":
        if kind in ("draft", "target"):        # a readable config beside a pickled checkpoint that would run code
            d = tmp / "model"
            d.mkdir()
            shutil.copy((DRAFT if kind == "draft" else TARGET) / "config.json", d / "config.json")
            hostile(d / "pytorch_model.bin", marker)
            return out(d)
        if kind == "dump":
            d = tmp / "dump"
            d.mkdir()
            (d / "manifest.json").write_text(json.dumps({"format": "eagle3lib-dump/1", "hidden_size": 4, "slots": None,
                                                        "files": ["req_00000.safetensors"]}))
            hostile(d / "req_00000.safetensors", marker)
            return out(d)
        if kind == "data":
            return out(hostile(tmp / "data" / "data_0.ckpt", marker).parent)
        return out(hostile(tmp / name, marker))
    raise AssertionError(case)


def _empty_file(p: Path) -> Path:
    p.write_bytes(b"")
    return p


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text[-2000:]


# ---------------------------------------------------------------- the CLI, in process

CLI_PARAMS = sorted(G.CLI)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("param", CLI_PARAMS)
def test_cli_names_every_unreadable_input(param, case, tmp_path, capsys):
    """`python -m eagle3lib.diagnose --<param> <bad>` (with the demo draft and target): a problem naming the flag,
    never healthy, exit code 3, no traceback, the payload never ran."""
    marker = tmp_path / "payload_ran"
    value = build(case, G.CLI[param], tmp_path / "in", marker)
    base = {"draft": str(DRAFT), "target": str(TARGET), "n": 2, "drift_samples": 0}
    r = run(Inputs(**{**base, param: value}))
    d = r.diagnosis
    named = [p for p in r.problems if p.param == flag(param)]
    assert named, f"{param}/{case}: no problem names {flag(param)}: {[str(p) for p in r.problems]}"
    assert named[0].error in {c.__name__ for c in ALL_ERRORS} | {"IsADirectoryError", "UnicodeDecodeError"}
    assert named[0].expected and named[0].what
    assert not any(p.failure for p in r.problems), [str(p) for p in r.problems]
    assert not d.healthy and not d.headline().startswith("no fault found")
    assert d.headline().startswith("could not read"), d.headline()
    assert r.exit_code == 3
    assert not marker.exists(), "the pickled payload ran"
    cap = capsys.readouterr()
    no_traceback(cap.out + cap.err)


@pytest.mark.parametrize("param", ["n", "num_steps", "drift_samples", "recorded_acc"])
def test_cli_number_flags_refuse_text_without_a_traceback(param, capsys):
    """argparse types the number flags: a path there is exit code 2, naming the flag."""
    with pytest.raises(SystemExit) as e:
        cli_main([flag(param), "/no/such/file", "--quiet"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag(param) in err
    no_traceback(err)


def test_cli_prints_the_problem_first_and_exits_3(tmp_path, capsys):
    """The table's first line names what could not be read; the last line's JSON lists it as a problem."""
    marker = tmp_path / "payload_ran"
    bad = build("unsafe_pickle", "draft", tmp_path / "in", marker)
    rc = cli_main(["--draft", bad, "--target", str(TARGET), "--quiet", "--json", str(tmp_path / "d.json")])
    lines = capsys.readouterr().out.strip().splitlines()
    rec = json.loads((tmp_path / "d.json").read_text())
    assert rc == 3 and rec["exit_code"] == 3 and not rec["healthy"]
    headline = " ".join(" ".join(lines).split("PROBLEMS")[0].split())     # wrapped to the terminal: one line again
    assert headline.startswith("could not read the draft (--draft") and "UnsafeFileError" in headline
    assert [(p["param"], p["error"]) for p in rec["problems"]] == [("--draft", "UnsafeFileError")]
    assert any(ln.startswith("PROBLEMS (1)") for ln in lines) and not marker.exists()


# ---------------------------------------------------------------- the notebooks' parameters

def notebook_params() -> list[tuple[str, str]]:
    """(notebook, parameter) for every parameter of every notebook's parameters cell that has a kind."""
    from eagle3lib.report import runner
    out = []
    for src in runner.discover_notebooks(ROOT / "notebooks"):
        for name in report_params.declared_parameters(report_params.read_source(src)):
            out.append((src.stem, name))
    return out


def test_every_notebook_parameter_has_a_kind():
    """A parameter added to a notebook must say what it is, so the runner can read it before the run."""
    missing = [(nb, p) for nb, p in notebook_params() if p not in G.notebook_kinds(nb)]
    assert not missing, f"add these to steps.given.NOTEBOOK: {missing}"


NB_PARAMS = notebook_params()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stem,param", NB_PARAMS, ids=[f"{s[:2]}-{p}" for s, p in NB_PARAMS])
def test_notebook_parameters_are_read_before_the_run(stem, param, case, tmp_path):
    """The runner's front door: one problem, naming the parameter and the notebook; the payload never ran."""
    marker = tmp_path / "payload_ran"
    kind = G.notebook_kinds(stem)[param]
    value = build(case, kind, tmp_path / "in", marker)
    found = G.check_params(stem, {param: value}, ROOT)
    assert [p.param for p in found] == [param], found
    assert found[0].notebooks == (stem,) and found[0].expected and not found[0].failure
    assert not marker.exists(), "the pickled payload ran"


def _setup():
    from eagle3lib.replay.run import load_setup
    return load_setup(str(DRAFT), str(TARGET))


def _case(**kw):
    from eagle3lib.steps.case import case_of
    from eagle3lib.steps.part import Inputs
    return case_of(Inputs(**{"draft": str(DRAFT), "target": str(TARGET), "train_data": "unused", **kw}))


def step_calls():
    """parameter -> the step call(s) the notebooks make with it (the other inputs: the shipped demo artifacts, as
    a user's own). Numbers, switches, device and dtype are typed settings: the front door refuses them."""
    from eagle3lib.demo.world import world_name
    from eagle3lib.replay.run import replay
    from eagle3lib.steps import checkpoint_audit as ca, diffing, discovery as di, sample_replay as sr
    from eagle3lib.steps import served_prediction as sp, throughput_runs as tr
    D, T = str(DRAFT), str(TARGET)

    def audit(d=D, t=T, s=""):
        return ca.artifact_checks(_case(draft=d, target=t, train_data=s))

    def disc(launch=LAUNCH, version="0.5.6", t=T, d=D, info="", log=""):
        case = _case(launch=launch, sglang_version=version, server_log=log, target=t, draft=d)
        found = di.discover(case.launch_command, case.sglang_version, t, d, server_info=info,
                            server_log=case.server_log)
        return di.serving_checks(case.artifacts, found)

    replayed = lambda v: replay(_setup(), v, n=1, progress=False)       # noqa: E731
    return {
        "draft": lambda v: (audit(d=v), disc(d=v)),
        "target": lambda v: (audit(t=v), disc(t=v)),
        "train_data": lambda v: (audit(s=v), sr.load_replay_setup(_case(train_data=v), recapture=False) and
                                 replayed(v), diffing.compared_sample(_case(train_data=v))),
        "heldout_data": replayed, "new_prompt_data_path": replayed,
        "launch": lambda v: disc(launch=v), "fixed_command": lambda v: disc(launch=v),
        "sglang_version": lambda v: disc(version=v),
        "serving_version": lambda v: sr.serving_layout(_case(), 8, engine="sglang", engine_version=v),
        "server_info_path": lambda v: disc(info=v), "server_url": lambda v: disc(info=v),
        "server_log": lambda v: disc(log=v),
        "served_log_path": lambda v: sp.served_runs([p for p in v.split(",") if p.strip()]),
        "served_traffic_path": lambda v: served_traffic(v, T, ("embed", "layer_in.2")),
        "serving_dump": lambda v: sr.serving_layout(_case(serving_dump=v), 8),
        "serving_layout": lambda v: sr.serving_layout(_case(), 8, typed=v),
        "serving_engine": lambda v: sr.serving_layout(_case(), 8, engine=v),
        "training_log_path": lambda v: _case(training_log=v).recorded,
        "demo_world": world_name,
        "log_paths": lambda v: tr.read_runs(v), "json_paths": lambda v: tr.read_runs(v),
    }


STEPS = step_calls()
STEP_PARAMS = sorted({p for _, p in NB_PARAMS if p in STEPS})


def alarms(result) -> set:
    """(cause, status, summary) of the confirmed / suspected findings among what a step call returned."""
    items = result if isinstance(result, (list, tuple)) else [result]
    flat = [f for x in items for f in (x if isinstance(x, (list, tuple)) else [x])]
    return {(f.cause, f.status, f.summary) for f in flat if getattr(f, "status", None) in ("confirmed", "suspected")}


BASELINE = {"draft": str(DRAFT), "target": str(TARGET)}   # else: the parameter left empty


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("param", STEP_PARAMS)
def test_the_step_a_notebook_calls_refuses_what_cannot_be_read(param, case, tmp_path):
    """Given the same bad value, the notebook's step function raises an eagle3lib error (the notebook stops on a
    documented error, never a Python traceback) or returns with no alarm the bad value added (against the same
    call on a readable draft / target, or with the parameter left empty); the payload never ran."""
    marker = tmp_path / "payload_ran"
    stem = next(s for s, p in NB_PARAMS if p == param)
    kind = G.notebook_kinds(stem)[param]
    value = build(case, kind, tmp_path / "in", marker)
    try:
        got = STEPS[param](value)
    except ALL_ERRORS:
        got = None
    if got is not None:
        try:
            base = alarms(STEPS[param](BASELINE.get(param, [] if kind == "run_logs_list" else "")))
        except ALL_ERRORS:
            base = set()
        added = alarms(got) - base
        assert not added, f"{param}/{case}: a cause decided from an unreadable input: {added}"
    assert not marker.exists(), "the pickled payload ran"


def test_step_table_covers_every_path_and_text_parameter():
    """Every notebook parameter that is not a typed setting has its step call here."""
    typed = {"count", "positive", "integer", "accuracy", "rate", "flag", "steps_list", "device", "dtype",
             "dtype_auto", "data_format"}
    left = sorted({p for s, p in NB_PARAMS if G.notebook_kinds(s)[p] not in typed} - set(STEPS))
    assert not left, left


# ---------------------------------------------------------------- the good values pass (the table is not a tautology)

def good_values(tmp: Path) -> dict[str, object]:
    """A readable value of each kind."""
    from eagle3lib.hidden.dumps import save_dump
    from eagle3lib.samples.sample import Sample
    from eagle3lib.samples.writers import write_seed_dataset
    s = Sample("s0", torch.arange(6), torch.ones(6, dtype=torch.int64), torch.randn(6, 3, 8))
    data = write_seed_dataset(tmp / "data", [s]).parent
    dump = save_dump(tmp / "dump", [torch.randn(6, 24)], [torch.arange(6)], slots=None, hidden_size=8,
                     source="test")
    (tmp / "launch.txt").write_text(LAUNCH + "\n")
    return {"draft": str(DRAFT), "target": str(TARGET), "data": str(data), "launch": str(tmp / "launch.txt"),
            "startup_log": str(LOG), "run_logs": str(SAMPLES / "sglang_seed_decode.log"),
            "run_logs_list": [str(SAMPLES / "seed_runs.jsonl")], "training_log": str(DRAFT / "training_log.jsonl"),
            "server": "http://127.0.0.1:30000", "url": "https://box:8000", "server_info":
            str(SAMPLES / "sglang_server_info_seed.json"), "dump": str(dump), "version": "0.5.6",
            "traffic": str(ROOT / "data" / "demo_vllm" / "healthy" / "served"),
            "layout": "embed,layer_in.2", "engine": "vllm", "data_format": "seed", "device": "cpu",
            "dtype": "bfloat16", "dtype_auto": "auto", "demo_world": "mla", "count": 0, "positive": 3,
            "integer": -5, "accuracy": 0.747, "rate": 90.0, "flag": False, "steps_list": [1, 2, 3]}


def test_a_readable_value_of_every_kind_is_no_problem(tmp_path):
    good = good_values(tmp_path)
    assert set(good) == set(G.KINDS)
    problems = [str(p) for k, v in good.items() if (p := G.check_input(k, v, k, ROOT)) is not None]
    assert not problems, problems


# ---------------------------------------------------------------- the docs table

def docs_section() -> str:
    """The fuzz table as docs/bad-inputs.md shows it (generated with the rest of that file)."""
    nb = sorted({p for _, p in NB_PARAMS})
    lines = ["", "## Every given input, fuzzed (`tests/test_bad_inputs_given.py`)", "",
             f"Each input parameter of `python -m eagle3lib.diagnose` ({len(CLI_PARAMS)}) and of the notebooks' "
             f"parameters cells ({len(nb)}) is given each of these {len(CASES)} cases. For each: no healthy verdict, "
             "a problem naming the parameter (the CLI table and its JSON, `index.json` `problems`, the top of "
             "`reports/index.html`), no traceback, and the pickled payload never runs. The CLI exits 3; the report "
             "runner does not run a notebook given such a parameter and exits 3.", "",
             "| case | what the parameter is given |", "|---|---|"]
    lines += [f"| {c} | {WHAT[c]} |" for c in CASES]
    lines += ["", "| parameter | kind | what reading it means |", "|---|---|---|"]
    rows = [(flag(p), G.CLI[p]) for p in CLI_PARAMS] + [(p, G.NOTEBOOK[p]) for p in nb]
    lines += [f"| `{p}` | {k} | {G.KINDS[k][1].replace('|', '/').replace('<', '&lt;')} |" for p, k in rows]
    lines += ["", "What the rows of issue 28 read now (each exits 3; none says \"no fault found\"):", "",
              "| given | the diagnosis opens with |", "|---|---|"]
    lines += [f"| {g} | {h} |" for g, h in ISSUE_ROWS]
    lines += ["", "A launch command read leniently (notebook 01's tables, `run_checks`) lists a value that does not "
              "parse in `LaunchArgs.unread`: no method, engine layer reading, SGLang resolution or `ndt_override` is "
              "decided from it. A diagnosis short of the draft, its training data and the launch command says how "
              "little was checked (\"11 of 34 causes checked: give --train-data and --launch to check the rest\"); a "
              "given input that decided none of what it decides says so too."]
    return "\n".join(lines) + "\n"


ISSUE_ROWS = (
    ("`--draft` a folder whose weights are a pickled `pytorch_model.bin` that would run code",
     "could not read the draft (--draft '…'): UnsafeFileError: …/pytorch_model.bin: refused"),
    ("`--draft /nonexistent`", "could not read the draft (--draft '/nonexistent'): MissingFileError"),
    ("`--server-log /etc/passwd`", "could not read the server log (--server-log '/etc/passwd'): LogParseError: no "
                                   "line an SGLang or vLLM server writes"),
    ("`--train-data` a model folder", "could not read the training data (--train-data '…'): DataError: no training "
                                      "data found"),
    ("`--launch \"vllm serve x --speculative-config {bad json\"`", "could not read the launch command (--launch "
     "'…'): ServingArgsError: flag --speculative-config: value is not a JSON object"),
)


# ---------------------------------------------------------------- one report run end to end

def test_a_report_run_refuses_a_bad_parameter_and_exits_3(tmp_path, capsys):
    """`make report` with a draft whose weights would run code: notebook 00 is not run, index.json's `problems`
    and the top of index.html name draft, the diagnosis is no "no fault found", exit code 3."""
    import yaml

    from eagle3lib.report import runner
    marker = tmp_path / "payload_ran"
    bad = build("unsafe_pickle", "draft", tmp_path / "in", marker)
    params = tmp_path / "bad.yaml"
    params.write_text(yaml.safe_dump({"00_checkpoint_audit": {"draft": bad, "target": str(TARGET)}}))
    out = tmp_path / "reports"
    rc = runner.main(["--notebooks", str(ROOT / "notebooks"), "--out", str(out), "--cwd", str(ROOT), "-f",
                      str(params), "--only", "00"])
    index = json.loads((out / "index.json").read_text())
    assert rc == 3
    (p,) = index["problems"]
    assert (p["param"], p["given"], p["error"], p["notebooks"]) == ("draft", bad, "UnsafeFileError",
                                                                     ["00_checkpoint_audit"])
    assert "weights_only=True" in p["message"] and p["expected"].startswith("a draft checkpoint folder")
    row = index["notebooks"][0]
    assert row["status"] == "skipped" and row["error"].startswith("not run: a given parameter could not be read")
    d = index["diagnosis"]
    assert not d["healthy"] and d["headline"].startswith("could not read the draft (draft ")
    page = (out / "index.html").read_text()
    assert page.index("Problems (1)") < page.index("<h2>Notebooks of this run</h2>") and "UnsafeFileError" in page
    assert "unreadable input: draft" in capsys.readouterr().out
    assert not marker.exists(), "the pickled payload ran"


def test_too_few_inputs_say_how_little_was_checked():
    """The draft and target alone read fine (exit 0), but that is no evidence for "no fault found"."""
    r = run(Inputs(draft=str(DRAFT), target=str(TARGET), n=2, drift_samples=0))
    d = r.diagnosis
    assert r.problems == () and r.exit_code == 0 and not d.healthy
    checked = sum(v.status != "not checked" for v in d.verdicts)
    assert d.headline() == f"{checked} of {len(d.verdicts)} causes checked: give --train-data and --launch to " \
                           "check the rest"


@pytest.mark.parametrize("row", range(5))
def test_the_rows_of_issue_28(row, tmp_path, capsys):
    """The issue's table, as a user ran it: each a problem naming its input first, exit 3, no "no fault found"."""
    marker = tmp_path / "payload_ran"
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n")
    args, flag_, prefix = [
        (["--draft", build("unsafe_pickle", "draft", tmp_path / "in", marker)], "--draft",
         "could not read the draft (--draft"),
        (["--draft", "/nonexistent"], "--draft", "could not read the draft (--draft '/nonexistent')"),
        (["--draft", str(DRAFT), "--server-log", str(passwd)], "--server-log",
         "could not read the server log (--server-log"),
        (["--draft", str(DRAFT), "--train-data", str(TARGET)], "--train-data",
         "could not read the training data (--train-data"),
        (["--draft", str(DRAFT), "--launch", "vllm serve x --speculative-config {bad json"], "--launch",
         "could not read the launch command (--launch"),
    ][row]
    rc = cli_main(args + ["--target", str(TARGET), "--quiet", "--n", "2", "--drift-samples", "0", "--json", "-"])
    out = capsys.readouterr().out
    rec = json.loads(out.strip().splitlines()[-1])          # --json -: the record, last, on stdout
    assert rc == 3 and out.startswith(prefix) and [p["param"] for p in rec["problems"]] == [flag_]
    assert "no fault found" not in out and not rec["healthy"] and not marker.exists()
    assert ISSUE_ROWS[row][1].split(" (")[0] in " ".join(out.split("\n\n")[0].split())     # the wrapped headline
