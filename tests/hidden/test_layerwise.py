"""Many sequences through a streamed target with each layer read once for all of them: the same states as
`capture_batch` on the loaded model (float32, max |diff| <= 1e-5), whatever the number of batches."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.hidden.capture import capture_batch, load_target_model
from eagle3lib.hidden.layerwise import capture_layerwise
from eagle3lib.hidden.stream import stream_target, streamed
from tests.tiny_targets import ARCHS, V, save_tiny_target

pytestmark = pytest.mark.slow     # tens of seconds: the full suite (make test-all), not make test


@pytest.fixture(scope="module")
def seqs():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, V, (int(n),), generator=g) for n in torch.randint(3, 20, (7,), generator=g)]


@pytest.mark.parametrize("arch", ARCHS)
def test_layer_by_layer_equals_batch_by_batch(arch, seqs, tmp_path):
    """All boundaries, a layout with both ends, and one shallow boundary: the states of capture_batch with the
    same batches, and every unit up to the deepest read exactly once for the 3 batches."""
    folder = save_tiny_target(arch, tmp_path / arch)
    full, st = load_target_model(folder, stream=False), stream_target(folder)
    s = streamed(st)
    L = full.config.num_hidden_layers
    for only, units in ((None, L + 2), (["embed", "layer_in.1", "final_postnorm"], L + 2), (["layer_in.1"], 2)):
        ref = capture_batch(full, seqs, only=only, batch_size=3)
        before = s.loads
        got = capture_layerwise(st, seqs, only=only, batch_size=3)
        assert s.loads - before == units and s.resident == set()
        assert len(got) == len(seqs) and [c.names for c in got] == [c.names for c in ref]
        for r, c, ids in zip(ref, got, seqs):
            assert torch.equal(c.input_ids, ids) and c[r.names[0]].shape == (len(ids), full.config.hidden_size)
            assert max(float((r[n] - c[n]).abs().max()) for n in r.names) <= 1e-5, (arch, only)


def test_a_loaded_model_and_the_edges(seqs, tmp_path):
    """A loaded model takes the batch path; no sequences gives none; the embedding alone reads one unit."""
    folder = save_tiny_target("llama", tmp_path / "l")
    full, st = load_target_model(folder, stream=False), stream_target(folder)
    a = capture_layerwise(full, seqs[:2], only=["final_prenorm"])
    b = capture_batch(full, seqs[:2], only=["final_prenorm"])
    assert all(torch.equal(x["final_prenorm"], y["final_prenorm"]) for x, y in zip(a, b))
    assert capture_layerwise(st, []) == []
    got = capture_layerwise(st, seqs, only=["embed"], batch_size=2)
    assert streamed(st).loads == 1
    emb = full.get_input_embeddings().weight
    assert all(torch.equal(c["embed"], emb[ids]) for c, ids in zip(got, seqs))
