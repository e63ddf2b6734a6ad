"""The update rules as LaTeX, shown at the top of each kernel family's and optimizer's API page.

Keyed by the defining module. The docstrings carry the exact arithmetic (order of operations, dtypes);
these are the same rules as mathematics, for reading.
"""
FORMULAS: dict[str, str] = {}
