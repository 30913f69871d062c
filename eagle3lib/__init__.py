"""eagle3lib: an investigation workbook for EAGLE-3 drafts whose served accept length is poor.

Modules are documented in docs/architecture.md; errors in eagle3lib.errors. With ``$EAGLE3LIB_OPENED`` set, the
process records every path it opens (`eagle3lib.opened`).
"""
from .opened import record_from_environment

__version__ = "0.1.0"
record_from_environment()
