"""The parallel optimizer (comm=, ZeRO-1): parameters bit-identical on every rank to one process fed the
same reduced gradients, for every optimizer of the table and every scenario (groups, decay, loss scale,
dynamic lr, order_params); slots only for the rank's share; consolidated state; resume across world sizes;
the digest check."""
import dataclasses
import functools

import numpy as np
import pytest

import optkernels.distributed  # noqa: F401  (installs the parallel optimizer)
from optim_table import MODEL, OPTIMIZERS, SCENARIOS, make_data, make_params, run_optimizer, scenario
from optkernels.distributed import assign_owners, reduce_gradients
from optkernels.optimizers import LARS, AdaFactor, Adam, Lamb, LazyAdam, Momentum, Parameter
from optkernels.sparse import RowSparse


def with_comm(info, comm):
    return dataclasses.replace(info, cls=functools.partial(info.cls, comm=comm))


def same_everywhere(comm, arrays):
    every = comm.allgather(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays))
    return all(b == every[0] for b in every)


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("info", OPTIMIZERS, ids=lambda i: i.id)
def test_bit_identical_to_one_process(comm, info, name):
    init, grads = make_data(np.float32, seed=3)
    single, want = run_optimizer(info, scenario(info, name, np.float32), init, grads)
    sharded, got = run_optimizer(with_comm(info, comm), scenario(with_comm(info, comm), name, np.float32),
                                 init, grads)
    for pname in want:
        assert got[pname].data.tobytes() == want[pname].data.tobytes(), pname
    assert same_everywhere(comm, [got[n].data for n, _ in MODEL])
    assert sharded.global_step == single.global_step
    # each rank holds the slots of its own parameters only, and together they are the whole state
    owned = {p.name for p, o in zip(sharded.parameters, sharded._parallel.owners) if o == comm.Get_rank()}
    mine = sharded.state_dict()
    full = single.state_dict()
    assert {k for k in mine if "." in k and not k.startswith("share.")} == {
        k for k in full if "." in k and k.partition(".")[2] in owned}
    assert (int(mine["share.rank"]), int(mine["share.world_size"])) == (comm.Get_rank(), comm.Get_size())
    whole = sharded.consolidated_state_dict(root=None)
    assert list(whole) == list(full)
    for key in full:
        assert whole[key].dtype == full[key].dtype and whole[key].tobytes() == full[key].tobytes(), key


def model_params(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(shape).astype(dtype), name) for name, shape in MODEL]


def test_reduced_gradients_flow_matches_one_process(comm):
    """Each rank its own gradients -> reduce_gradients -> parallel step == one process fed the average."""
    rank = comm.Get_rank()
    params, ref = model_params(), model_params()
    opt = Adam(params, learning_rate=0.01, weight_decay=1e-3, loss_scale=2.0, comm=comm)
    single = Adam(ref, learning_rate=0.01, weight_decay=1e-3, loss_scale=2.0)
    rng = np.random.default_rng(100 + rank)
    for _ in range(3):
        local = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        reduced = reduce_gradients(local, comm)
        opt(reduced)
        single(reduced)
    for a, b in zip(params, ref):
        assert a.data.tobytes() == b.data.tobytes()


def test_slots_only_for_the_share(comm):
    size = comm.Get_size()
    params = [Parameter(np.zeros(n, np.float32), f"p{k}") for k, n in enumerate([1000, 10, 500, 400, 90])]
    opt = Adam(params, comm=comm)
    owners = opt._parallel.owners
    assert owners == assign_owners([p.data.nbytes for p in params], size)
    mine = sum(a.nbytes for k, a in opt.state_dict().items() if a.ndim and not k.startswith("share."))
    assert mine == 2 * sum(p.data.nbytes for p, o in zip(params, owners) if o == comm.Get_rank())
    assert len(opt.moment1) == owners.count(comm.Get_rank())
    total = comm.allreduce(mine)
    assert total == 2 * sum(p.data.nbytes for p in params)


def test_resume_across_world_sizes(comm, tmp_path):
    init, grads = make_data(np.float32, seed=5, steps=4)
    names = [n for n, _ in MODEL]

    def run(opt, steps):
        for g in steps:
            opt(tuple(g[n] for n in names))

    # one process, 4 steps
    ref_params = make_params(init)
    ref = Adam(ref_params, learning_rate=0.01)
    run(ref, grads)
    # one process 2 steps -> its state into a parallel optimizer -> 2 more steps
    a_params = make_params(init)
    a = Adam(a_params, learning_rate=0.01)
    run(a, grads[:2])
    b = Adam(a_params, learning_rate=0.01, comm=comm)
    b.load_state_dict(a.state_dict())
    run(b, grads[2:])
    assert all(x.data.tobytes() == y.data.tobytes() for x, y in zip(a_params, ref_params))
    # parallel 2 steps -> consolidated -> one process 2 more steps
    c_params = make_params(init)
    c = Adam(c_params, learning_rate=0.01, comm=comm)
    run(c, grads[:2])
    state = c.consolidated_state_dict(root=0)
    if comm.Get_rank() != 0:
        assert state is None
        state = comm.bcast(None, root=0)
    else:
        comm.bcast(state, root=0)
    d = Adam(c_params, learning_rate=0.01)
    d.load_state_dict(state)
    run(d, grads[2:])
    assert all(x.data.tobytes() == y.data.tobytes() for x, y in zip(c_params, ref_params))
    # each rank's own share round-trips through np.savez at the same world size
    share = c.state_dict()
    path = tmp_path / f"share-{comm.Get_rank()}.npz"
    np.savez(path, **share)
    f_params = make_params(init)
    f = Adam(f_params, learning_rate=0.01, comm=comm)
    f.load_state_dict(np.load(path))
    assert all(f.state_dict()[k].tobytes() == share[k].tobytes() for k in share)
    # a state with a wrong entry for a parameter of one rank is refused on every rank, naming that rank
    bad = dict(ref.state_dict())
    bad["moment1.fc.weight"] = bad["moment1.fc.weight"].astype(np.float64)
    e = Adam(make_params(init), learning_rate=0.01, comm=comm)
    before = e.state_dict()
    owner = e._parallel.owners[names.index("fc.weight")]
    with pytest.raises(TypeError, match=f"rank {owner} of .*moment1.fc.weight"):
        e.load_state_dict(bad)
    assert all(e.state_dict()[k].tobytes() == v.tobytes() for k, v in before.items())


@pytest.mark.parametrize("build", [
    lambda ps, c: Lamb(ps, learning_rate=0.01, weight_decay=0.01, comm=c),
    lambda ps, c: AdaFactor(ps, learning_rate=None, weight_decay=0.01, comm=c),
    lambda ps, c: LARS(Momentum(ps, 0.1, 0.9, weight_decay=1e-3, comm=c), comm=c),
], ids=["Lamb", "AdaFactor", "LARS"])
def test_other_optimizers(comm, build):
    params, ref = model_params(1), model_params(1)
    opt, single = build(params, comm), build(ref, None)
    rng = np.random.default_rng(7)
    for _ in range(3):
        g = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        opt(g)
        single(g)
    for a, b in zip(params, ref):
        assert a.data.tobytes() == b.data.tobytes(), a.name
    whole = opt.consolidated_state_dict(root=None)
    full = single.state_dict()
    assert sorted(whole) == sorted(full)
    assert all(whole[k].tobytes() == full[k].tobytes() for k in full)


def test_row_sparse_gradients(comm):
    rng = np.random.default_rng(2)
    init = [rng.standard_normal((50, 4)).astype(np.float32), rng.standard_normal(6).astype(np.float32)]
    params = [Parameter(init[0].copy(), "table"), Parameter(init[1].copy(), "w")]
    ref = [Parameter(init[0].copy(), "table"), Parameter(init[1].copy(), "w")]
    opt, single = LazyAdam(params, 0.01, comm=comm), LazyAdam(ref, 0.01)
    for step in range(3):
        local = RowSparse(np.random.default_rng(step * 10 + comm.Get_rank()).integers(0, 50, 9),
                          np.ones((9, 4), np.float32) * (step + 1), (50, 4))
        grads = reduce_gradients([local, np.full(6, 0.5, np.float32)], comm)
        opt(grads)
        single(grads)
    for a, b in zip(params, ref):
        assert a.data.tobytes() == b.data.tobytes()


def test_mismatched_parameters_raise_on_every_rank(comm):
    if comm.Get_size() == 1:
        pytest.skip("needs at least two ranks")
    params = model_params()
    if comm.Get_rank() == 1:
        params = params[:-1]
    with pytest.raises(ValueError, match="differ across ranks"):
        Adam(params, comm=comm)
    assert comm.allreduce(1) == comm.Get_size()


def test_bad_comm():
    with pytest.raises(TypeError, match="comm"):
        Adam(model_params(), comm=object())


def test_large_parameters_broadcast_in_place(comm):
    """Parameters of 1 MiB or more go in place, the small ones packed: both arrive bit for bit."""
    def build():
        rng = np.random.default_rng(4)
        return [Parameter(rng.standard_normal(n).astype(np.float32), f"p{k}")
                for k, n in enumerate([300_000, 270_000, 10, 33, 5, 7])]
    params, ref = build(), build()
    opt, single = Adam(params, 0.01, comm=comm), Adam(ref, 0.01)
    assert any(large for large, _ in opt._parallel._sends) and any(small for _, small in opt._parallel._sends)
    for step in range(2):
        g = [np.random.default_rng(step).standard_normal(p.shape).astype(np.float32) for p in params]
        opt(g)
        single(g)
    for a, b in zip(params, ref):
        assert a.data.tobytes() == b.data.tobytes(), a.name


def test_shares_reshard_and_refuse_the_wrong_rank(comm):
    """Each rank's own state_dict() (its share) loads back on its rank only; every rank's shares, as a list,
    load at another world size (P -> 1 -> 2 ranks) and the run continues bit for bit."""
    init, grads = make_data(np.float32, seed=6, steps=5)
    names = [n for n, _ in MODEL]

    def run(opt, steps):
        for g in steps:
            opt(tuple(g[n] for n in names))

    ref_params = make_params(init)
    run(Adam(ref_params, learning_rate=0.01), grads)
    params = make_params(init)
    a = Adam(params, learning_rate=0.01, comm=comm)
    run(a, grads[:2])
    shares = comm.allgather(a.state_dict())
    before = a.state_dict()
    with pytest.raises(ValueError, match="the share of rank .* load every rank's share as a list"):
        a.load_state_dict(shares[(comm.Get_rank() + 1) % comm.Get_size()])
    assert all(a.state_dict()[k].tobytes() == v.tobytes() for k, v in before.items())
    other = Adam(make_params(init), learning_rate=0.02, comm=comm)
    with pytest.raises(ValueError, match="fingerprint differs"):
        other.load_state_dict(shares)
    from mpi4py import MPI

    b = Adam(params, learning_rate=0.01, comm=MPI.COMM_SELF)      # every rank alone: 1 rank
    b.load_state_dict(shares)
    run(b, grads[2:3])
    pair = comm.Split(0 if comm.Get_rank() < 2 else 1)
    c = Adam(params, learning_rate=0.01, comm=pair)                # 2 ranks (and 1 on a third)
    c.load_state_dict([b.state_dict()])                             # the one share of a 1-rank run
    run(c, grads[3:])
    pair.Free()
    assert all(x.data.tobytes() == y.data.tobytes() for x, y in zip(params, ref_params))


@pytest.mark.parametrize("id_", ["AdamWScheduleFree", "SGDScheduleFree"])
def test_schedule_free_eval_and_train_swap_every_parameter(comm, id_):
    """eval()/train() swap each parameter on the rank that owns its z, then send it to every rank: the
    parameters equal one process's after eval() and after train()."""
    from optim_table import OPTIMIZERS_BY_ID

    info = OPTIMIZERS_BY_ID[id_]
    init, grads = make_data(np.float32, seed=4)
    single, want = run_optimizer(info, scenario(info, "plain", np.float32), init, grads)
    sharded, got = run_optimizer(with_comm(info, comm), scenario(with_comm(info, comm), "plain", np.float32),
                                 init, grads)
    for mode in ("eval", "train"):
        getattr(single, mode)()
        getattr(sharded, mode)()
        for pname in want:
            assert got[pname].data.tobytes() == want[pname].data.tobytes(), (mode, pname)
