"""Errors eagle3lib raises on bad input.

Every message says where (file, key, line or setting), what was expected, what was found, and the likely
cause, e.g. ``checkpoint .../model.safetensors, key 'd2t': expected shape [32000], found [31999]. Likely
cause: ...``. All are ``ValueError`` subclasses (``MissingFileError`` is also a ``FileNotFoundError``), so
callers may catch ``Eagle3Error`` for anything eagle3lib refuses.
"""
from __future__ import annotations


_UNSET = object()   # expected/found not given (None is a value a message may need to show)


class Eagle3Error(ValueError):
    """Base class: bad input that eagle3lib detected and explains."""

    def __init__(self, where: str, problem: str, *, expected: object = _UNSET, found: object = _UNSET,
                 cause: str | None = None):
        # "expected None" never helps, so expected=None counts as not given; found=None is printed when passed
        # explicitly (a setting whose value is None), and left out when not given
        parts = [] if expected is _UNSET or expected is None else [f"expected {expected}"]
        parts += [] if found is _UNSET else [f"found {found}"]
        expected, found = (None if v is _UNSET else v for v in (expected, found))
        self.where, self.problem, self.expected, self.found, self.cause = where, problem, expected, found, cause
        msg = f"{where}: {problem}"
        if parts:
            msg += f" ({', '.join(parts)})"
        if cause:
            msg += f". Likely cause: {cause}"
        super().__init__(msg)


class ConfigError(Eagle3Error):
    """A draft or target config.json that is unreadable, incomplete or contradictory."""


class UnsupportedDraftError(ConfigError):
    """A draft of another algorithm than the EAGLE family (a block drafter such as DFlash): never loaded as EAGLE-3."""


class CheckpointError(Eagle3Error):
    """A weights file that is corrupt, truncated, or holds tensors of the wrong name, shape or dtype."""


class UnsafeFileError(CheckpointError):
    """A file that would need unrestricted unpickling (it could run code); refused, never executed."""


class MissingFileError(Eagle3Error, FileNotFoundError):
    """A file or directory that a path, index or config points at does not exist."""


class VocabError(Eagle3Error):
    """d2t / t2d that are missing, of the wrong length or dtype, out of range or inconsistent."""


class DataError(Eagle3Error):
    """A training-data file or sample that cannot be read as declared."""


class LayoutError(Eagle3Error):
    """An aux-slot layout or capture request that does not fit the target or the draft."""


class ServingArgsError(Eagle3Error):
    """A launch command, server setting or /server_info that cannot be parsed or would be rejected."""


class EngineError(Eagle3Error):
    """The real serving engine (vLLM in its own venv) is absent, refused the input, or failed while running it."""


class LogParseError(Eagle3Error):
    """A server log or benchmark output with nothing readable in it."""


class ParameterError(Eagle3Error):
    """A parameter value that is not one eagle3lib can use (a device this machine lacks, a dtype, a count)."""


class ReportError(Eagle3Error):
    """A notebook run or report export that failed."""


class FindingError(Eagle3Error):
    """A finding with an unknown cause id or status, or a finding record that cannot be read back."""


ALL_ERRORS = (Eagle3Error, ConfigError, UnsupportedDraftError, CheckpointError, UnsafeFileError, MissingFileError, VocabError,
              DataError, LayoutError, ServingArgsError, EngineError, LogParseError, ParameterError, ReportError,
              FindingError)
