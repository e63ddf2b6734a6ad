"""The dense group's DeepSpeed comparison (bench/cpu_adam.py) runs end to end at a tiny size, says why
DeepSpeed is skipped where it does not import, and its non-temporal limit kernel writes what the plain
one writes; no timing is asserted."""
import importlib.util

import numpy as np
import pytest

pytest.importorskip("torch",
                    reason="the DeepSpeed comparison runs on torch tensors (pip install -e '.[torch]')")


@pytest.fixture
def bench(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import cpu_adam
    import harness
    import targets

    return cpu_adam, harness, targets


def test_deepspeed_comparison_quick(bench):
    cpu_adam, harness, targets = bench
    suite = harness.Suite(quick=True)
    cpu_adam.run(suite, [1000])
    impls = {(r.case.rsplit(", ", 1)[1], r.impl) for r in suite.rows}
    for dtype in ("float32", "bfloat16"):
        expected = {"apply_adam", "optkernels.torch.Adam", "optkernels.torch.Adam(fused=True)",
                    "torch.optim.Adam(fused=True)", "limit (plain stores)"}
        assert {(dtype, impl) for impl in expected} <= impls
    assert ("float32", "limit (non-temporal stores)") in impls
    lines = [t for t in targets.check_targets(suite.rows) if "DeepSpeed" in t]
    if importlib.util.find_spec("deepspeed") is None:
        assert any("skipped" in n and "deepspeed" in n for n in suite.notes)
        assert lines == [f"host Adam vs DeepSpeed CPUAdam, {d}: not measured (needs deepspeed)"
                         for d in ("float32", "bfloat16")]
    else:
        assert ("float32", "DeepSpeed CPUAdam") in impls
        assert len(lines) == 6 and all(("MET" in t) or ("MISSED" in t) for t in lines)


def test_non_temporal_limit_kernel_adds_the_gradient_to_each_array(bench):
    cpu_adam, _, _ = bench
    rng = np.random.default_rng(0)
    arrays = [cpu_adam.line_aligned(rng.standard_normal(1001).astype(np.float32))[3:] for _ in range(4)]
    expected = [a + arrays[3] for a in arrays[:3]]
    cpu_adam.adam_shaped_memory_nt(*arrays)
    for a, e in zip(arrays[:3], expected):
        np.testing.assert_array_equal(a, e)
    with pytest.raises(ValueError, match="offset"):
        cpu_adam.adam_shaped_memory_nt(arrays[0], arrays[1][1:], arrays[2][1:], arrays[3][1:])


def test_paired_ratio_and_the_stated_limit(bench):
    cpu_adam, harness, _ = bench
    assert harness.paired_ratio([2.0, 4.0, 6.0], [1.0, 4.0, 2.0]) == 2.0  # rounds' ratios 2, 1, 3
    suite = harness.Suite()
    samples = {"limit (plain stores)": [0.056], "limit (non-temporal stores)": [0.070], "apply_adam": [0.070]}
    impls = {k: (None, 28) for k in samples}
    cpu_adam._note_limit(suite, "float32", int(1e8), samples, impls)
    assert suite.notes == ["float32 N=1e+08: the physical limit of 28 B/element here is 50.0 GB/s, 56.0 ms a "
                           "step (limit (plain stores)); share of it: apply_adam 80%"]
