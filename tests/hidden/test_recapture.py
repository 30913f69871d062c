"""`python -m eagle3lib.hidden.recapture`: a training set captured from an old target, recaptured from the new one in
each format eagle3lib writes (aux slots and final state of the new target, ids and mask copied, names kept),
resumable, split over ranks (in-process and under torchrun) as one process does it, and the fix the drift check names:
after it, the check finds no drift."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3lib.checks.judge import run_checks
from eagle3lib.hidden.capture import capture, load_target_model
from eagle3lib.hidden.recapture import FINAL, finish_recapture, main, recapture_dataset
from eagle3lib.samples.readers import open_dataset
from eagle3lib.samples.sample import Sample
from eagle3lib.samples.writers import (specforge_sample_path, write_seed_dataset, write_specforge_sample,
                                       write_speculators_sample)
from tests.tiny_targets import V, save_tiny_target

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ("embed", "layer_in.1", "layer_in.2")
N = 7


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(old target, new target, {format: data captured from the old target})."""
    root = tmp_path_factory.mktemp("recapture")
    old, new = save_tiny_target("llama", root / "old"), save_tiny_target("llama", root / "new", seed=1)
    model = load_target_model(old)
    samples = []
    for i in range(N):
        ids = torch.randint(0, V, (6 + 3 * i,), generator=torch.Generator().manual_seed(i))
        c = capture(model, ids)
        mask = (torch.arange(len(ids)) % 3 != 0).long()
        samples.append((ids, mask, c))
    data = {"seed": root / "seed", "specforge": root / "specforge", "speculators": root / "speculators"}
    write_seed_dataset(data["seed"], [Sample(f"s{i}", ids, m, c.stack(LAYOUT), LAYOUT, c["final_postnorm"])
                                      for i, (ids, m, c) in enumerate(samples)], info={"num_target_layers": 3})
    for i, (ids, m, c) in enumerate(samples):
        write_specforge_sample(specforge_sample_path(data["specforge"], 10 + i), ids, m, c["final_postnorm"],
                               c.concat(LAYOUT))
        write_speculators_sample(data["speculators"] / f"hs_{i}.safetensors", ids,
                                 torch.cat([c.stack(LAYOUT), c["final_prenorm"][:, None]], dim=1), m, LAYOUT)
    return old, new, data


def _check(out: Path, fmt: str, new, data_in: Path):
    """Every sample of `out` holds the new target's states on its tokens, with the input's ids and mask."""
    model = load_target_model(new)
    got, src = list(open_dataset(out)), list(open_dataset(data_in))
    assert len(got) == N and open_dataset(out).format == fmt
    for g, s in zip(got, src):
        ref = capture(model, g.input_ids)
        assert torch.equal(g.input_ids, s.input_ids) and torch.equal(g.loss_mask, s.loss_mask)
        assert (g.layout or open_dataset(out).layout) == LAYOUT
        assert float((g.aux - ref.stack(LAYOUT)).abs().max()) <= 1e-5
        assert float((g.final_hidden - ref[FINAL[fmt]]).abs().max()) <= 1e-5 and g.final_boundary == FINAL[fmt]
        assert not torch.allclose(g.aux, s.aux, atol=1e-3)           # the old target's states are gone


@pytest.mark.parametrize("fmt", ["seed", "specforge", "speculators"])
def test_each_format_is_recaptured_from_the_new_target(world, tmp_path, fmt):
    """Same format in, same names out (data_<idx> / hs_<i> / ids), dataset_info.json naming layout and target."""
    old, new, data = world
    out = tmp_path / "out"
    r = recapture_dataset(new, data[fmt], out, layout=None if fmt != "specforge" else ",".join(LAYOUT),
                          batch_size=3, group_tokens=20, progress=False)
    finish_recapture(new, data[fmt], out, r)
    assert (r.written, r.done_before, r.failed, r.layout) == (N, 0, (), LAYOUT)
    _check(out, fmt, new, data[fmt])
    names = sorted(p.name for p in out.rglob("*") if p.is_file() and p.suffix in (".ckpt", ".safetensors"))
    assert names == sorted(p.name for p in data[fmt].rglob("*") if p.is_file() and p.suffix in (".ckpt",
                                                                                               ".safetensors"))
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["layout"] == list(LAYOUT) and info["num_target_layers"] == 3
    assert info["recaptured_from"] == str(new.resolve()) and not (tmp_path / ".out.partial").exists()


def test_resumable_and_streamed(world, tmp_path):
    """A second run keeps what is there; a deleted sample is the only one written again; a streamed target gives
    the same files' states."""
    old, new, data = world
    out = tmp_path / "out"
    first = recapture_dataset(new, data["seed"], out, n=3, progress=False)
    assert (first.written, first.done_before) == (3, 0)
    again = recapture_dataset(new, data["seed"], out, progress=False)
    assert (again.written, again.done_before) == (N - 3, 3)
    (out / "hidden_states" / "s4.safetensors").unlink()
    third = recapture_dataset(new, data["seed"], out, stream=True, progress=False)
    assert (third.written, third.done_before, third.streamed) == (1, N - 1, True)
    finish_recapture(new, data["seed"], out, third)
    assert [json.loads(x)["id"] for x in (out / "train.jsonl").read_text().splitlines()] == [f"s{i}" for i in
                                                                                                range(N)]
    _check(out, "seed", new, data["seed"])


def test_ranks_split_the_samples_and_formats_convert(world, tmp_path):
    """Rank 0 and 1 of 2 (every other sample each), SpecForge in, seed out: the index rank 0 writes is in dataset
    order and every sample holds the new target's states."""
    old, new, data = world
    out = tmp_path / "out"
    rs = [recapture_dataset(new, data["specforge"], out, layout=",".join(LAYOUT), format="seed", rank=r,
                            world_size=2, progress=False) for r in (0, 1)]
    assert [r.written for r in rs] == [4, 3]
    finish_recapture(new, data["specforge"], out, rs[0])
    ids = [json.loads(x)["id"] for x in (out / "train.jsonl").read_text().splitlines()]
    assert ids == [f"data_{10 + i}" for i in range(N)]
    _check(out, "seed", new, data["specforge"])


def test_the_command_line(world, tmp_path, capsys):
    """One JSON line; exit 0 when written, 2 when the layout is unknown (SpecForge data declares none) or the
    device is a GPU this machine does not have."""
    old, new, data = world
    assert main(["--target", str(new), "--train-data", str(data["speculators"]), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["ok"] and rec["written"] == N and rec["layout"] == list(LAYOUT) and rec["target_load"] == "full"
    assert main(["--target", str(new), "--train-data", str(data["specforge"]), "--out", str(tmp_path / "p"),
                 "--quiet"]) == 2
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not rec["ok"] and "--layout" in rec["error"]
    if not torch.cuda.is_available():          # the CUDA path says so before any work
        assert main(["--target", str(new), "--train-data", str(data["seed"]), "--out", str(tmp_path / "q"),
                     "--device", "cuda", "--quiet"]) == 2
        rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert "device 'cuda': no such CUDA device" in rec["error"] and not (tmp_path / "q").exists()


@pytest.mark.slow
def test_two_gloo_ranks_under_torchrun_equal_one_process(world, tmp_path):
    """torchrun with 2 CPU ranks: each recaptures its share, rank 0 writes the index; the same data as one process."""
    import socket

    old, new, data = world
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port), "-m", "eagle3lib.hidden.recapture", "--target", str(new), "--train-data",
           str(data["seed"]), "--out", str(tmp_path / "out"), "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    assert sorted((r["rank"], r["written"]) for r in recs) == [(0, 4), (1, 3)]
    _check(tmp_path / "out", "seed", new, data["seed"])


def test_it_is_the_fix_the_drift_check_names(world, tmp_path):
    """Data from the old target against the new one: drift confirmed, the fix names this command; the data it
    writes shows no drift."""
    old, new, data = world
    f = run_checks(target=str(new), data=str(data["seed"]), only=("drift",), replay_n=3)[0]
    assert (f.cause, f.status) == ("target_drift", "confirmed")
    assert f"python -m eagle3lib.hidden.recapture --target {new} --train-data {data['seed']} --layout " \
           "embed,layer_in.1,layer_in.2 --out" in f.fix
    out = tmp_path / "fixed"
    assert main(["--target", str(new), "--train-data", str(data["seed"]), "--out", str(out), "--quiet"]) == 0
    after = run_checks(target=str(new), data=str(out), only=("drift",), replay_n=3)[0]
    assert (after.cause, after.status) == ("target_drift", "ruled out")
