"""The recipe for a new serving engine (docs/architecture.md), tested: its row in the one list of engines
(`engines.versions.ENGINES`) and its home folder, ``eagle3lib/<name>_engine/`` (the folder's map and ``home.py``):
three library files, nothing else edited. The package is copied, the made-up engine "toy" added there, and from the
copy its launch command and its decode log are read, and `diagnose` reads both: the served τ and K from its log,
its launch read as a toy command (and, since the engine facts have no row for toy, every check that judges a launch
says "not checked" and why, never a verdict borrowed from another engine)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3lib.demo import world as demo
from tests.checks.test_recipes import PACKAGE, edited

pytestmark = pytest.mark.slow     # a subprocess diagnosis of the demo world's files

MAP = '''"""ToyServe's home (the recipe test's made-up engine).

- `home`  `HOME`: its launch command (``toyserve MODEL --draft D --draft-tokens K``) and its decode log.
"""
'''
HOME = '''"""ToyServe's home: ``toyserve MODEL --draft D --draft-tokens K``; its decode log's lines
``toy decode: accepted A of D drafted in R rounds, T tok/s``."""
from __future__ import annotations

import re

from ..engine_kit.home import EngineHome
from ..engine_kit.launch_reading import flag_table, int_or_none
from ..engine_kit.log_scan import LogScan, ParseResult

FLAGS = flag_table({"draft": ("draft", "str"), "draft-tokens": ("draft_tokens", "int"), "port": ("port", "int")})
_LINE = re.compile(r"toy decode: accepted (\\d+) of (\\d+) drafted in (\\d+) rounds, ([\\d.]+) tok/s")


def entrypoint(tokens):
    return ("toyserve", tokens[1:]) if tokens[:1] == ["toyserve"] else None


def launch_fields(flags, entrypoint, positionals, strict, notes, unread):
    model, rest = (positionals[0], positionals[1:]) if positionals else (None, positionals)
    return {"model_path": model, "draft_path": flags.get("draft"), "algorithm": "eagle3",
            "num_speculative_tokens": int_or_none(flags.get("draft_tokens"))}, rest


def parse_toy_log(source, *, text=None, series="", hardware="", engine_version="", **_) -> ParseResult:
    scan = LogScan(str(source), text)
    used = 0
    for n, line, when in scan.clean_lines():
        m = _LINE.search(line)
        if m:
            scan.segs[-1].items.append((n, when, [float(x) for x in m.groups()]))
            used += 1

    def record(seg, i):
        acc, drafted, rounds = (sum(d[j] for _, _, d in seg.items) for j in range(3))
        return scan.make(i, seg, engine="toy", accept_length=1 + acc / rounds, tok_s=seg.items[-1][2][3],
                         num_steps=round(drafted / rounds), series=series or "toy", label=f"run {i}")
    return scan.build_result(lambda seg: seg.items, record, used, "no toy decode lines",
                             expected="'toy decode: accepted A of D drafted in R rounds, T tok/s'", cause="not a toy log")


HOME = EngineHome("toy", FLAGS, entrypoint, launch_fields, parse_toy_log, r"toy decode:", "toyserve MODEL ...")
'''
ROW = ('''           "vllm": EngineVersions("vLLM", VLLM_HEAD, "e.g. 0.32.0")}''',
       '''           "vllm": EngineVersions("vLLM", VLLM_HEAD, "e.g. 0.32.0"),
           "toy": EngineVersions("ToyServe", "9999", "e.g. 1.0")}''')
LAUNCH = "toyserve T --draft D --draft-tokens 4"
LOG = ("[2026-12-01 10:00:00] toy decode: accepted 120 of 200 drafted in 50 rounds, 42.0 tok/s\n"
       "[2026-12-01 10:00:10] toy decode: accepted 130 of 200 drafted in 50 rounds, 43.0 tok/s\n")
READ = """
import json, sys
import eagle3lib
from eagle3lib.errors import ServingArgsError
from eagle3lib.serving.launch import parse_launch
from eagle3lib.throughput.benchparse import parse_file
try:
    la = parse_launch(sys.argv[1])
    launch = [la.engine, la.model_path, la.draft_path, la.num_speculative_tokens, sorted(la.flags)]
except ServingArgsError as e:
    launch = str(e)
rec = parse_file(sys.argv[2]).records
print(json.dumps({"package": eagle3lib.__file__, "launch": launch,
                  "log": [[r.engine, r.accept_length, r.num_steps, r.tok_s] for r in rec]}))
"""


def _run(args, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env={**__import__("os").environ, "PYTHONPATH": str(pythonpath)},
                          capture_output=True, text=True, timeout=900, cwd=cwd)


def test_a_new_engine_is_its_row_and_its_home(tmp_path):
    w = demo.ensure_world(progress=False)
    log = tmp_path / "toy.log"
    log.write_text(LOG)
    copy = tmp_path / "pkg" / "eagle3lib"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "toy_engine").mkdir()
    (copy / "toy_engine" / "__init__.py").write_text(MAP)
    (copy / "toy_engine" / "home.py").write_text(HOME)
    versions = copy / "engines" / "versions.py"
    assert ROW[0] in versions.read_text()
    versions.write_text(versions.read_text().replace(*ROW))
    assert edited(copy) == ["engines/versions.py", "toy_engine/__init__.py", "toy_engine/home.py"]

    # the unmodified package refuses the command (and reads the log as nothing it knows); the copy reads both
    before = _run(["-c", READ, LAUNCH, str(log)], tmp_path, PACKAGE.parent)
    assert before.returncode != 0 and "LogParseError" in before.stderr      # no engine's mark: SGLang's reader
    p = _run(["-c", READ, LAUNCH, str(log)], tmp_path, copy.parent)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert Path(out["package"]).resolve().is_relative_to(copy)
    assert out["launch"] == ["toy", "T", "D", 4, ["draft", "draft_tokens"]]
    assert out["log"] == [["toy", pytest.approx(1 + 250 / 100), 4, 43.0]]

    # diagnose, from the copy: its launch and its log read; what no fact describes is "not checked", named
    d = _run(["-m", "eagle3lib.diagnose", "--draft", str(w.draft), "--target", str(w.target), "--train-data",
              str(w.seed_data), "--launch", LAUNCH, "--served-log", str(log), "--n", "2", "--drift-samples", "1",
              "--quiet", "--json", "-"], tmp_path, copy.parent)
    assert d.returncode == 0, d.stdout[-3000:] + d.stderr[-3000:]
    rec = json.loads(d.stdout.strip().splitlines()[-1])
    numbers = rec["decision"]["numbers"]
    assert numbers["served_tau"] == pytest.approx(3.5) and numbers["k"] == 4
    served = next(r for r in rec["decision"]["rows"] if r["what"] == "served τ")
    assert served["note"].startswith(str(log))
    verdicts = {v["cause"]: v for v in rec["verdicts"]}
    method = verdicts["wrong_method"]
    assert method["status"] == "not checked" and "read as a toy command" in json.dumps(method)
    assert not [c for c, v in verdicts.items() if v["status"] in ("confirmed", "suspected")]
