"""Test-only: whether a process is gone, for the tests that check a server (and its process group) was stopped."""
from __future__ import annotations

import os


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this id still exists (a zombie counts as gone)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True
