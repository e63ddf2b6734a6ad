"""Non-finite values on CUDA arrays: every dense and sparse kernel shows the float64 reference's NaN/inf
pattern (the check and the policy: tests/nonfinite.py), float32 only (the simulator is slow)."""
import numpy as np
import pytest

from nonfinite import mismatches
from optkernels.conformance.cases import CASES
from optkernels.kernels import _cuda

# The simulator evaluates device code on NumPy scalars, which warn about IEEE results (inf - inf...).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_nonfinite_pattern_matches_reference_on_cuda(case):
    problems = mismatches(case, np.float32, to_device=_cuda.to_device, to_host=_cuda.to_host)
    assert not problems, f"{case.name} (cuda):\n  " + "\n  ".join(problems)
