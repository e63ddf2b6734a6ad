"""optkernels.torch.Adam/AdamW's short path for float16/bfloat16 CPU parameters (one group of half tensors;
``_half_step.HalfStep``) against torch.optim.Adam/AdamW (``foreach=False``), bit for bit, through what a
training loop does between steps: gradients zeroed in place or replaced, ``lr`` changed by a schedule,
torch's thread count changed, ``p.data`` replaced, a gradient dropped, a state tensor replaced, a
state_dict loaded, a group added, AMP's ``found_inf`` set, a step hook, a closure. Each change either keeps
the short path (the same bits as torch) or sends the step to the generic one, which raises or routes as
torch does."""

import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from short_paths import (  # noqa: E402
    check_steps_that_leave_the_short_path,
    equal,
    grads,
    same_state,
    twins,
)

pytestmark = pytest.mark.filterwarnings("ignore:.*own implementation:UserWarning")

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
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
    threads = torch.get_num_threads()
    used = 0
    try:
        for k in range(10):
            grads((tp, op), k, fresh=k % 3 == 0)
            if k == 4:  # a schedule's new lr: new scalars on the short path
                topt.param_groups[0]["lr"] = oopt.param_groups[0]["lr"] = 0.0037
            if k == 6:  # torch's tails follow its thread count
                torch.set_num_threads(1 if threads > 1 else 2)
            ready = oopt._fast is not None
            topt.step()
            oopt.step()
            used += ready and oopt._fast is not None
            assert equal(tp, op), k
            same_state(topt, oopt, tp, op)
    finally:
        torch.set_num_threads(threads)
    assert used >= 8, "the short path was not taken"


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


def test_changes_between_steps_leave_the_short_path_as_torch_would():
    (tp, topt), (op, oopt) = twins("Adam", torch.bfloat16)
    saved = {}
    changes = {
        2: lambda ps, opt: setattr(ps[1], "data", torch.full((40000,), 0.5, dtype=torch.bfloat16)),
        4: lambda ps, opt: saved.setdefault(id(opt), _copied_state(opt)),
        6: lambda ps, opt: opt.load_state_dict(saved[id(opt)]),
        8: _replace_moment,
        10: _swap_moment_memory,
        12: lambda ps, opt: opt.param_groups[0].update(betas=(0.85, 0.995)),
        14: lambda ps, opt: setattr(ps[0], "grad", None),  # a frozen parameter: not stepped
        16: lambda ps, opt: opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(5).bfloat16())]}),
    }
    used = 0
    for k in range(19):
        grads((tp, op), k, fresh=k % 4 == 0)
        if k in changes:
            for ps, opt in ((tp, topt), (op, oopt)):
                changes[k](ps, opt)
        ready = oopt._fast is not None
        topt.step()
        oopt.step()
        used += ready and oopt._fast is not None
        assert equal(tp, op), k
        same_state(topt, oopt, tp, op)
        assert list(topt.state_dict()["state"]) == list(oopt.state_dict()["state"]), k
    assert used >= 6, "the short path was not taken"


def test_found_inf_hooks_closure_and_bad_input_take_the_generic_step():
    check_steps_that_leave_the_short_path(twins("Adam", torch.bfloat16), lambda opt: opt._fast is not None)
