"""The documentation's generated parts: every public name of every package gets an API entry, and every
page of docs/guide/ joins the user guide's table of contents (the Sphinx build itself runs in CI)."""
import importlib
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS))

from _apigen import PACKAGES, generate_api_pages  # noqa: E402
from _guide import guide_pages, write_guide_toc  # noqa: E402


def test_every_public_name_has_an_api_entry(tmp_path):
    pytest.importorskip("torch", reason="optkernels.torch's pages need torch (pip install -e '.[torch]')")
    generate_api_pages(tmp_path)
    text = "\n".join(p.read_text() for p in tmp_path.rglob("*.rst"))
    documented = set(re.findall(r"^\.\. auto(?:function|class|data):: (\w+)$", text, flags=re.M))
    for package in PACKAGES:
        for name in getattr(importlib.import_module(package), "__all__", []):
            assert name in documented, f"{package}.{name}"
    assert (tmp_path / "index.rst").exists()


def test_guide_pages_come_in_reading_order_then_by_name(tmp_path):
    guide = tmp_path / "guide"
    guide.mkdir()
    for name in ("zeta_topic", "optimizers", "alpha_topic", "kernels"):
        (guide / f"{name}.rst").write_text("Title\n=====\n")
    assert guide_pages(guide) == ["kernels", "optimizers", "alpha_topic", "zeta_topic"]
    write_guide_toc(tmp_path)
    toc = (tmp_path / "_guide_toc.txt").read_text()
    assert toc.splitlines()[-4:] == ["   guide/kernels", "   guide/optimizers", "   guide/alpha_topic",
                                     "   guide/zeta_topic"]
    assert "_guide_toc.txt" in (DOCS / "user_guide.rst").read_text()


def test_docstring_markup_slips_are_printed_not_fatal():
    import logging

    from _docstring_warnings import _DocstringWarningsToInfo

    slip = logging.LogRecord("sphinx.docutils", logging.ERROR, "", 0, "Unexpected indentation.", (), None)
    slip.location = "optkernels/new.py:docstring of optkernels.new.f:3"
    page = logging.LogRecord("sphinx.docutils", logging.WARNING, "", 0, "Unknown target.", (), None)
    page.location = "docs/guide/new.rst:12"
    keep = _DocstringWarningsToInfo()
    assert keep.filter(slip) and keep.filter(page)
    assert slip.levelno == logging.INFO and "docstring markup" in slip.getMessage()
    assert page.levelno == logging.WARNING        # a page's own warning still fails a -W build
