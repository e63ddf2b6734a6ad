"""What a newcomer meets first (issue #22): install hints that work from a clone too, torch-style keywords
on the NumPy classes, the out-of-range advice of RowSparse, CPU torch tensors passed to a kernel."""
from __future__ import annotations

import numpy as np
import pytest

from optkernels._install import install_hint
from optkernels.kernels import apply_adam
from optkernels.optimizers import Adam, LazyAdam, Momentum, Parameter
from optkernels.sparse import RowSparse, fused_sparse_lazy_adam


@pytest.mark.parametrize("extra", ["cuda", "mpi", "torch", "demo"])
def test_install_hints_name_both_forms(extra):
    hint = install_hint(extra)
    assert f"pip install 'optkernels[{extra}]'" in hint
    assert f"pip install -e '.[{extra}]'" in hint


def test_the_cuda_hint_of_a_kernel_names_both_forms():
    from optkernels.kernels import _cuda

    assert install_hint("cuda") in _cuda._INSTALL_HINT


def _params():
    return [Parameter(np.ones(3, np.float32), "w")]


@pytest.mark.parametrize("cls, keywords, torch_name, ours", [
    (Adam, {"lr": 1e-3}, "lr", "'learning_rate'"),
    (Momentum, {"lr": 0.1, "momentum": 0.9}, "lr", "'learning_rate'"),
    (LazyAdam, {"betas": (0.9, 0.99)}, "betas", "'beta1' and 'beta2'"),
    (Adam, {"learning_rate": 0.1, "amsgrad": True}, "amsgrad", "'use_amsgrad'"),
])
def test_torch_keywords_name_ours_and_the_torch_classes(cls, keywords, torch_name, ours):
    with pytest.raises(TypeError) as error:
        cls(_params(), **keywords)
    message = str(error.value)
    assert f"For '{cls.__name__}', unexpected keyword argument '{torch_name}'" in message
    assert ours in message and "optkernels.torch" in message


def test_other_unknown_keywords_keep_their_own_error():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['bogus'\]"):
        Adam(_params(), bogus=1)
    optimizer = Adam(_params(), learning_rate=0.5)  # the check stays out of the way of valid calls
    assert optimizer.parameters[0].name == "w"


def test_row_sparse_out_of_range_advice_names_only_what_it_accepts():
    with pytest.raises(IndexError) as error:
        RowSparse(np.array([0, 5]), np.ones((2, 3)), (4, 3))
    message = str(error.value)
    assert "indices[1] = 5 is out of range (0 <= index < 4)" in message
    assert "out_of_range" not in message            # RowSparse takes no such argument
    keep = "(indices >= 0) & (indices < dense_shape[0])"
    assert keep in message
    indices, values = np.array([0, 5, -1, 3]), np.arange(12.0).reshape(4, 3)
    kept = eval(keep, {"indices": indices, "dense_shape": (4, 3)})  # the advice, run as written
    grad = RowSparse(indices[kept], values[kept], (4, 3))
    assert grad.indices.tolist() == [0, 3]


def test_kernels_that_take_out_of_range_still_advise_it():
    table, m, v = (np.zeros((4, 2)) for _ in range(3))
    with pytest.raises(IndexError, match="out_of_range='drop'"):
        fused_sparse_lazy_adam(table, m, v, 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, np.ones((1, 2)), np.array([7]))
    assert not table.any() and not m.any() and not v.any()


def test_a_cpu_torch_tensor_points_to_numpy_and_optkernels_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    var, m, v, g = (torch.ones(3) for _ in range(4))
    with pytest.raises(TypeError) as error:
        apply_adam(var, m, v, 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, g)
    assert "var must be a NumPy array or a CUDA array, got Tensor" in str(error.value)
    assert "var.numpy()" in str(error.value) and "optkernels.torch" in str(error.value)
    assert torch.equal(var, torch.ones(3))
    arrays = [t.numpy() for t in (var, m, v, g)]    # the advice works: the tensor is updated in place
    apply_adam(*arrays[:3], 0.9, 0.999, 0.001, 0.9, 0.999, 1e-8, arrays[3])
    assert not torch.equal(var, torch.ones(3))
