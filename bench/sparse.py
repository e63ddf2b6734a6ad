"""Sparse kernels on an embedding table: 1,000,000 x 64 float32, 16,384 Zipf-distributed indices per step.

Contenders, interleaved (each step starts with its rows mostly out of the caches): optkernels'
fused_sparse_lazy_adam, fused_sparse_adam (non-lazy: a full pass over the table), fused_sparse_ftrl and
fused_sparse_proximal_adagrad; torch.optim.SparseAdam; TensorFlow's ResourceSparseApplyFtrl and
ResourceSparseApplyProximalAdagrad with duplicates merged first (tf.unique + unsorted_segment_sum, timed
with the op); a NumPy lazy Adam (np.unique + np.add.at). State is updated in place by every step.
"""
from __future__ import annotations

import numpy as np

import optkernels.sparse as S
from harness import Row, Suite, optional
from sparse_adam import numpy_lazy_adam, torch_step_factory

F = np.float32


def zipf_batch(rows: int, batch: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    indices = ((rng.zipf(1.15, batch) - 1) % rows).astype(np.int32)
    grad = rng.standard_normal((batch, dim), dtype=np.float32) * F(0.01)
    return indices, grad


def _table(rows: int, dim: int, seed: int, positive: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, dim), dtype=np.float32) * F(0.01)
    return np.abs(table) + F(0.1) if positive else table


def _tf_steps(tf, rows, dim, grad, indices) -> dict:
    var = tf.Variable(_table(rows, dim, 7))
    accum = tf.Variable(_table(rows, dim, 8, positive=True))
    linear = tf.Variable(_table(rows, dim, 9))
    g, idx = tf.constant(grad), tf.constant(indices)

    def merged():
        unique, position = tf.unique(idx)
        return tf.math.unsorted_segment_sum(g, position, tf.shape(unique)[0]), unique

    def ftrl():
        values, unique = merged()
        tf.raw_ops.ResourceSparseApplyFtrl(var=var.handle, accum=accum.handle, linear=linear.handle, grad=values,
                                           indices=unique, lr=F(0.01), l1=F(0.001), l2=F(0.001), lr_power=F(-0.5))

    def proximal():
        values, unique = merged()
        tf.raw_ops.ResourceSparseApplyProximalAdagrad(var=var.handle, accum=accum.handle, lr=F(0.01), l1=F(0.001),
                                                      l2=F(0.001), grad=values, indices=unique)

    return {"tensorflow sparse FTRL (merged)": ftrl, "tensorflow sparse ProximalAdagrad (merged)": proximal}


def run(suite: Suite, rows: int = 1_000_000, dim: int = 64, batch: int = 16384) -> None:
    if suite.quick:
        rows = 100_000
    torch, tf = optional("torch"), optional("tensorflow")
    indices, grad = zipf_batch(rows, batch, dim)
    distinct = len(np.unique(indices))
    var, m, v = _table(rows, dim, 1), _table(rows, dim, 2), _table(rows, dim, 3, positive=True)
    var2, m2, v2 = _table(rows, dim, 1), _table(rows, dim, 2), _table(rows, dim, 3, positive=True)
    fvar, faccum, flinear = _table(rows, dim, 4), _table(rows, dim, 5, positive=True), _table(rows, dim, 6)
    pvar, paccum = _table(rows, dim, 4), _table(rows, dim, 5, positive=True)
    nvar, nm, nv = _table(rows, dim, 1), _table(rows, dim, 2), _table(rows, dim, 3, positive=True)
    adam = (F(0.9), F(0.999), F(1e-3), F(0.9), F(0.999), F(1e-8))
    lr_t = F(1e-3) * F(np.sqrt(F(1) - F(0.999))) / (F(1) - F(0.9))
    impls = {
        "optkernels fused_sparse_lazy_adam": lambda: S.fused_sparse_lazy_adam(var, m, v, *adam, grad, indices),
        "optkernels fused_sparse_ftrl": lambda: S.fused_sparse_ftrl(fvar, faccum, flinear, grad, indices, lr=0.01,
                                                                     l1=0.001, l2=0.001, lr_power=-0.5),
        "optkernels fused_sparse_proximal_adagrad": lambda: S.fused_sparse_proximal_adagrad(
            pvar, paccum, 0.01, 0.001, 0.001, grad, indices),
        "numpy unique+add.at lazy Adam": lambda: numpy_lazy_adam(nvar, nm, nv, grad, indices, lr_t, F(0.9),
                                                                 F(0.999), F(1e-8)),
    }
    if torch is not None:
        impls["torch SparseAdam"] = torch_step_factory(rows, dim, grad, indices)
    else:
        suite.note("torch is not installed: torch SparseAdam is skipped")
    if tf is not None:
        impls.update(_tf_steps(tf, rows, dim, grad, indices))
    else:
        suite.note("tensorflow is not installed: its sparse ops are skipped")
    case = f"{rows}x{dim} table, {batch} Zipf indices ({distinct} distinct)"
    times = suite.time_interleaved(impls, repeats=3 if suite.quick else 21)
    for impl, seconds in times.items():
        suite.add(Row("sparse", case, impl, batch, seconds))
    dense = suite.time_interleaved({"x": lambda: S.fused_sparse_adam(var2, m2, v2, *adam, grad, indices)},
                                   repeats=3 if suite.quick else 7)
    suite.add(Row("sparse", case, "optkernels fused_sparse_adam (non-lazy: every row)", batch, dense["x"],
                  bytes_moved=24 * rows * dim, note="(a full pass over var, m, v)"))
