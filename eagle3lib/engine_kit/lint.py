"""`LintWarning`: a setting or config that cannot help, or that the engines read differently (a launch's own by its
home's `launch_warnings`, the draft config's by serving.crossengine.lint)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LintWarning:
    """A setting or config that cannot help, or that the engines read differently."""

    code: str
    severity: str        # "error" (fails or feeds wrong layers), "warning", "info"
    message: str
