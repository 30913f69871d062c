"""The cause catalogue and the Finding record: ids, validation, JSON round trip."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from eagle3lib.causes import CATALOGUE, FIELD_CAUSES, STATUSES, Finding, cause, not_checked, raised
from eagle3lib.errors import Eagle3Error, FindingError

ROOT = Path(__file__).resolve().parents[1]
# the project's reference notes sit beside the repository (../shared), on CI as on a developer's machine
FIELD_CAUSES_MD = next((p for p in (ROOT.parent / "shared" / "reference" / "field-causes.md",
                                    Path("/work/shared/reference/field-causes.md")) if p.is_file()),
                       ROOT.parent / "shared" / "reference" / "field-causes.md")


def test_catalogue_covers_the_field_causes_and_the_seed_once_each():
    """47 field causes map to 47 distinct ids; the seed's two and the extras are there; ids are snake_case."""
    assert sorted(FIELD_CAUSES) == list(range(1, 48))
    assert len(set(FIELD_CAUSES.values())) == 47
    for extra in ("ndt_override", "aux_layout_mismatch", "generalization_gap", "d2t_mapping", "lossy_threshold"):
        assert extra in CATALOGUE
    for cid, c in CATALOGUE.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", cid) and c.id == cid and c.title and c.reference
    for row, cid in FIELD_CAUSES.items():
        assert CATALOGUE[cid].reference.startswith(f"field-causes.md #{row};")


def test_ids_added_for_rows_20_to_33_keep_the_earlier_order():
    """The 19 ranked rows and the seed's ids keep their catalogue positions; rows 20-47 come after them, then the
    causes the training samples tell apart."""
    ids = list(CATALOGUE)
    assert ids[:19] == [FIELD_CAUSES[r] for r in range(1, 20)]
    assert ids[19:23] == ["ndt_override", "aux_layout_mismatch", "generalization_gap", "lossy_threshold"]
    assert ids[23:51] == [FIELD_CAUSES[r] for r in range(20, 48)]
    assert ids[51:] == ["draft_config_differs", "engine_cannot_run", "draft_tensor_differs", "served_loss_unexplained"]


@pytest.mark.skipif(not FIELD_CAUSES_MD.is_file(), reason="reference notes not on this machine")
def test_every_row_of_field_causes_md_has_an_id():
    """The reference table has exactly as many rows as FIELD_CAUSES maps."""
    rows = re.findall(r"^\| (\d+) \|", FIELD_CAUSES_MD.read_text(), re.M)
    assert [int(r) for r in rows] == sorted(FIELD_CAUSES)


def test_finding_round_trips_through_json():
    """to_dict -> json -> from_dict gives the same finding; numpy/torch numbers become plain floats."""
    f = Finding("rope_mismatch", "suspected", "draft rope_theta 1e4, target 1e6",
                {"draft": np.float32(1e4), "target": torch.tensor(1e6), "slots": (1, 2), "nan": float("nan")},
                "checks.rope", fix="set rope_theta 1e6", source="speculators PR#574")
    rec = json.loads(json.dumps(f.to_dict(), allow_nan=False))
    back = Finding.from_dict(rec)
    assert back == f and back.evidence == {"draft": 1e4, "target": 1e6, "slots": [1, 2], "nan": None}
    assert f.raised and raised([f, not_checked("rope_mismatch", "checks.rope", "target config")]) == [f]


@pytest.mark.parametrize("kwargs, bad", [
    ({"cause": "rope_mismtach"}, "rope_mismtach"),
    ({"status": "maybe"}, "maybe"),
    ({"evidence": {"t": object()}}, "evidence"),
    ({"evidence": [1, 2]}, "evidence must be a dict"),
])
def test_bad_finding_names_the_bad_value(kwargs, bad):
    """An unknown cause id or status, or non-JSON evidence, is a FindingError (a ValueError) naming it."""
    args = {"cause": "rope_mismatch", "status": "confirmed", "summary": "s", "evidence": {}, "where": "w"} | kwargs
    with pytest.raises(FindingError, match=re.escape(bad)) as e:
        Finding(**args)
    assert isinstance(e.value, (Eagle3Error, ValueError))


def test_from_dict_refuses_records_it_did_not_write():
    """A record with a missing or unknown key is refused with the key named."""
    with pytest.raises(FindingError, match="summary"):
        Finding.from_dict({"cause": "rope_mismatch", "status": "confirmed"})
    with pytest.raises(FindingError, match="colour"):
        Finding.from_dict({"cause": "rope_mismatch", "status": "confirmed", "summary": "s", "colour": 1})


def test_not_checked_names_the_missing_input():
    """not_checked carries the status, where and the input it needs; cause() looks ids up."""
    f = not_checked("short_context", "checks.context", "target config")
    assert (f.status, f.where, f.needs, f.raised) == ("not checked", "checks.context", "target config", False)
    assert "target config" in f.summary and STATUSES[-1] == "not checked"
    assert cause("short_context").id == "short_context"
    with pytest.raises(FindingError, match="nope"):
        cause("nope")


def test_every_cause_lists_its_aspects_and_a_finding_names_only_those():
    import pytest

    from eagle3lib.causes import CATALOGUE, Finding
    from eagle3lib.errors import FindingError
    assert all(c.aspects for c in CATALOGUE.values())
    assert CATALOGUE["chat_template_mismatch"].aspects == ("role markers", "think blocks", "system prompt",
                                                          "generation prompt")
    assert CATALOGUE["lm_head_missing"].aspects == ("present", "borrowable", "padded vocab")
    f = Finding("lm_head_missing", "ruled out", "x", aspects=["padded vocab"])
    assert f.aspects == ("padded vocab",) and Finding.from_dict(f.to_dict()) == f
    with pytest.raises(FindingError, match="unknown aspect"):
        Finding("lm_head_missing", "ruled out", "x", aspects=("system prompt",))
