"""The recipe for a new check (docs/architecture.md), tested: its catalogue row in causes.py and its function, marked
``@contract``, in a check module: two library files, nothing else edited, and a diagnosis runs it and reports its
cause. The package is copied, the two files edited there, and the diagnosis run from the copy."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import eagle3lib
from eagle3lib.demo import world as demo

pytestmark = pytest.mark.slow     # a subprocess diagnosis of the demo world's files

PACKAGE = Path(eagle3lib.__file__).resolve().parent
ROW = '''    ("made_up_cause", "a made-up cause the recipe test adds", "none: the test's own", "tests/checks/test_recipes.py"),
'''
CHECK = '''

@contract("made_up", ("made_up_cause",), parts=("artifacts",))
def judge_made_up(art: Artifacts, opts: Options) -> list[Finding]:
    """The recipe test's check: suspects its made-up cause whenever a draft is given."""
    need = art.missing("draft")
    if need:
        return [not_checked("made_up_cause", "checks.vocab", need)]
    return [Finding("made_up_cause", "suspected", "the made-up check saw a draft", {"engine": opts.engine},
                    "checks.vocab")]
'''
RUN = """
import json, sys
import eagle3lib
from eagle3lib.diagnose.parts import Inputs, run
r = run(Inputs(draft=sys.argv[1], target=sys.argv[2], train_data=sys.argv[3], launch=sys.argv[4], n=1,
               drift_samples=1))
made = [f for part in r.findings.values() for f in part if f.cause == "made_up_cause"]
print(json.dumps({"package": eagle3lib.__file__, "made": [[f.status, f.evidence] for f in made],
                  "verdicts": {v.cause: v.status for v in r.diagnosis.verdicts}}))
"""
LAUNCH = ("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
          "--speculative-draft-model-path D --speculative-num-steps 3 --speculative-eagle-topk 1 "
          "--speculative-num-draft-tokens 4")


def edited(copy: Path) -> list[str]:
    """The files of `copy` that differ from the package or are new (bytecode aside)."""
    out = []
    for path in sorted(copy.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            orig = PACKAGE / path.relative_to(copy)
            if not orig.exists() or not filecmp.cmp(orig, path, shallow=False):
                out.append(str(path.relative_to(copy)))
    return out


def test_a_new_check_is_its_catalogue_row_and_its_function(tmp_path):
    w = demo.ensure_world(progress=False)
    copy = tmp_path / "eagle3lib"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    causes = copy / "causes.py"
    causes.write_text(causes.read_text().replace("_ROWS_TRAINED = (\n", "_ROWS_TRAINED = (\n" + ROW, 1))
    vocab = copy / "checks" / "vocab.py"
    vocab.write_text(vocab.read_text() + CHECK)
    assert edited(copy) == ["causes.py", "checks/vocab.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", RUN, str(w.draft), str(w.target), str(w.seed_data), LAUNCH],
                       env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert Path(out["package"]).resolve().is_relative_to(copy)
    # run once, in the diagnosis, with the engine the launch names; ranked like any other cause
    assert out["made"] == [["suspected", {"engine": "sglang"}]]
    assert out["verdicts"]["made_up_cause"] == "suspected"
