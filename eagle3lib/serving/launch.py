"""A serving launch command (of any engine the library knows) read into the settings it requests: `parse_launch`.

Accepts what users paste: ``python -m sglang.launch_server ...``, ``sglang serve ...``, ``vllm serve MODEL
--speculative-config '{...}'``, ``python -m vllm.entrypoints.openai.api_server ...``, env prefixes, ``\\`` line
continuations, or a list of args (each engine's commands and flags: its home's `launch` module; the reading:
`engine_kit.launch_reading`). Unknown flags are kept (``LaunchArgs.unknown``), never dropped.
    args = parse_launch("python -m sglang.launch_server --model-path M --speculative-num-steps 3 ...")
"""
from __future__ import annotations

from typing import Sequence

from ..engine_kit.launch_reading import LaunchArgs, read_command
from .homes import homes


def parse_launch(command: str | Sequence[str], engine: str | None = None, strict: bool = True) -> LaunchArgs:
    """Parse a launch command (string or argv list) into LaunchArgs; strict=False keeps bad values as notes."""
    return read_command(command, homes(), engine, strict)
