"""A launch flag's value as a check reads it: a switch, an integer, vLLM's --speculative-config as a dict, each with
the problem that names the flag when the command gave it something else; and the finding of such a garbled value.
    switch(la, "disable_radix_cache") -> (True, None);  integer(la, "dp_size") -> (None, "--dp-size has the value ...")
"""
from __future__ import annotations

from ..causes import Finding
from .launch_reading import LaunchArgs


def flag(field_name: str) -> str:
    """The command-line spelling of a LaunchArgs field (``enable_lora`` -> ``--enable-lora``)."""
    return "--" + field_name.replace("_", "-")


def switch(la: LaunchArgs, name: str) -> tuple[bool | None, str | None]:
    """(value, problem) of a switch: True / False / None when absent; a sentence naming the flag when the command
    gave it a value that is not true/false (the launch reader keeps such a value as a string and notes it)."""
    v = la.flags.get(name)
    if v is None or isinstance(v, bool):
        return v, None
    return None, f"{flag(name)} has the value {v!r}, not a switch (true/false)"


def integer(la: LaunchArgs, name: str) -> tuple[int | None, str | None]:
    """(value, problem) of an integer flag, like `switch`."""
    v = la.flags.get(name)
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v, None
    return None, f"{flag(name)} has the value {v!r}, not an integer"


def spec_config(la: LaunchArgs) -> tuple[dict | None, str | None]:
    """(vLLM --speculative-config as a dict ({} when absent), problem naming the flag when it is not JSON)."""
    v = la.flags.get("speculative_config")
    if v is None:
        return {}, None
    if isinstance(v, dict):
        return v, None
    return None, f"--speculative-config is not a JSON object ({str(v)[:80]!r})"


def garbled(cause: str, where: str, problem: str, ev: dict | None = None) -> Finding:
    """The finding of a garbled flag value: not checked, naming the flag and what a valid value looks like."""
    return Finding(cause, "not checked", f"not checked: {problem}", ev or {}, where,
                   needs=f"the launch command with a valid value ({problem.split(' ', 1)[0]})")
