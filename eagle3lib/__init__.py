"""eagle3lib: an investigation workbook for EAGLE-3 drafts whose served accept length is poor.

Modules are documented in docs/architecture.md; errors in eagle3lib.errors.
"""
__version__ = "0.1.0"
