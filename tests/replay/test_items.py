"""Tests for eagle3lib.replay.items: a sample's slots picked by boundary name, shifted, and its reference tokens."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.errors import LayoutError
from eagle3lib.replay import items as I
from eagle3lib.samples.readers import Sample

LAYOUT = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")   # TINY_SPECFORGE ids [-1,1,3,5] of an 8-layer target


def test_target_reference_from_final_hidden():
    """With final_hidden and an lm_head the reference is the target's argmax; without, the data token."""
    head = torch.nn.functional.normalize(torch.randn(120, 32), dim=-1)
    want = torch.randint(0, 120, (10,))
    s = Sample("a", torch.randint(0, 120, (10,)), torch.ones(10, dtype=torch.long), torch.randn(10, 4, 32), LAYOUT,
               head[want] * 5.0)
    ref, kind, _ = I.next_token_reference(s, head)
    assert kind == "target" and ref.tolist() == want.tolist()
    ref, kind, note = I.next_token_reference(s, None)
    assert kind == "data" and ref[:-1].tolist() == s.input_ids[1:].tolist() and ref[-1] == -1 and "lm_head" in note


def test_apply_layout_selects_fills_and_recaptures():
    """Slots are picked by name; missing ones raise, or are zero under fill='zeros', or come from recapture."""
    aux = torch.arange(3 * 4 * 2, dtype=torch.float32).reshape(3, 4, 2)
    s = Sample("x", torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long), aux, LAYOUT)
    got, eff = I.apply_layout(s, ["layer_in.4", "embed", "layer_in.6", "layer_in.2"], 4)
    assert torch.equal(got, aux[:, [2, 0, 3, 1]]) and eff[1] == "embed"
    got, eff = I.apply_layout(s, ["layer_in.2", "layer_in.4", "layer_in.6"], 4, fill="zeros")
    assert eff == ("layer_in.2", "layer_in.4", "layer_in.6", "zeros")
    assert torch.equal(got[:, :3], aux[:, 1:]) and not got[:, 3].any()
    with pytest.raises(LayoutError, match="fill='zeros'"):
        I.apply_layout(s, ["layer_in.2", "layer_in.4", "layer_in.6"], 4)
    with pytest.raises(LayoutError, match="layer_in.3"):
        I.apply_layout(s, ["embed", "layer_in.3", "layer_in.4", "layer_in.6"], 4)

    class Fake:
        def states(self, sample, names):
            return {n: torch.full((3, 2), 7.0) for n in names}

    got, eff = I.apply_layout(s, ["embed", "layer_in.3", "layer_in.4", "layer_in.6"], 4, recapture=Fake())
    assert eff[1] == "layer_in.3" and bool((got[:, 1] == 7).all())


def test_shift_positions():
    """Token shift moves rows with zero fill."""
    a = torch.arange(4.0)[:, None, None]
    assert I.shift_positions(a, 1).flatten().tolist() == [1, 2, 3, 0]
    assert I.shift_positions(a, -1).flatten().tolist() == [0, 0, 1, 2]
