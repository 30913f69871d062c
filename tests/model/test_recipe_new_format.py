"""The recipe for a new checkpoint format (docs/architecture.md, recipe (c)), tested on a copy of the package: one
`Format` row in model/formats.py and its key renames in model/checkpoint.py's `TO_CANONICAL`, two library files and
nothing else. A made-up tool "newtool" names the decoder layer `draft_model.layer.*`; from the copy, save_draft
writes that format, detect_format names it and load_draft reads it back to the same weights."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import eagle3lib

PACKAGE = Path(eagle3lib.__file__).resolve().parent
ROW_AFTER = '''           no_save="SGLang writes no draft checkpoint: it reads SpecForge's (save as specforge)"),
'''
ROW = '''    Format("newtool", "a made-up tool (tests/model/test_recipe_new_format.py)", _any_prefix("draft_model.layer."),
           ("draft_model.layer.mlp.up_proj.weight",), ((r"^midlayer\\.", "draft_model.layer."),), (), "specforge",
           "specforge"),
'''
RENAME_AFTER = '''TO_CANONICAL: tuple[tuple[str, str, str], ...] = (
'''
RENAME = '''    (r"^draft_model\\.layer\\.", "midlayer.", "newtool"),
'''
RUN = """
import json, sys
import torch
from safetensors import safe_open
import eagle3lib
from eagle3lib.model.checkpoint import load_draft, save_draft
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.model.formats import detect_format
torch.manual_seed(0)
cfg = DraftConfig.from_dict(json.loads(sys.argv[1]))
d = Eagle3Draft(cfg)
path = save_draft(d, cfg, sys.argv[2], format="newtool", include_embed=True)
with safe_open(str(path / "model.safetensors"), "pt") as f:
    keys = sorted(f.keys())
loaded = load_draft(path)
sd = loaded.model.state_dict()
print(json.dumps({"package": eagle3lib.__file__, "keys": keys, "detected": detect_format(keys),
                  "format": loaded.format, "same": all(torch.equal(v, sd[k]) for k, v in d.state_dict().items())}))
"""


def edited(copy: Path) -> list[str]:
    """The files of `copy` that differ from the package or are new (bytecode aside)."""
    return [str(p.relative_to(copy)) for p in sorted(copy.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            and not ((PACKAGE / p.relative_to(copy)).exists()
                     and filecmp.cmp(PACKAGE / p.relative_to(copy), p, shallow=False))]


def test_a_new_format_is_its_row_and_its_renames(tmp_path, tiny_cfg_dict):
    copy = tmp_path / "pkg" / "eagle3lib"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, after, text in (("model/formats.py", ROW_AFTER, ROW), ("model/checkpoint.py", RENAME_AFTER, RENAME)):
        path = copy / name
        source = path.read_text()
        assert source.count(after) == 1, f"{name}: the recipe's anchor moved"
        path.write_text(source.replace(after, after + text))
    assert edited(copy) == ["model/checkpoint.py", "model/formats.py"]
    raw = tiny_cfg_dict | {"num_aux_hidden_states": 3, "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}}
    p = subprocess.run([sys.executable, "-c", RUN, json.dumps(raw), str(tmp_path / "newtool")],
                       env={**os.environ, "PYTHONPATH": str(copy.parent)}, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert Path(out["package"]).resolve().is_relative_to(copy)
    layer = [k for k in out["keys"] if ".layer." in k or k.startswith("midlayer.")]
    assert layer and all(k.startswith("draft_model.layer.") for k in layer), out["keys"]
    assert (out["detected"], out["format"], out["same"]) == ("newtool", "newtool", True)
