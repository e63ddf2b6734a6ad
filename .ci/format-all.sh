#!/usr/bin/env bash
# Format the whole package with the project's ruff settings (pyproject.toml) and apply ruff's safe lint
# fixes. Run once after merging branches (a repository-wide rewrite would conflict with every open branch),
# then commit the result; CI checks `ruff format --check optkernels` and `ruff check optkernels tests bench`
# (tests/ and bench/ are linted, not formatted).
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check --fix optkernels tests bench
ruff format optkernels
ruff check optkernels tests bench
ruff format --check optkernels
