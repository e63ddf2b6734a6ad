"""optkernels.torch.Adam/AdamW's short path for float32/float64 CPU parameters (one group, one launch table;
``_float_step.FloatStep``) against torch.optim.Adam/AdamW (``foreach=False``), bit for bit, through what a
training loop does between steps: gradients zeroed in place or replaced, ``lr`` and ``betas`` changed,
torch's and Numba's thread count changed, ``p.data`` replaced, a gradient dropped, a state tensor replaced
or its memory swapped, a state_dict loaded, a group added, AMP's ``found_inf`` set, a step hook, a closure.
Each change either keeps the short path (the same bits as torch) or sends the step to the generic one, which
raises or routes as torch does."""

import numba
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels.kernels.torch_rules import IEEE_SQRT  # noqa: E402
from optkernels.torch._float_step import FloatStep  # noqa: E402
from optkernels.torch._sqrt import ENVIRONMENT, sqrt_kernel  # noqa: E402
from short_paths import (  # noqa: E402
    check_steps_that_leave_the_short_path,
    equal,
    grads,
    same_state,
    step_both,
    twins,
)

pytestmark = pytest.mark.filterwarnings("ignore:.*own implementation:UserWarning")


@pytest.fixture(autouse=True)
def _torchs_sqrt(monkeypatch):
    """optkernels computes torch's own sqrt where it reproduces it (an MKL kernel); elsewhere torch's
    reference steps run with an IEEE sqrt (see tests/test_torch_bits.py)."""
    monkeypatch.setenv(ENVIRONMENT, "torch")
    for dtype in (np.float32, np.float64):
        if sqrt_kernel(np.dtype(dtype)) == IEEE_SQRT:
            monkeypatch.setattr(torch.Tensor, "sqrt", _ieee_sqrt)
            break


def _ieee_sqrt(self):
    return torch.from_numpy(np.sqrt(self.detach().numpy()))


def _short(opt):
    return isinstance(opt._fast, FloatStep)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "cls, kwargs",
    [
        ("Adam", {}),
        ("Adam", dict(weight_decay=0.1, maximize=True, amsgrad=True)),
        ("AdamW", dict(weight_decay=0.05, betas=(0.8, 0.99))),
    ],
)
def test_short_path_keeps_torchs_bits(dtype, cls, kwargs):
    (tp, topt), (op, oopt) = twins(cls, dtype, **kwargs)
    threads, numba_threads = torch.get_num_threads(), numba.get_num_threads()
    used = 0
    try:
        for k in range(10):
            grads((tp, op), k, fresh=k % 3 == 0)
            if k == 4:  # a schedule's new lr: new scalars on the short path
                topt.param_groups[0]["lr"] = oopt.param_groups[0]["lr"] = 0.0037
            if k == 6:  # other thread counts: other chunks per thread, the same bits
                torch.set_num_threads(1 if threads > 1 else 2)
                numba.set_num_threads(1)
            used += step_both(((tp, topt), (op, oopt)), _short)
            same_state(topt, oopt, tp, op)
    finally:
        torch.set_num_threads(threads)
        numba.set_num_threads(numba_threads)
    assert used >= 8, "the short path was not taken"
    assert [float(oopt.state[p]["step"]) for p in op] == [10.0] * 3


def test_a_large_list_runs_on_every_thread_with_the_same_bits():
    """A list above the serial threshold: the launch's balanced table for the calling thread's count."""
    (tp, topt), (op, oopt) = twins("Adam", torch.float32, sizes=(300_001, 77, 70_000))
    numba_threads = numba.get_num_threads()
    used = 0
    try:
        for k in range(6):
            grads((tp, op), k, fresh=False)
            if k == 3:
                numba.set_num_threads(1)
            used += step_both(((tp, topt), (op, oopt)), _short)
    finally:
        numba.set_num_threads(numba_threads)
    assert used >= 4, "the short path was not taken"
    same_state(topt, oopt, tp, op)


@pytest.mark.parametrize("cls, amsgrad", [("Adam", False), ("AdamW", False), ("Adam", True)])
def test_a_list_of_large_parts_takes_the_prefetching_loop_with_the_same_bits(cls, amsgrad):
    """A list whose parts hold 2**20 elements or more on every thread: the prefetching multi-tensor loop
    (``_torch_adam.prefetch_large``; amsgrad: ``_torch_adam_amsgrad``'s), on the generic step and the short
    path, torch's bits."""
    sizes = (numba.get_num_threads() * 2**20 + 4099, 77, 70_000)
    (tp, topt), (op, oopt) = twins(cls, torch.float32, sizes=sizes, weight_decay=0.01, amsgrad=amsgrad)
    used = 0
    for k in range(4):
        grads((tp, op), k, fresh=k == 0)
        used += step_both(((tp, topt), (op, oopt)), _short)
    assert used >= 2, "the short path was not taken"
    assert oopt._fast.large is not None
    same_state(topt, oopt, tp, op)


def _copied_state(opt):
    """A deep copy of ``opt.state_dict()`` (state tensors cloned)."""
    sd = opt.state_dict()
    state = {k: {n: v.clone() for n, v in s.items()} for k, s in sd["state"].items()}
    return {"state": state, "param_groups": [dict(g) for g in sd["param_groups"]]}


def _replace_moment(ps, opt):
    avg = opt.state[ps[2]]["exp_avg"]
    opt.state[ps[2]]["exp_avg"] = avg * 0.5


def _swap_moment_memory(ps, opt):
    sq = opt.state[ps[1]]["exp_avg_sq"]
    sq.data = sq.clone() * 2.0  # the same tensor object, new memory


def _scale_moment_in_place(ps, opt):
    opt.state[ps[0]]["exp_avg"].mul_(0.25)  # the same memory: the short path reads it


def test_changes_between_steps_leave_the_short_path_as_torch_would():
    (tp, topt), (op, oopt) = twins("Adam", torch.float32)
    saved = {}
    changes = {
        2: lambda ps, opt: setattr(ps[1], "data", torch.full((40000,), 0.5)),
        4: lambda ps, opt: saved.setdefault(id(opt), _copied_state(opt)),
        6: lambda ps, opt: opt.load_state_dict(saved[id(opt)]),
        8: _replace_moment,
        10: _swap_moment_memory,
        11: _scale_moment_in_place,
        12: lambda ps, opt: opt.param_groups[0].update(betas=(0.85, 0.995)),
        14: lambda ps, opt: setattr(ps[0], "grad", None),  # a frozen parameter: not stepped
        16: lambda ps, opt: opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(5))]}),
    }
    used = 0
    for k in range(19):
        grads((tp, op), k, fresh=k % 4 == 0)
        if k in changes:
            for ps, opt in ((tp, topt), (op, oopt)):
                changes[k](ps, opt)
        ready = _short(oopt)
        topt.step()
        oopt.step()
        used += ready and _short(oopt)
        assert equal(tp, op), k
        same_state(topt, oopt, tp, op)
        assert list(topt.state_dict()["state"]) == list(oopt.state_dict()["state"]), k
    assert used >= 6, "the short path was not taken"


def test_found_inf_hooks_closure_and_bad_input_take_the_generic_step():
    check_steps_that_leave_the_short_path(twins("Adam", torch.float32), _short)
