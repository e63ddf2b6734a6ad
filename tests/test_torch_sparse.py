"""Sparse gradients of nn.Embedding(sparse=True) (torch COO, uncoalesced, with duplicates) through
optkernels.torch's SparseAdam and Adagrad, against torch.optim's: only the indexed rows change."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

ROWS, DIM = 50, 6
TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-12}


def _embedding_pair(dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(ROWS, DIM, dtype=dtype, generator=gen)
    tables = []
    for _ in range(2):
        emb = torch.nn.Embedding(ROWS, DIM, sparse=True).to(dtype)
        with torch.no_grad():
            emb.weight.copy_(weight)
        tables.append(emb)
    return tables, gen


def _backward(emb, ids, targets):
    emb.zero_grad()
    loss = ((emb(ids) - targets) ** 2).sum()
    loss.backward()
    return emb.weight.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,hypers", [
    ("SparseAdam", dict(lr=0.01)),
    ("SparseAdam", dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, maximize=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("Adagrad", dict(lr=0.05, eps=1e-6, maximize=True)),
])
def test_embedding_sparse_gradients_match_torch(name, hypers, dtype):
    (ours, theirs), gen = _embedding_pair(dtype, 0)
    opt_a = getattr(okt, name)(ours.parameters(), **hypers)
    opt_b = getattr(torch.optim, name)(theirs.parameters(), **hypers)
    pointer = ours.weight.data_ptr()
    touched = set()
    for _ in range(12):
        ids = torch.randint(0, ROWS // 2, (4, 7), generator=gen)   # repeats in a batch; rows >= 25 never
        targets = torch.randn(4, 7, DIM, dtype=dtype, generator=gen)
        grad = _backward(ours, ids, targets)
        assert grad.is_sparse and not grad.is_coalesced()
        _backward(theirs, ids, targets)
        before = ours.weight.detach().clone()
        opt_a.step()
        opt_b.step()
        changed = (ours.weight.detach() != before).any(dim=1).nonzero().flatten().tolist()
        assert set(changed) <= set(ids.flatten().tolist())
        touched.update(ids.flatten().tolist())
    a, b = ours.weight.detach(), theirs.weight.detach()
    assert (a - b).abs().max().item() <= TOLERANCE[dtype] * max(1.0, b.abs().max().item())
    assert ours.weight.data_ptr() == pointer
    untouched = sorted(set(range(ROWS)) - touched)
    assert torch.equal(a[untouched], b[untouched])
    state_b = opt_b.state[theirs.weight]
    for key, value in state_b.items():
        mine = opt_a.state[ours.weight][key]
        if key == "step":
            assert float(mine) == float(value) == 12
        else:
            assert (mine - value).abs().max().item() <= TOLERANCE[dtype] * max(1.0, value.abs().max().item())


def test_sparse_gradient_errors_leave_everything_unchanged():
    emb = torch.nn.Embedding(10, 3, sparse=True)
    dense = torch.nn.Parameter(torch.ones(3))
    _backward(emb, torch.tensor([1, 1, 2]), torch.zeros(3, 3))
    before = emb.weight.detach().clone()
    for cls in (okt.Adam, okt.RMSprop, okt.AdamW, okt.Adamax):       # (SGD takes them, as torch)
        opt = cls([dense, emb.weight], lr=0.1)
        dense.grad = torch.ones(3)
        with pytest.raises(RuntimeError, match="does not support sparse gradients"):
            opt.step()
        assert torch.equal(dense.detach(), torch.ones(3)) and torch.equal(emb.weight.detach(), before)
    opt = okt.SparseAdam([dense], lr=0.1)
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients"):
        opt.step()
    with pytest.raises(RuntimeError, match="weight_decay option is not compatible with sparse gradients"):
        okt.Adagrad([emb.weight], weight_decay=0.1).step()
    assert torch.equal(dense.detach(), torch.ones(3)) and torch.equal(emb.weight.detach(), before)


def test_sparse_adam_state_dict_round_trip_with_torch():
    (ours, theirs), gen = _embedding_pair(torch.float64, 3)
    opt_a = okt.SparseAdam(ours.parameters(), lr=0.02)
    opt_b = torch.optim.SparseAdam(theirs.parameters(), lr=0.02)
    ids, targets = torch.tensor([0, 3, 3, 9]), torch.randn(4, DIM, dtype=torch.float64, generator=gen)
    for emb, opt in ((ours, opt_a), (theirs, opt_b)):
        _backward(emb, ids, targets)
        opt.step()
    resumed = okt.SparseAdam(theirs.parameters(), lr=0.02)
    resumed.load_state_dict(copy.deepcopy(opt_a.state_dict()))   # state_dict() holds references
    assert resumed.state[theirs.weight]["step"] == 1
    for emb, opt in ((ours, opt_a), (theirs, resumed)):
        _backward(emb, ids, targets)
        opt.step()
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-13)


def test_adagrad_group_mixing_sparse_and_dense_gradients():
    """One Adagrad group holding an nn.Embedding(sparse=True) and a Linear layer: the embedding's rows go to
    the sparse kernel, the Linear's tensors to the dense launch, all as torch computes them."""
    models = []
    for _ in range(2):
        torch.manual_seed(7)
        models.append(torch.nn.ModuleDict({"emb": torch.nn.Embedding(ROWS, DIM, sparse=True),
                                           "lin": torch.nn.Linear(DIM, 2)}).double())
    ours, theirs = models
    opt_a = okt.Adagrad(ours.parameters(), lr=0.1, lr_decay=0.01)
    opt_b = torch.optim.Adagrad(theirs.parameters(), lr=0.1, lr_decay=0.01)
    gen = torch.Generator().manual_seed(8)
    for _ in range(5):
        ids = torch.randint(0, ROWS, (9,), generator=gen)
        for model, opt in ((ours, opt_a), (theirs, opt_b)):
            opt.zero_grad()
            model["lin"](model["emb"](ids)).pow(2).sum().backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=name)
