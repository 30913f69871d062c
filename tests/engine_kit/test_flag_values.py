"""A launch flag's value as a check reads it (`engine_kit.flag_values`): a garbled value names its flag."""
from __future__ import annotations

from eagle3lib.engine_kit.flag_values import garbled, integer, spec_config, switch
from eagle3lib.serving.launch import parse_launch


def test_flag_values_name_the_flag_of_a_garbled_value():
    """A switch, an integer and --speculative-config given something else: the problem names the flag and the
    value; absent flags read as None / {} with no problem."""
    la = parse_launch("vllm serve t --async-scheduling=maybe --data-parallel-size two --speculative-config "
                      "'[1]'", strict=False)
    assert switch(la, "async_scheduling")[1].startswith("--async-scheduling has the value 'maybe'")
    assert integer(la, "data_parallel_size")[1].startswith("--data-parallel-size has the value 'two'")
    assert spec_config(la)[0] is None and "--speculative-config is not a JSON object" in spec_config(la)[1]
    plain = parse_launch("vllm serve t")
    assert switch(plain, "async_scheduling") == (None, None) and spec_config(plain) == ({}, None)
    f = garbled("async_scheduling", "here", switch(la, "async_scheduling")[1])
    assert f.status == "not checked" and f.needs == "the launch command with a valid value (--async-scheduling)"
