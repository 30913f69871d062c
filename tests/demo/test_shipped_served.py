"""eagle3lib.demo.shipped_served: the shipped served deployments read by the library (no engine needed), and a stale or
missing one refused with the builder's command that serves it again."""
from __future__ import annotations

import shutil

import pytest

from eagle3lib.demo import shipped_served
from eagle3lib.errors import DataError


def test_the_shipped_sglang_deployment_reads_without_sglang_and_its_paths_lie_here():
    """data/demo_sglang/seed is current for the shipped world: its record comes back with paths in this checkout."""
    rec = shipped_served.shipped("sglang", "seed")
    root = shipped_served.served_root("sglang")
    assert rec["ok"] and rec["dir"] == str(root / "seed") and rec["dump"].startswith(str(root))
    assert rec["effective"]["speculative_num_draft_tokens"] == 2


def test_a_deployment_whose_draft_changed_is_refused_naming_the_builder_command(tmp_path, monkeypatch):
    """A copied folder whose draft no longer is the one served, and a missing one: DataError naming the record,
    what was expected and found, and `python -m eagle3demo --sglang NAME`."""
    shutil.copytree(shipped_served.served_root("sglang") / "healthy", tmp_path / "healthy")
    monkeypatch.setenv(shipped_served.ROOT_ENVS["sglang"], str(tmp_path))
    assert shipped_served.shipped("sglang", "healthy")["dir"] == str(tmp_path / "healthy")      # a copy still reads
    (tmp_path / "healthy" / "draft" / "config.json").write_text("{}")
    with pytest.raises(DataError) as e:
        shipped_served.shipped("sglang", "healthy")
    msg = str(e.value)
    assert "deployment.json" in msg and "another draft" in msg and "python -m eagle3demo --sglang healthy" in msg
    with pytest.raises(DataError, match="no deployment.json"):
        shipped_served.shipped("sglang", "seed")
