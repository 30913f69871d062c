"""replay.run.load_setup inside a case (`once.case_reads`): one load per resolved paths, their files, dtype and device,
shared, one setup kept at a time; a rewritten file, another dtype or a model a caller left changed is a new load; the callers that change the
shared model for a while (`as_served.variant`, `as_served.loaded_as`) put back the very tensors they took; outside
a case every call loads."""
from __future__ import annotations

import os
import shutil

import pytest
import torch

from eagle3lib import once
from eagle3lib.demo import world as demo
from eagle3lib.replay.as_served import alternatives, loaded_as, variant
from eagle3lib.replay.run import load_setup, setup_fingerprint


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


def setup_loads(reads) -> int:
    return sum(n for k, n in reads.loads.items() if k[0] == "replay setup")


def test_one_load_per_paths_and_dtype_inside_a_case(world):
    with once.case_reads() as reads:
        a = load_setup(world.draft, world.target)
        b = load_setup(str(world.draft) + "/", str(world.target), dtype="float32")    # "auto" is float32 on CPU
        c = load_setup(world.draft, world.target, dtype="bfloat16")
        d = load_setup(world.draft, world.target, dtype=torch.bfloat16)
        assert setup_loads(reads) == 2
        e = load_setup(world.draft, world.target)          # float32 again: the bf16 load let the float32 one go
    assert a is b and c is d and a is not c and e is not a
    assert a.dtype == e.dtype == torch.float32 and c.dtype == torch.bfloat16
    assert setup_loads(reads) == 3


def test_outside_a_case_every_call_loads(world):
    a, b = load_setup(world.draft, world.target), load_setup(world.draft, world.target)
    assert a is not b and a.model is not b.model
    assert torch.equal(a.model.fc.weight, b.model.fc.weight)


def test_a_rewritten_file_is_a_new_load(world, tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(world.draft, draft)
    with once.case_reads() as reads:
        a = load_setup(draft, world.target)
        st = (draft / "config.json").stat()
        os.utime(draft / "config.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))    # rewritten, same text
        b = load_setup(draft, world.target)
        c = load_setup(draft, world.target)
    assert a is not b and b is c and setup_loads(reads) == 2


def test_callers_that_swap_tensors_or_config_put_back_what_they_took(world):
    with once.case_reads() as reads:
        s = load_setup(world.draft, world.target)
        before = setup_fingerprint(s)
        d2t, emb, head = s.model.d2t, s.model.embed_tokens.weight.data_ptr(), s.model.lm_head.weight.clone()
        with loaded_as(s, alternatives(s, None), d2t="zeros", lm_head="random"):
            assert not torch.equal(s.model.lm_head.weight, head) and int(s.model.d2t.abs().sum()) == 0
        with variant(s.model, rope_theta=1e6):
            assert s.model.cfg.rope_theta == 1e6
        assert s.model.d2t is d2t and s.model.embed_tokens.weight.data_ptr() == emb
        assert torch.equal(s.model.lm_head.weight, head) and int(d2t.abs().sum()) > 0    # its d2t never zeroed
        assert setup_fingerprint(s) == before
        assert load_setup(world.draft, world.target) is s and setup_loads(reads) == 1


def test_a_model_left_changed_is_loaded_again(world):
    with once.case_reads() as reads:
        s = load_setup(world.draft, world.target)
        own = s.model.fc.weight.detach().clone()
        with torch.no_grad():
            s.model.fc.weight.mul_(2)                       # a caller that writes in place and does not undo it
        again = load_setup(world.draft, world.target)
    assert again is not s and torch.equal(again.model.fc.weight, own) and setup_loads(reads) == 2
