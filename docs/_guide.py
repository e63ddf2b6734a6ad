"""The user guide's table of contents, built from the folder: the package's own pages first, in reading
order, then every other ``guide/*.rst`` in name order, so a page added there joins without edits."""
from __future__ import annotations

from pathlib import Path

#: The user guide's first pages, in reading order.
GUIDE_ORDER = ["kernels", "sparse", "optimizers", "schedules", "low_precision", "torch", "distributed",
               "verify", "threads", "demo"]


def guide_pages(guide: Path) -> list[str]:
    """The page names of ``guide`` in table-of-contents order."""
    present = {p.stem for p in guide.glob("*.rst")}
    return [p for p in GUIDE_ORDER if p in present] + sorted(present - set(GUIDE_ORDER))


def write_guide_toc(docs: Path) -> None:
    """Write ``docs/_guide_toc.txt`` (included by user_guide.rst) when its text changes."""
    text = ".. toctree::\n   :maxdepth: 2\n\n" + "".join(f"   guide/{p}\n" for p in guide_pages(docs / "guide"))
    path = docs / "_guide_toc.txt"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
