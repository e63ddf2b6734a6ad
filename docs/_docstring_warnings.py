"""Keep reStructuredText slips inside docstrings from failing a ``-W`` build.

A warning whose location is a docstring (``...:docstring of optkernels...``) is printed as a plain line
(``docstring markup: ...``) instead of raised, unless ``OPTKERNELS_DOCS_STRICT_DOCSTRINGS=1``. Warnings
from the pages themselves, broken references and failing examples stay errors.
"""
from __future__ import annotations

import logging


class _DocstringWarningsToInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        location = str(getattr(record, "location", "") or "")
        if record.levelno >= logging.WARNING and "docstring of" in location:
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = f"docstring markup: {location}: {record.getMessage()}"
            record.args = ()
            record.location = None
        return True


def install_docstring_warning_filter(app, fatal: bool) -> None:  # noqa: ANN001
    """Put the filter in front of Sphinx's handlers (a no-op when ``fatal``)."""
    if fatal:
        return
    for handler in logging.getLogger("sphinx").handlers:
        handler.filters.insert(0, _DocstringWarningsToInfo())
