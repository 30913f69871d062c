"""The diagnosis end to end on the demo world's artifacts (slow): a clean deployment raises nothing, each planted
cause is ranked first as confirmed and nothing else is raised, and the demo world (the seed's story) names the
seed's two causes. Every serving dump here is made by the demo engine with a planted capture."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3lib.demo import world as demo
from eagle3lib.demo.sweep import demo_serving_dump
from eagle3lib.diagnose.cli import main
from eagle3lib.diagnose.parts import Inputs, run
from eagle3lib.engine_kit.capturespec import CaptureSpec

pytestmark = pytest.mark.slow

CLEAN_LAUNCH = ("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
                "--speculative-draft-model-path D --speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4")
SEED_LAUNCH = CLEAN_LAUNCH.replace("--speculative-num-steps 3", "--speculative-num-steps 1").replace(
    "--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 16")


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


@pytest.fixture(scope="module")
def dumps(world, tmp_path_factory):
    """Serving dumps of the demo engine: the trained layout, and planted wrong captures."""
    root = tmp_path_factory.mktemp("dumps")
    lays = {"correct": "embed,layer_in.2,layer_in.4,layer_in.6",
            "shifted": "embed,layer_in.3,layer_in.5,layer_in.7",
            "permuted": "embed,layer_in.4,layer_in.2,layer_in.6",
            "postnorm": "embed,layer_in.2,layer_in.4,final_postnorm"}
    out = {k: demo_serving_dump(root / k, CaptureSpec.from_layout(v, label=k), n=1) for k, v in lays.items()}
    out["seed"] = demo_serving_dump(root / "seed", "seed", n=1)
    return out


def diagnosis(world, *, draft=None, dump=None, launch=CLEAN_LAUNCH, log="", heldout=None):
    """The diagnosis of a user-style run (draft given, so nothing is filled from the demo world)."""
    inp = Inputs(draft=str(draft or world.draft), target=str(world.target), train_data=str(world.seed_data),
                 heldout_data=str(heldout or world.heldout_data), launch=launch, sglang_version="0.5.6",
                 server_log=log,
                 serving_dump=str(dump) if dump else "", n=8, drift_samples=0)
    r = run(inp)
    assert r.problems == ()
    return r.diagnosis


def assert_only(d, cause):
    alarms = [(v.cause, v.status) for v in d.alarms]
    assert alarms == [(cause, "confirmed")], d.text()


def test_clean_deployment_raises_nothing(world, dumps):
    d = diagnosis(world, dump=dumps["correct"])
    assert d.healthy, d.text()
    assert d.headline().startswith("no fault found")
    ruled = {v.cause for v in d.by_status("ruled out")}
    assert {"aux_layout_mismatch", "ndt_override", "d2t_mapping", "weights_dropped",
            "rope_mismatch", "lossy_threshold"} <= ruled
    # held-out samples rule the gap out on their aspect; nothing was served, so the served traffic is not checked
    gap = next(v for v in d.verdicts if v.cause == "generalization_gap")
    assert dict(gap.aspects) == {"held-out accuracy": "ruled out", "served traffic": "not checked"}
    assert d.decision.verdict == "not checked: the served τ (served_log / --served-log) not given"


@pytest.mark.parametrize("name,cause", [("seed", "aux_layout_mismatch"), ("permuted", "aux_layout_mismatch"),
                                        ("shifted", "layer_id_off_by_one"), ("postnorm", "aux_layout_mismatch")])
def test_a_planted_capture_is_the_one_confirmed_cause(world, dumps, name, cause):
    d = diagnosis(world, dump=dumps[name])
    assert_only(d, cause)
    v = d.verdicts[0]
    served = next(f for f in v.findings if f.where.startswith("replay") and f.status in ("confirmed", "suspected"))
    drop = served.evidence["acc_0_trained_layout"] - served.evidence["acc_0_served_layout"]
    assert drop > 0.02, served                  # replayed as served, the draft does worse than as trained
    assert served.status == ("confirmed" if drop > 0.10 else "suspected")      # THRESHOLDS["wiring_drop"]


def test_one_unreadable_input_is_never_no_fault_found(world, dumps, tmp_path):
    """The clean deployment with one more input that is not what it claims (`/etc/passwd`-like text as the server
    log): a problem naming --server-log, exit code 3, and no "no fault found" (the rest is still diagnosed)."""
    log = tmp_path / "server.log"
    log.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    r = run(Inputs(draft=str(world.draft), target=str(world.target), train_data=str(world.seed_data),
                   heldout_data=str(world.heldout_data), launch=CLEAN_LAUNCH, sglang_version="0.5.6",
                   server_log=str(log), serving_dump=str(dumps["correct"]), n=8, drift_samples=0))
    assert [(p.param, p.error) for p in r.problems] == [("--server-log", "LogParseError")] and r.exit_code == 3
    d = r.diagnosis
    assert not d.healthy and d.headline().startswith("could not read the server log (--server-log")
    assert not d.alarms and {"aux_layout_mismatch", "ndt_override"} <= {v.cause for v in d.by_status("ruled out")}


def test_ndt_override_from_the_launch_and_its_startup_log(world, dumps):
    d = diagnosis(world, dump=dumps["correct"], launch=SEED_LAUNCH, log="data/samples/sglang_seed_startup.log")
    assert_only(d, "ndt_override")
    assert "--speculative-num-steps 15" in d.verdicts[0].fix


def test_lossy_threshold_from_the_launch(world, dumps):
    d = diagnosis(world, dump=dumps["correct"], launch=CLEAN_LAUNCH + " --speculative-accept-threshold-single 0.5")
    assert_only(d, "lossy_threshold")


def test_generalization_gap_only(world, dumps):
    d = diagnosis(world, dump=dumps["correct"], heldout=world.shifted_data)
    assert_only(d, "generalization_gap")


def _d2t_draft(world, tmp_path, how):
    out = tmp_path / f"draft_{how}"
    shutil.copytree(world.draft, out)
    w = load_file(str(out / "model.safetensors"))
    if how == "absolute":
        w["d2t"] = w["d2t"] + torch.arange(w["d2t"].numel(), dtype=w["d2t"].dtype)
    elif how == "zeros":   # offsets lost, draft ids read as target ids
        w["d2t"] = torch.zeros_like(w["d2t"])
    else:                  # "missing": no map at all (engines then use the first Vd target ids)
        del w["d2t"], w["t2d"]
    save_file(w, str(out / "model.safetensors"))
    return out


@pytest.mark.parametrize("how", ["absolute", "zeros", "missing"])
def test_a_broken_d2t_is_the_one_confirmed_cause(world, dumps, tmp_path, how):
    d = diagnosis(world, draft=_d2t_draft(world, tmp_path, how), dump=dumps["correct"])
    assert_only(d, "d2t_mapping")


def test_the_demo_world_names_the_seeds_two_causes(capsys, tmp_path):
    """No --draft: the demo world, whose server is the seed's. The terminal command prints the seed's decision first,
    then the answer; --json FILE writes the machine record there (none on stdout)."""
    assert main(["--quiet", "--n", "8", "--drift-samples", "0", "--json", str(tmp_path / "d.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rec = json.loads((tmp_path / "d.json").read_text())
    assert not any(ln.startswith("{") for ln in lines) and any(ln.startswith("exit code 0: ") for ln in lines)
    confirmed = {v["cause"]: v for v in rec["verdicts"] if v["status"] == "confirmed"}
    assert {"ndt_override", "aux_layout_mismatch"} <= set(confirmed), lines[0]
    assert "16 -> 2" in confirmed["ndt_override"]["evidence"]
    assert "zeros" in confirmed["aux_layout_mismatch"]["evidence"]
    assert lines[0] == "THE SEED'S DECISION: WIRING/LOADING" and rec["decision"]["verdict"] == "wiring/loading"
    assert "aux_layout_mismatch" in rec["decision"]["reason"]          # fed otherwise than trained (the seed's capture)
    headline = lines.index("") + 1                                      # the answer follows the decision
    assert lines[headline].startswith("confirmed: ") and rec["problems"] == []
