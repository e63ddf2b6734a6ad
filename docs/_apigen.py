"""Write the API reference pages from the public packages' ``__all__``.

One page per package (its docstring and a list of its modules) and one page per defining module (a kernel
family, an optimizer, a schedule module...), holding every public name that module defines, documented
under the package path users import it from (``optkernels.kernels.apply_adam``). A package without
``__all__`` gets one page per public submodule with its documented members. Pages are rewritten only when
their text changes, and pages of names that disappeared are deleted, so incremental builds stay valid.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict
from pathlib import Path
from types import ModuleType

from _formulas import FORMULAS

#: The public packages, in the order of the reference's table of contents.
PACKAGES = (
    "optkernels.kernels",
    "optkernels.sparse",
    "optkernels.optimizers",
    "optkernels.reference",
    "optkernels.conformance",
    "optkernels.torch",
    "optkernels.distributed",
)


def _title(text: str, char: str = "=") -> str:
    return f"{text}\n{char * len(text)}\n"


def _directive(obj: object) -> str:
    if inspect.isclass(obj):
        return "autoclass"
    if callable(obj):
        return "autofunction"
    return "autodata"


def _module_page(package: str, module: str, names: list[tuple[str, object]]) -> str:
    # :no-index: on the module: a package may export a function of the module's name (kernels.lamb).
    lines = [_title(f"``{module}``"), f".. automodule:: {module}", "   :no-members:", "   :no-index:", ""]
    if module in FORMULAS:
        lines += [".. math::", "", *("   " + line for line in FORMULAS[module].strip().splitlines()), ""]
    lines += [f".. currentmodule:: {package}", ""]
    for name, obj in names:
        lines.append(f".. {_directive(obj)}:: {name}")
        if inspect.isclass(obj):
            lines.append("   :members:")
        lines.append("")
    return "\n".join(lines)


def _submodule_page(module: str) -> str:
    return "\n".join([_title(f"``{module}``"), f".. automodule:: {module}", "   :members:", ""])


def _package_pages(package: str) -> dict[str, str]:
    """``{relative path: text}`` of a package's pages."""
    mod: ModuleType = importlib.import_module(package)
    short = package.rsplit(".", 1)[-1]
    pages: dict[str, str] = {}
    entries: list[str] = []
    public = getattr(mod, "__all__", None)
    if public is not None:
        by_module: dict[str, list[tuple[str, object]]] = defaultdict(list)
        for name in public:
            obj = getattr(mod, name)
            home = getattr(obj, "__module__", None) or package
            if inspect.ismodule(obj):
                home = obj.__name__
            by_module[home].append((name, obj))
        for module in sorted(by_module):
            stem = module.rsplit(".", 1)[-1].lstrip("_") if module != package else "package"
            pages[f"{short}/{stem}.rst"] = _module_page(package, module, by_module[module])
            entries.append(f"{short}/{stem}")
    else:
        for info in pkgutil.iter_modules(mod.__path__):
            if info.name.startswith("_"):
                continue
            module = f"{package}.{info.name}"
            pages[f"{short}/{info.name}.rst"] = _submodule_page(module)
            entries.append(f"{short}/{info.name}")
    toc = "\n".join(f"   {entry}" for entry in entries)
    pages[f"{short}.rst"] = "\n".join([
        _title(f"``{package}``"), f".. automodule:: {package}", "   :no-members:", "",
        ".. toctree::", "   :maxdepth: 1", "", toc, ""])
    return pages


def generate_api_pages(root: Path) -> None:
    """Write every API page under ``root`` (``root/index.rst`` is the reference's front page)."""
    pages: dict[str, str] = {}
    for package in PACKAGES:
        pages.update(_package_pages(package))
    toc = "\n".join(f"   {p.rsplit('.', 1)[-1]}" for p in PACKAGES)
    pages["index.rst"] = "\n".join([
        _title("API reference"),
        "Every public name of the packages below, generated from the docstrings. Each page is one kernel",
        "family, one optimizer or one module, documented under the path you import it from.", "",
        ".. toctree::", "   :maxdepth: 2", "", toc, ""])
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in pages.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    for path in root.rglob("*.rst"):
        if path.relative_to(root).as_posix() not in pages:
            path.unlink()
