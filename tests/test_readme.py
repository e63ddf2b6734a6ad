"""README.md: its Python examples run as written (in a temporary working directory), it stays short, and
the commands it gives are the ones CI runs."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
BASH = [line.strip() for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S)
        for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = BLOCKS[index]
    if "import torch" in code:
        pytest.importorskip("torch", reason="the PyTorch quick start needs torch (pip install -e '.[torch]')")
    if "my_apply_adam" in code:  # the vectors example checks a user's kernel: use ours, on exported vectors
        from optkernels.conformance import vectors
        from optkernels.kernels import apply_adam

        vectors.export("vectors/", cases=1, only=["apply_adam"])
        code = code.replace("my_apply_adam", "apply_adam") + "\nassert failures == []\n"
        exec(compile(code, f"README block {index}", "exec"), {"apply_adam": apply_adam})
        return
    exec(compile(code, f"README block {index}", "exec"), {})


def test_readme_first_example_prints_the_published_result(capsys):
    exec(compile(BLOCKS[0], "README block 0", "exec"), {})
    assert "0.9996838" in capsys.readouterr().out


def test_readme_has_one_example_per_use_and_fits_two_screens():
    assert len(README.splitlines()) <= 200
    headings = re.findall(r"^## (.*)$", README, flags=re.M)
    for use in ("backend", "Verifying", "NumPy", "PyTorch"):
        assert any(use in h for h in headings), (use, headings)
    assert len(BLOCKS) == 4


def test_the_two_commands_are_what_ci_runs():
    install_and_demo, install_and_test = BASH[0], BASH[1]
    assert install_and_demo == "python -m pip install -e . && python -m optkernels demo"
    assert install_and_test == 'python -m pip install -e ".[test]" && python -m pytest'
    ci_lines = [line.strip() for line in CI.splitlines()]
    assert "python -m pytest" in ci_lines                      # the whole suite, exactly as README runs it
    assert any(line.startswith("python -m optkernels demo") for line in ci_lines)
    assert (ROOT / "tests" / "test_suites.py").exists()          # the CUDA-simulator and MPI runs, from pytest


def test_documented_docs_and_lint_commands_run_in_ci():
    ci_lines = {line.strip() for line in CI.splitlines()}
    checked = 0
    for line in BASH:
        for command in line.split("#")[0].split("&&"):
            command = command.strip()
            if command.startswith(("python -m sphinx", "ruff ", "mypy")):
                assert command in ci_lines, command
                checked += 1
    assert checked == 5
    assert (ROOT / "docs" / "conf.py").exists() and (ROOT / "docs" / "index.rst").exists()
