"""Boundary names and layer-id conventions (eagle3lib.layout): names, aliases, id round trips, engine defaults."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from eagle3lib.errors import Eagle3Error, LayoutError
from eagle3lib.layout import (CONVENTIONS, boundary_names, training_default_ids, training_default_layout, from_ids,
                              input_index, normalize, parse_layout, to_ids)

L = 6


def test_boundary_names_in_stream_order():
    """embed, layer_in.1..L-1, then the final pre- and post-norm states: L + 2 names."""
    assert boundary_names(L) == ["embed", "layer_in.1", "layer_in.2", "layer_in.3", "layer_in.4", "layer_in.5",
                                 "final_prenorm", "final_postnorm"]
    assert boundary_names(1) == ["embed", "final_prenorm", "final_postnorm"]
    assert CONVENTIONS == ("input", "output", "hf")


@pytest.mark.parametrize("name, num_layers, want", [
    ("embed", None, "embed"),
    ("  embed ", None, "embed"),
    ("layer_in.0", None, "embed"),
    ("layer_in.3", None, "layer_in.3"),
    ("layer_in.3", L, "layer_in.3"),
    ("layer_out.2", None, "layer_in.3"),
    ("out.2", None, "layer_in.3"),
    ("layer_in.6", None, "layer_in.6"),       # without L the last index is not recognised as final
    ("layer_in.6", L, "final_prenorm"),
    ("layer_out.5", L, "final_prenorm"),
    ("final_prenorm", L, "final_prenorm"),
    ("final_postnorm", None, "final_postnorm"),
])
def test_normalize(name, num_layers, want):
    assert normalize(name, num_layers) == want


def test_normalize_errors_name_the_bad_value():
    with pytest.raises(LayoutError, match=r"boundary 'layer_in\.7': layer index beyond the target "
                                          r"\(expected an index in 0\.\.6, found 7\)") as e:
        normalize("layer_in.7", L)
    assert e.value.found == 7 and isinstance(e.value, (ValueError, Eagle3Error))
    with pytest.raises(LayoutError, match=r"^boundary 'layer_in\.7': layer index beyond the target"):
        normalize("layer_out.6", L)          # output id 6 = input of layer 7 of a 6-layer target
    with pytest.raises(LayoutError, match=r"boundary 'emb': unknown boundary name.*found emb\)") as e:
        normalize("emb")
    assert e.value.found == "emb"
    with pytest.raises(LayoutError, match=r"unknown boundary name.*found layer_out\.-1"):
        normalize("layer_out.-1")            # the embed alias is layer_in.0 / "embed", not an output id -1
    with pytest.raises(LayoutError, match=r"found int 3\). Likely cause: layer ids given where names are "
                                          r"expected \(use from_ids\)"):
        normalize(3)
    with pytest.raises(LayoutError, match=r"found NoneType None\)$"):
        normalize(None)


def test_input_index():
    assert [input_index(n, L) for n in boundary_names(L)] == [0, 1, 2, 3, 4, 5, 6, 6]
    assert input_index("layer_out.2", L) == 3 and input_index("layer_in.0", L) == 0
    with pytest.raises(LayoutError, match="found 9"):
        input_index("layer_in.9", L)


def test_from_ids_each_convention():
    assert from_ids([0, 1, 5, 6], "input", L) == ("embed", "layer_in.1", "layer_in.5", "final_prenorm")
    assert from_ids([-1, 0, 4, 5], "output", L) == ("embed", "layer_in.1", "layer_in.5", "final_prenorm")
    assert from_ids([0, 3, 6], "hf", L) == ("embed", "layer_in.3", "final_postnorm")
    assert from_ids([4, 2, 4], "input", L) == ("layer_in.4", "layer_in.2", "layer_in.4")   # order and repeats kept
    assert from_ids(["3", np.int64(2), torch.tensor(1)], "input", L) == ("layer_in.3", "layer_in.2", "layer_in.1")
    assert from_ids([], "output", L) == ()


def test_from_ids_errors():
    with pytest.raises(LayoutError, match=r"layer-id convention: unknown convention.*found sglang"):
        from_ids([1], "sglang", L)
    with pytest.raises(LayoutError, match=r"layer id -2 \(output-of-layer convention\): outside the target's "
                                          r"layers \(expected -1\.\.5 for a 6-layer target, found -2\)"):
        from_ids([-2], "output", L)
    with pytest.raises(LayoutError, match=r"layer id 6 \(output-of-layer convention\).*expected -1\.\.5"):
        from_ids([6], "output", L)
    with pytest.raises(LayoutError, match=r"layer id 7 \(input-of-layer convention\).*expected 0\.\.6.*found 7"):
        from_ids([7], "input", L)
    with pytest.raises(LayoutError, match=r"layer id -1 \(input-of-layer convention\)"):
        from_ids([-1], "input", L)
    with pytest.raises(LayoutError, match=r"layer id 2\.5: not an integer.*found float 2\.5"):
        from_ids([2.5], "input", L)
    with pytest.raises(LayoutError, match=r"layer id 'x': not an integer.*found str 'x'"):
        from_ids(["x"], "output", L)


@pytest.mark.parametrize("convention, skip", [("input", "final_postnorm"), ("output", "final_postnorm"),
                                              ("hf", "final_prenorm")])
def test_names_ids_names_round_trip(convention, skip):
    """Every boundary expressible in a convention survives to_ids -> from_ids."""
    names = tuple(n for n in boundary_names(L) if n != skip)
    ids = to_ids(names, convention, L)
    shift = -1 if convention == "output" else 0
    assert ids == [i + shift for i in range(L + 1)]
    assert from_ids(ids, convention, L) == names


@pytest.mark.parametrize("convention, lo", [("input", 0), ("output", -1), ("hf", 0)])
def test_ids_names_ids_round_trip(convention, lo):
    ids = list(range(lo, lo + L + 1))[::-1]
    assert to_ids(from_ids(ids, convention, L), convention, L) == ids


def test_input_and_output_ids_of_the_same_boundaries():
    """input id j and output id j-1 name one boundary."""
    names = ("embed", "layer_in.2", "layer_in.4", "final_prenorm")
    assert to_ids(names, "input", L) == [0, 2, 4, 6]
    assert to_ids(names, "output", L) == [-1, 1, 3, 5]
    assert to_ids(["layer_out.3", "out.0", "layer_in.0"], "output", L) == [3, 0, -1]


def test_to_ids_refuses_what_a_convention_cannot_express():
    with pytest.raises(LayoutError, match=r"boundary 'final_postnorm': not expressible in the input-of-layer "
                                          r"convention.*post-norm state needs a patch"):
        to_ids(["final_postnorm"], "input", L)
    with pytest.raises(LayoutError, match=r"not expressible in the output-of-layer convention"):
        to_ids(["embed", "final_postnorm"], "output", L)
    with pytest.raises(LayoutError, match=r"boundary 'final_prenorm': not expressible as an HF hidden_states "
                                          r"index.*HF hidden_states\[L\] is post-norm"):
        to_ids(["final_prenorm"], "hf", L)
    with pytest.raises(LayoutError, match=r"^boundary 'final_prenorm': not expressible as an HF"):
        to_ids(["layer_in.6"], "hf", L)       # = final_prenorm for a 6-layer target
    with pytest.raises(LayoutError, match="unknown convention.*found vllm"):
        to_ids(["embed"], "vllm", L)
    with pytest.raises(LayoutError, match=r"boundary 'nope': unknown boundary name"):
        to_ids(["embed", "nope"], "input", L)


def test_parse_layout():
    assert parse_layout("embed, layer_out.3,,layer_in.0 ,") == ("embed", "layer_in.4", "embed")
    assert parse_layout(["layer_in.2", "out.3"]) == ("layer_in.2", "layer_in.4")
    assert parse_layout("layer_in.6,layer_in.1", L) == ("final_prenorm", "layer_in.1")
    assert parse_layout("") == () and parse_layout([]) == ()
    with pytest.raises(LayoutError, match=r"boundary 'layer_in\.8': layer index beyond the target"):
        parse_layout("embed,layer_in.8", L)
    with pytest.raises(LayoutError, match=r"boundary 'mid': unknown boundary name"):
        parse_layout("embed,mid")


def test_engine_default_ids():
    assert training_default_ids(32) == [2, 16, 29]
    assert training_default_ids(61) == [2, 30, 58]
    assert training_default_ids(8) == [2, 4, 5]
    assert training_default_layout(32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert training_default_layout(8) == ("layer_in.2", "layer_in.4", "layer_in.5")


@pytest.mark.parametrize("num_layers", [6, 7, 8, 16, 28, 32, 36, 61, 80])
def test_engine_default_equals_specforge_output_ids(num_layers):
    """[2, L//2, L-3] input ids == SpecForge's output ids [1, L//2-1, L-4]."""
    Lx = num_layers
    specforge = [1, Lx // 2 - 1, Lx - 4]
    assert from_ids(training_default_ids(Lx), "input", Lx) == from_ids(specforge, "output", Lx)
    assert training_default_layout(Lx) == from_ids(specforge, "output", Lx)
    assert to_ids(training_default_layout(Lx), "output", Lx) == specforge
