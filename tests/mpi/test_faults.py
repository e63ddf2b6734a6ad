"""Faults across ranks: an overflow on one rank under a dynamic loss scale makes every rank skip the step
(nothing changes anywhere, every rank lowers its scale alike); the global finiteness flag; an error on one
rank raised on every rank (naming it) with nothing written; ranks out of step; hyper-parameters and loaded
states that differ; non-finite gradients named by the rank that produced them. (An uncaught exception
ending every rank is tested by launching mpiexec: tests/test_distributed_faults.py.)"""
import numpy as np
import pytest

from optkernels.distributed import all_finite, reduce_gradients, set_nonfinite
from optkernels.optimizers import (
    Adam,
    AdamWeightDecay,
    DynamicLossScaleManager,
    ExponentialDecayLR,
    Parameter,
    loss_scaled_step,
)


def params():
    rng = np.random.default_rng(0)
    return [Parameter(rng.standard_normal((6, 4)).astype(np.float32), "w"),
            Parameter(rng.standard_normal(5).astype(np.float32), "b"),
            Parameter(rng.standard_normal(7).astype(np.float32), "c")]


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_overflow_on_one_rank_skips_everywhere(comm, bad):
    rank, size = comm.Get_rank(), comm.Get_size()
    ps = params()
    opt = Adam(ps, learning_rate=0.01, comm=comm)
    manager = DynamicLossScaleManager(init_loss_scale=1024.0, scale_factor=2, scale_window=10)
    good = [np.full(p.shape, 2.0, np.float32) for p in ps]
    applied, scale = loss_scaled_step(opt, good, manager)
    assert applied and scale == 1024.0
    before = [p.data.copy() for p in ps]
    state = opt.state_dict()
    grads = [g.copy() for g in good]
    if rank == size - 1:                 # only the last rank overflows, in a parameter it may not own
        grads[2][3] = bad
    applied, scale = loss_scaled_step(opt, grads, manager)
    assert not applied and scale == 512.0
    assert all(p.data.tobytes() == b.tobytes() for p, b in zip(ps, before))
    after = opt.state_dict()
    assert all(after[k].tobytes() == state[k].tobytes() for k in state)
    assert comm.allgather(scale) == [512.0] * size


def test_reduced_overflow_and_the_global_flag(comm):
    rank = comm.Get_rank()
    g = np.ones(5, np.float32)
    if rank == 0:
        g[1] = np.inf
    reduced = reduce_gradients([g], comm)[0]
    assert not np.isfinite(reduced[1]) and np.isfinite(reduced[0])
    assert all_finite([g], comm) is False
    assert all_finite([np.ones(3, np.float32)], comm) is True


# ------------------------------------------------------------------------------ failures agreed by every rank

def snapshot(opt, ps):
    return [p.data.tobytes() for p in ps], {k: v.tobytes() for k, v in opt.state_dict().items()}


def last_rank(comm):
    return comm.Get_rank() == comm.Get_size() - 1


def test_bad_gradient_on_one_rank_raises_on_every_rank(comm):
    """opt.step's validation fails on the last rank only: every rank raises it, nothing changes anywhere,
    and the ranks stay in step (the next good step runs everywhere)."""
    size = comm.Get_size()
    ps = params()
    opt = Adam(ps, learning_rate=0.01, comm=comm)
    good = [np.ones(p.shape, np.float32) for p in ps]
    before = snapshot(opt, ps)
    grads = [np.ones((3, 3), np.float32) if last_rank(comm) and k == 0 else g for k, g in enumerate(good)]
    with pytest.raises(ValueError, match=f"Adam.step', rank {size - 1} of {size} failed: .*gradient of w"):
        opt.step(grads)
    assert snapshot(opt, ps) == before
    assert opt.step(good) is True


def test_reduce_gradients_bad_input_on_one_rank(comm):
    size = comm.Get_size()
    g = np.arange(4) if last_rank(comm) else np.ones(4, np.float32)
    with pytest.raises(TypeError, match=f"rank {size - 1} of {size} failed: .*floating dtype"):
        reduce_gradients([g], comm)
    with pytest.raises(TypeError, match=f"rank {size - 1} of {size} failed"):
        all_finite(["no"] if last_rank(comm) else [np.ones(2)], comm)


def test_a_skipped_step_is_an_error_not_a_hang(comm):
    """The last rank leaves out one opt.step between two reductions: the next call pairs a step with a
    reduction, which every rank reports."""
    ps = params()
    opt = Adam(ps, learning_rate=0.01, comm=comm)
    good = [np.ones(p.shape, np.float32) for p in ps]
    opt.step(reduce_gradients(good, comm))
    with pytest.raises(RuntimeError, match="not in the same call.*Adam.step.*reduce_gradients|"
                                           "not in the same call.*reduce_gradients.*Adam.step"):
        grads = reduce_gradients(good, comm)
        if not last_rank(comm):
            opt.step(grads)
        else:
            reduce_gradients(good, comm)


@pytest.mark.parametrize("field, build", [
    ("learning rates", lambda ps, c, r: Adam(ps, learning_rate=0.01 * (1 + r), comm=c)),
    ("loss_scale", lambda ps, c, r: Adam(ps, learning_rate=0.01, loss_scale=1.0 + r, comm=c)),
    ("weight decays", lambda ps, c, r: Adam(ps, learning_rate=0.01, weight_decay=1e-3 * r, comm=c)),
    ("beta1", lambda ps, c, r: Adam(ps, learning_rate=0.01, beta1=0.9 - 0.1 * r, comm=c)),
    ("rule", lambda ps, c, r: (Adam if r == 0 else AdamWeightDecay)(ps, learning_rate=0.01, comm=c)),
    ("learning rates", lambda ps, c, r: Adam(ps, learning_rate=ExponentialDecayLR(0.1, 0.9 - 0.1 * r, 4),
                                             comm=c)),
])
def test_hyper_parameters_that_differ_raise_on_every_rank(comm, field, build):
    """Construction or, for what a subclass sets after the base class, the first step (before anything is
    written) names the field and the ranks' values."""
    odd = int(last_rank(comm))
    ps = params()
    good = [np.ones(p.shape, np.float32) for p in ps]
    before = [p.data.tobytes() for p in ps]
    last = comm.Get_size() - 1
    with pytest.raises(ValueError, match=f"differ across ranks: .*{field}.*rank 0: .*rank {last}"):
        build(ps, comm, odd).step(good)
    assert [p.data.tobytes() for p in ps] == before


def test_loaded_states_that_differ_raise_on_every_rank(comm):
    """Every rank loads a valid state, but the last rank's is from another step: all raise, none writes."""
    ps = params()
    single = Adam(params(), learning_rate=0.01)
    good = [np.ones(p.shape, np.float32) for p in ps]
    single.step(good)
    state = single.state_dict()
    if last_rank(comm):
        single.step(good)
        state = single.state_dict()
    opt = Adam(ps, learning_rate=0.01, comm=comm)
    before = snapshot(opt, ps)
    with pytest.raises(ValueError, match="loaded beta1_power .*rank 0: .*rank"):
        opt.load_state_dict(state)
    assert snapshot(opt, ps) == before


# ------------------------------------------------------------------------------ non-finite gradients

@pytest.mark.parametrize("mode", ["skip", "raise", "warn"])
def test_nonfinite_gradient_of_one_rank_is_named(comm, mode):
    """A NaN in the last rank's own gradient: reduce_gradients spreads it (as MindSpore's sum does) and
    remembers where it came from; the parallel step skips / raises / warns on every rank, naming it."""
    size = comm.Get_size()
    ps = params()
    opt = Adam(ps, learning_rate=0.01, comm=comm)
    set_nonfinite(opt, mode)
    mine = [np.ones(p.shape, np.float32) for p in ps]
    if last_rank(comm):
        mine[1][2] = np.nan
    grads = reduce_gradients(mine, comm)
    before = snapshot(opt, ps)
    named = rf"\['b'\] \(produced by rank\(s\) \[{size - 1}\]"
    if mode == "raise":
        with pytest.raises(FloatingPointError, match=named):
            opt.step(grads)
    else:
        with pytest.warns(RuntimeWarning, match=named):
            applied = opt.step(grads)
        assert applied is (mode == "warn")
    assert (snapshot(opt, ps) == before) is (mode != "warn")
    assert bool(np.isnan(ps[1].data[2])) == (mode == "warn")


def test_nonfinite_defaults_and_reduce_gradients_raise(comm):
    """With a loss scale (MindSpore's overflow rule) the parallel step skips by default; reduce_gradients
    with nonfinite='raise' names the rank and the gradient before summing."""
    size = comm.Get_size()
    ps = params()
    opt = Adam(ps, learning_rate=0.01, loss_scale=4.0, comm=comm)
    mine = [np.ones(p.shape, np.float32) for p in ps]
    if last_rank(comm):
        mine[2][0] = np.inf
    before = snapshot(opt, ps)
    with pytest.warns(RuntimeWarning, match="skipped on every rank"):
        assert opt.step(reduce_gradients(mine, comm)) is False
    assert opt._parallel.nonfinite == "skip" and snapshot(opt, ps) == before
    with pytest.raises(FloatingPointError, match=rf"rank {size - 1}: grads\[2\]"):
        reduce_gradients(mine, comm, nonfinite="raise")


def test_ranks_that_own_no_parameter_agree(comm):
    """One parameter over several ranks: the ranks without a share hold no slots, and their configurations
    still compare equal (a rank's share of the slots is not configuration)."""
    w = Parameter(np.ones(3, np.float32), "w")
    opt = Adam([w], learning_rate=0.5, comm=comm)
    for _ in range(2):
        assert opt.step([np.ones(3, np.float32)]) is True
    single = Parameter(np.ones(3, np.float32), "w")
    ref = Adam([single], learning_rate=0.5)
    for _ in range(2):
        ref.step([np.ones(3, np.float32)])
    assert w.data.tobytes() == single.data.tobytes()
