"""Sphinx configuration for the optkernels documentation.

The API reference is generated at configuration time from the public packages' ``__all__`` (see
``_apigen.py``), so a module or name added to a package appears without editing these files.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import optkernels  # noqa: E402  (after the path set-up above)
from _apigen import generate_api_pages  # noqa: E402
from _docstring_warnings import install_docstring_warning_filter  # noqa: E402
from _guide import write_guide_toc  # noqa: E402

os.environ.setdefault("NUMBA_NUM_THREADS", "2")

project = "optkernels"
author = "the optkernels authors"
release = version = optkernels.__version__
copyright = "the optkernels authors, Apache-2.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.doctest",
]

html_theme = "furo"
html_title = f"optkernels {release}"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# Docstrings are Google style (Args:/Returns:/Raises:) or numpy style (Parameters/Returns sections).
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True   # an Attributes section must not describe a property a second time
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_default_options = {"show-inheritance": True}
# A new module's docstring markup slips (an unmatched `*`, `|x|`) are printed, not fatal: see
# _docstring_warnings.py. Everything else (the pages, cross-references, the examples) stays an error.
docstring_warnings_fatal = os.environ.get("OPTKERNELS_DOCS_STRICT_DOCSTRINGS") == "1"

# Every doctest block starts from these imports.
# Every doctest group starts in a scratch folder (examples write checkpoints and vectors) with NumPy.
doctest_global_setup = """
import os, tempfile
os.makedirs(os.path.join(tempfile.gettempdir(), "optkernels-doctest"), exist_ok=True)
os.chdir(os.path.join(tempfile.gettempdir(), "optkernels-doctest"))
import numpy as np
"""

generate_api_pages(HERE / "api")

write_guide_toc(HERE)


def setup(app):  # noqa: ANN001, ANN201
    app.add_config_value("docstring_warnings_fatal", False, "env")
    install_docstring_warning_filter(app, fatal=docstring_warnings_fatal)
