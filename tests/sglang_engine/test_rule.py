"""The SGLang rule table (sglang_engine/rules_table.py: how SGLang rewrites or refuses the speculative settings) against
the running SGLang's own resolution of the same launches: tests/sglang_engine/test_introspect.py's real-SGLang
tests (the seed's ndt 16 -> 2 and a grid of knobs x page size x adaptive / mixed / dump flags), run by the SGLang
venv's own python, where SGLang is importable (the project venv never imports it). Skipped with the reason where
SGLang cannot run."""
from __future__ import annotations

import subprocess

import pytest

from eagle3lib.sglang_engine.env import REPO_ROOT, side_env, sglang_python, unavailable_reason

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "SGLang runs here")]


def test_the_rule_table_agrees_with_the_running_sglang_s_own_resolution():
    env = side_env({"PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1"})
    proc = subprocess.run([str(sglang_python()), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           "tests/sglang_engine/test_introspect.py", "-k", "real_sglang"],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=900)
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    assert "2 passed" in tail and "skipped" not in tail, tail          # asked, not skipped: SGLang is importable there
