"""The benchmark suite's ``torch`` group runs end to end (quick mode) and its targets are read from its rows;
no timing is asserted (speed targets live in bench/, checked by bench/targets.py)."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch bench group needs PyTorch (pip install -e '.[torch]')")

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_torch_group_quick(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import torch_step
    from harness import Suite
    from targets import check_targets

    suite = Suite(quick=True)
    torch_step.run(suite)
    impls = {r.impl for r in suite.rows}
    assert set(torch_step.IMPLS.values()) <= impls
    assert {r.n for r in suite.rows if r.case == torch_step.CASE} == {529000, 1843432}
    assert all(r.seconds > 0 for r in suite.rows)
    lines = [line for line in check_targets(suite.rows) if "optkernels.torch.Adam," in line]
    assert len(lines) == 4 and all(("MET" in line) or ("MISSED" in line) for line in lines)
    # the per-class rows (quick: SGD with momentum and SparseAdam, small model): ours and each torch path
    assert {"optkernels.torch.SGD (momentum)", "torch SGD (momentum) (fused)", "torch SGD (momentum) (foreach)",
            "torch SGD (momentum) (forloop)", "optkernels.torch.SparseAdam", "torch SparseAdam (default)"} <= impls
    sparse = [r for r in suite.rows if r.impl == "optkernels.torch.SparseAdam"]
    assert [r.n for r in sparse] == [1000 * 64]  # the embedding table alone
    lines = [line for line in check_targets(suite.rows) if "fastest CPU path (torch " in line]
    assert len(lines) == 2 and all(("MET" in line) or ("MISSED" in line) for line in lines)
    sys.modules.pop("torch_step", None)
