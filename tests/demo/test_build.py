"""Shipped demo artifacts: a restore gives the same world as the build that exported them."""
from __future__ import annotations

import json

import pytest
import torch

from eagle3demo.build import export_artifacts
from eagle3lib.demo import world as demo
from eagle3lib.demo.shipped import ARTIFACTS, DemoPaths, artifacts_current
from eagle3lib.demo.restore import restore_world
from eagle3lib.samples.readers import open_dataset

pytestmark = pytest.mark.slow


def test_shipped_artifacts_are_current():
    """The repo ships the trained target and draft of the current builder version (about 10 MB)."""
    assert artifacts_current(), "run: python -m eagle3demo --force --from-scratch --export"
    size = sum(f.stat().st_size for f in ARTIFACTS.rglob("*") if f.is_file())
    assert size < 16e6


def test_restore_is_deterministic(tmp_path):
    """Two restores write identical training data; world.json records the restore and keeps the build's facts."""
    a = restore_world(tmp_path / "a", progress=False)
    restore_world(tmp_path / "b", progress=False)
    da, db = open_dataset(tmp_path / "a" / "data" / "seed"), open_dataset(tmp_path / "b" / "data" / "seed")
    assert len(da) == len(db) == a["sizes"]["draft_train"]
    for i in (0, len(da) - 1):
        assert torch.equal(da[i].aux, db[i].aux) and torch.equal(da[i].input_ids, db[i].input_ids)
    assert a["restored"]["seconds"] > 0 and a["draft"]["recorded_val_acc_step0"] >= 0.6
    shipped = json.loads((ARTIFACTS / "world.json").read_text())
    assert a["draft"] == shipped["draft"]


def test_export_round_trip(tmp_path):
    """export_artifacts copies exactly the trained models and world.json."""
    world = demo.ensure_world()
    out = export_artifacts(world.root, tmp_path / "art")
    assert sorted(p.name for p in out.iterdir()) == ["draft", "target", "world.json"]
    assert (out / "draft" / "model.safetensors").read_bytes() == (world.draft / "model.safetensors").read_bytes()


def test_shipped_mla_artifacts_are_current_and_the_seed_story_holds_there(tmp_path):
    """The MLA world (DeepSeek-V3 target with MLA + MoE, an MLA EAGLE-3 draft) is shipped for this builder, small,
    restores, and tells the seed's story: its draft replays well in the trained layout and badly as served."""
    from eagle3lib.demo.shipped import artifacts_dir
    from eagle3lib.demo.restore import SERVING_LAYOUT
    from eagle3lib.replay.run import load_setup, replay
    from eagle3lib.layout import ZERO

    assert artifacts_current("mla"), "run: python -m eagle3demo --world mla --force --from-scratch --export"
    art = artifacts_dir("mla")
    # DeepSeek-V3's latent (512 + 64) makes the target ~4M parameters (16 MB fp32); two drafts of ~1.5 MB each
    assert sum(f.stat().st_size for f in art.rglob("*") if f.is_file()) < 24e6
    assert (art / "draft_retrained" / "model.safetensors").is_file()
    world = restore_world(tmp_path / "mla", progress=False, kind="mla")
    assert world["kind"] == "mla" and world["target"]["architecture"] == "DeepseekV3ForCausalLM"
    p = DemoPaths(tmp_path / "mla", "mla")
    setup = load_setup(p.draft, p.target)
    assert setup.cfg.mla is not None and setup.cfg.architecture == "Eagle3DeepseekV2ForCausalLM"
    trained = replay(setup, p.seed_data, n=8, progress=False)
    served = replay(setup, p.seed_data, layout=(*SERVING_LAYOUT, ZERO), n=8, fill="zeros", progress=False)
    assert trained.acc0 > 0.8 and served.acc0 < trained.acc0 - 0.2, (trained.acc0, served.acc0)


def test_the_installed_library_restores_the_world_in_a_fresh_folder_without_the_builder(tmp_path):
    """`python -m eagle3lib.demo` run outside the checkout (where eagle3demo cannot be imported) restores the world
    into a fresh $EAGLE3LIB_DEMO_DIR from the shipped artifacts, says so, and loads no builder module."""
    import os
    import subprocess
    import sys

    root = tmp_path / "world"
    code = ("import sys\nfrom eagle3lib.demo.__main__ import main\nrc = main([])\n"
            "builder = ('train_target', 'train_draft', 'build', 'faults', 'deployments')\n"
            "print('builder modules:', sorted(m for m in sys.modules if m.startswith('eagle3') and "
            "(m.startswith('eagle3demo') or m.split('.')[-1] in builder)))\n"
            "raise SystemExit(rc)")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "EAGLE3LIB_DEMO_DIR": str(root),
           "EAGLE3LIB_DEMO_WORLD": "llama"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"llama demo world at {root}: restored from" in p.stdout and "builder modules: []" in p.stdout, p.stdout
    world = json.loads((root / "world.json").read_text())
    assert world["restored"]["from"].startswith("data/demo_artifacts") and artifacts_current()
    assert len(open_dataset(DemoPaths(root).seed_data)) == world["sizes"]["draft_train"]
    assert sorted(x.name for x in tmp_path.iterdir()) == [".world.lock", "world"]     # no temp folder left
