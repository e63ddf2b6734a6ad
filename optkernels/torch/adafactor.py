"""torch.optim.Adafactor (torch's own variant) over :mod:`optkernels.kernels.torch_adafactor`'s element
functions.

Each parameter's step has reductions (the parameter's and the update's norms, a matrix's row and column mean
squares, the mean of its row moments), taken in torch's order of additions so the results are torch's bits:
for a group's contiguous float32/float64 CPU tensors, by :mod:`optkernels.kernels.torch_reductions` in one
compiled call per phase for all of them (where :func:`~optkernels.torch._reductions.matches_torch`), else by
torch's own calls; the element-wise work (the moments' update, the update ``U`` and the parameter's step)
runs in the kernels. A float16 or
bfloat16 CPU parameter's element-wise work rounds every operation to its dtype, as torch does
(:mod:`optkernels.kernels.torch_half_rules`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..kernels import torch_half_rules as H
from ..kernels import torch_many as M
from ..kernels.torch_adafactor import (
    _adafactor_factored,
    _adafactor_vector,
    adafactor_denominator,
    adafactor_host,
)
from ..kernels.torch_adafactor_rows import factored_update
from ..kernels.torch_family import _decayed_step, launch_small, lerp_scalars
from ..kernels.torch_rules import torch_tail_scalars
from . import _reductions, _views
from ._base import KernelOptimizer, _half_width, _Work
from .torch_family import check_lr, scalar_dtype

__all__ = ["Adafactor"]

#: What torch's ``t.norm(2)`` and ``torch.norm(t, dim=d, keepdim=True)`` call for a strided tensor (the
#: same op, without ``torch.norm``'s Python dispatch).
_norm = torch.linalg.vector_norm


class Adafactor(KernelOptimizer):
    r"""torch.optim.Adafactor over optkernels' kernels (MODERN.md §7)::

        g ← −g (maximize);  t ← t + 1;  w_t = t^τ;  ρ = min(lr, 1/√t);  α = max(ε2, ‖w‖/√N)·ρ
        w ← w·(1 − lr·wd)
        vector:  V = variance ← lerp(variance, g², w_t)
        matrix:  R ← lerp(R, ‖g‖²_rows/m, w_t);  C ← lerp(C, ‖g‖²_cols/n, w_t);  V = R·C/max(mean(R), ε1)
        U = g/√max(V, ε1²);  w ← w − α/max(1, ‖U‖/(√N·d))·U

    Parameters
    ----------
    params : iterable
        Tensors or parameter-group dicts.
    lr : float
        Caps the relative step and scales weight decay (1e-2).
    beta2_decay : float
        τ <= 0 (-0.8).
    eps : tuple
        ``(ε1, ε2)``; ``ε1=None`` is the parameter dtype's machine epsilon (of the first parameter with a
        gradient in the group, as torch's) ((None, 1e-3)).
    d : float
        Clipping threshold >= 1 (1.0).
    weight_decay : float
        Decoupled decay scaled by lr (0.0).
    foreach : bool, optional
        Accepted, ignored.
    maximize : bool
        Maximize the objective (False).

    Notes
    -----
    State: ``step``; ``variance`` (a parameter of at most 1 dimension) or ``row_var`` (shape ``(…, n, 1)``) and
    ``col_var`` (``(…, 1, m)``). A ``grad_scale``/``found_inf`` attribute raises torch's AssertionError.
    """

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: Any = None,
        maximize: bool = False,
    ):
        defaults = dict(
            lr=lr,
            beta2_decay=beta2_decay,
            eps=eps,
            d=d,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"], "Learning rate should be >= 0 but is: {}")
        if not 0.0 >= group["beta2_decay"]:
            raise ValueError(f"beta2_decay should be <= 0 but is: {group['beta2_decay']}")
        eps1, eps2 = group["eps"]
        if eps1 is not None and not 0.0 <= eps1:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps1}")
        if not 0.0 <= eps2:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps2}")
        if not 1.0 <= group["d"]:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {group['d']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"weight_decay should be >= 0 but is: {group['weight_decay']}")

    def _kernel(self, group: dict) -> tuple:
        return _adafactor_vector, ()

    def _prestep(self, group: dict) -> None:
        return None

    @torch.no_grad()
    def _dense_step(self, work: _Work) -> None:
        group, params, grads = work.group, work.dense, work.grads
        if getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None:
            raise AssertionError("Grad scaling should occur outside of optimizer.step()")
        eps1, eps2 = group["eps"]
        lr = group["lr"]  # a tensor lr: torch's host arithmetic in its dtype, as torch does it
        tau, d, wd, maximize = (
            group["beta2_decay"],
            group["d"],
            group["weight_decay"],
            bool(group["maximize"]),
        )
        if eps1 is None and params:
            eps1 = torch.finfo(params[0].dtype).eps
        host = (lr, tau, eps2, d, wd, maximize)
        batches: dict = {}  # dtype -> [(p, grad)]: CPU float32/float64 tensors laid out in index order
        float_lr = not isinstance(lr, torch.Tensor)
        if float_lr and _one_batch(params, grads):  # the common case, checked in C-level maps
            batches, params = {params[0].dtype: list(zip(params, grads))}, []
        for p, given in zip(params, grads):
            if (
                float_lr
                and p.dtype in _views.FLOAT_DTYPES
                and _views.device_kind(p) == "cpu"
                and p.is_contiguous()
                and given.is_contiguous()
            ):
                batches.setdefault(p.dtype, []).append((p, given))
                continue
            # the kernels run in index order: a parameter or gradient laid out otherwise goes through a
            # contiguous copy (the reductions are taken on the tensors as given, as torch takes them)
            grad = given if given.is_contiguous() else given.contiguous()
            state = self._adafactor_state(p, grad)
            state["step"] += 1
            w_t, alpha = adafactor_host(state["step"].item(), lr, tau, eps2, _norm(p).item(), p.numel())
            kind = _views.device_kind(p)
            target = p.detach() if p.is_contiguous() else p.detach().contiguous()
            if kind == "cpu" and p.dtype in _views.HALF_DTYPES:
                self._half_step(p, target, grad, given, state, (w_t, alpha, eps1, lr, wd, d, maximize))
            else:
                self._float_step(p, target, grad, given, state, (w_t, alpha, eps1, lr, wd, d, maximize))
            if not p.is_contiguous():
                p.detach().copy_(target)
        for dtype, pairs in batches.items():
            self._many_step(dtype, pairs, eps1, host)

    def _many_step(self, dtype: torch.dtype, pairs: list, eps1: float, host: tuple) -> None:
        """The step of contiguous CPU parameters of one float dtype (``pairs``: ``(p, grad)``) and a float lr,
        each phase one compiled call over all of them (:mod:`optkernels.kernels.torch_many`); the reductions
        are torch's: the parameters' and the updates' norms, each matrix's row and column norms and row mean,
        computed in torch's order by :mod:`optkernels.kernels.torch_reductions` where
        :func:`~optkernels.torch._reductions.matches_torch`, else by torch. The host arithmetic is torch's,
        in float64 (Python's floats), per tensor. ``host``: ``(lr, τ, ε2, d, wd, maximize)``."""
        lr, tau, eps2, d, wd, maximize = host
        np_dtype = _views.FLOAT_DTYPES[dtype]
        like = np.empty(0, np_dtype)
        params = [p for p, _ in pairs]
        grads = [g for _, g in pairs]
        layout = self._layout(dtype, params)
        state_of = self.state
        states = [state_of[p] for p in params]
        if not all(states):
            states = [self._adafactor_state(p, g) for p, g in pairs]
        # the host's scalars, per tensor as torch's loop computes them (Python floats: numpy's float64)
        steps = _increment([s["step"] for s in states])
        terms = {t: (t**tau, min(lr, 1 / (t**0.5))) for t in set(steps)}  # (w_t, ρ) of each step number
        own = _reductions.matches_torch(dtype, bool(layout.matrices))  # torch's reductions in our kernels
        rms = (
            M.tensor_norms(layout.tasks, _views.addresses(params)[0], like)
            if own
            else _floats(torch._foreach_norm(params))
        ) / layout.roots
        alpha = np.where(rms > eps2, rms, eps2) * np.array([terms[t][1] for t in steps])  # max(ε2, RMS(w))·ρ
        lerps = {t: lerp_scalars(w_t, np_dtype) for t, (w_t, _) in terms.items()}
        weights = np.array([lerps[t][:2] for t in steps], np_dtype).T.copy()
        small = np.array([lerps[t][2] for t in steps], np.bool_)
        table = np.zeros((5, len(params)), np.int64)
        table[0] = update_addresses = layout.update_addresses  # each tensor's U, in the layout's scratch
        table[1] = _views.addresses(grads)[0]
        if layout.vectors:
            table[2, layout.vectors] = _views.addresses([states[k]["variance"] for k in layout.vectors])[0]
        # the matrices' moments; ``held``: their row means, read by address in the updates' call
        held = self._factored_moments(layout, grads, states, (weights, small), table, like, own)
        M.updates(
            layout.chunks,
            table,
            layout.dims,
            weights,
            small,
            like,
            maximize,
            np_dtype.type(eps1),
            np_dtype.type(eps1 * eps1),
            np_dtype.type(1),
        )
        del held
        update_norms = (
            M.tensor_norms(layout.tasks, table[0], like)
            if own
            else _floats(torch._foreach_norm(layout.updates()))
        )
        ratio = update_norms / (layout.roots * d)
        neg_steps = (-alpha / np.where(ratio > 1.0, ratio, 1.0)).astype(np_dtype)  # −α/max(1, RMS(U)/d)
        decay = np_dtype.type(1 - lr * wd if wd != 0 else 1)
        steps_table = np.stack([_views.addresses(params)[0], update_addresses])
        M.decayed_steps(layout.chunks, steps_table, neg_steps, decay, like)

    @staticmethod
    def _factored_moments(
        layout: _Layout,
        grads: list,
        states: list,
        lerps: tuple,
        table: np.ndarray,
        like: np.ndarray,
        own: bool,
    ) -> Any:
        """Every matrix's ``row_var`` and ``col_var`` stepped, and the row means of each; rows 2-4 of the
        update's address ``table`` filled for the matrices (``R``, ``C``, the means). ``lerps``: the lerp
        weights and ``small`` of each tensor; ``own``: our kernels take torch's reductions, else torch.
        Returns what holds the means (to be kept alive while ``table`` is used)."""
        mats = layout.matrices
        if not mats:
            return None
        weights, small = lerps[0][:, mats], lerps[1][mats]
        rows = [states[k]["row_var"] for k in mats]
        cols = [states[k]["col_var"] for k in mats]
        if not own:
            row_norms = [_norm(grads[k], 2, -1, True) for k in mats]
            col_norms = [_norm(grads[k], 2, -2, True) for k in mats]
            factors = _views.addresses(rows, row_norms, cols, col_norms)
            M.lerp_factors(factors, layout.counts, layout.divisors, weights, small, like)
            row_means = [r.mean(dim=-2, keepdim=True) for r in rows]
            table[2, mats], table[3, mats] = factors[0], factors[2]
            table[4, mats] = _views.addresses(row_means)[0]
            return row_means
        factors = _views.addresses([grads[k] for k in mats], rows, cols)
        means = np.empty(layout.batches, like.dtype)
        dims = layout.matrix_dims
        M.factored_moments(layout.matrix_tasks, factors, dims, layout.divisors, weights, small, means, like)
        for j in layout.long_columns:  # one sum that torch splits over its threads: torch's own
            means[dims[3, j]] = rows[j].mean(dim=-2).item()
        table[2, mats], table[3, mats] = factors[1], factors[2]
        table[4, mats] = means.ctypes.data + dims[3] * like.dtype.itemsize
        return means

    def _float_step(
        self,
        p: torch.Tensor,
        target: torch.Tensor,
        grad: torch.Tensor,
        given: torch.Tensor,
        state: dict,
        host: tuple,
    ) -> None:
        """The step of a float32/float64 parameter ``p``, written to ``target`` (``p``, or a contiguous copy
        of it); ``grad`` is the gradient, contiguous, ``given`` the gradient as found (the row and column
        norms are taken on it). ``host``: ``(w_t, α, ε1, lr, wd, d, maximize)``."""
        w_t, alpha, eps1, lr, wd, d, maximize = host
        kind = _views.device_kind(p)
        dtype = _views.FLOAT_DTYPES.get(p.dtype, _views.FLOAT_DTYPES[torch.float32])
        update = self._pre_buffer(p)
        flat = [_views.view(t, kind, flat=True) for t in (target, update, grad)]
        eps1_sq, one = dtype.type(eps1 * eps1), dtype.type(1)
        if grad.dim() > 1:
            rows, cols = state["row_var"], state["col_var"]
            rows.lerp_(_norm(given, 2, -1, True).square_().div_(grad.size(-1)), w_t)
            cols.lerp_(_norm(given, 2, -2, True).square_().div_(grad.size(-2)), w_t)
            means = rows.mean(dim=-2, keepdim=True).clamp_(min=eps1)
            r, c, m = (_views.view(t, kind, flat=True) for t in (rows, cols, means))
            shape = (grad.size(-2), grad.size(-1), maximize, eps1_sq, one)
            if kind == "cpu" and p.dtype not in _views.HALF_DTYPES:  # a row loop: the same bits
                factored_update(flat[1], flat[2], r, c, m, *shape)
            else:
                launch_small(_adafactor_factored, kind, p.numel(), flat[1], flat[2], r, c, m, *shape)
        else:
            launch_small(
                _adafactor_vector,
                kind,
                p.numel(),
                _views.view(state["variance"], kind, flat=True),
                flat[1],
                flat[2],
                maximize,
                *lerp_scalars(w_t, dtype),
                eps1_sq,
                one,
            )
        den = adafactor_denominator(_norm(update).item(), update.numel(), d)
        launch_small(
            _decayed_step,
            kind,
            p.numel(),
            flat[0],
            flat[1],
            dtype.type(1 - lr * wd if wd != 0 else 1),
            dtype.type(-alpha / den),
        )

    def _half_step(
        self,
        p: torch.Tensor,
        target: torch.Tensor,
        grad: torch.Tensor,
        given: torch.Tensor,
        state: dict,
        host: tuple,
    ) -> None:
        """The step of a float16/bfloat16 CPU parameter, every operation rounded to its dtype as torch
        rounds it (:mod:`optkernels.kernels.torch_half_rules`); the update is a tensor of the parameter's
        dtype (kept per parameter), so that its norm is torch's. Arguments as :meth:`_float_step`'s."""
        w_t, alpha, eps1, lr, wd, d, maximize = host
        f32 = np.float32
        updates = self.__dict__.setdefault("_half_updates", {})
        update = updates.get(id(p))
        if update is None or update.shape != p.shape or update.dtype != p.dtype:
            update = updates[id(p)] = torch.empty_like(p, memory_format=torch.contiguous_format)
        flat = [_views.view(t, "cpu", flat=True) for t in (target, update, grad)]
        eps1_sq, one = f32(eps1 * eps1), f32(1)
        tail = torch_tail_scalars(p.numel(), torch.get_num_threads(), _half_width())
        if grad.dim() > 1:
            rows, cols = state["row_var"], state["col_var"]
            rows.lerp_(_norm(given, 2, -1, True).square_().div_(grad.size(-1)), w_t)
            cols.lerp_(_norm(given, 2, -2, True).square_().div_(grad.size(-2)), w_t)
            means = rows.mean(dim=-2, keepdim=True).clamp_(min=eps1)
            r, c, m = (t.float().numpy().reshape(-1) for t in (rows, cols, means))  # exact copies
            shape = (grad.size(-2), grad.size(-1), maximize, eps1_sq, one, *tail)
            H._adafactor_factored_half.launch("cpu", p.numel(), flat[1], flat[2], r, c, m, *shape)
        else:
            variance = _views.view(state["variance"], "cpu", flat=True)
            scalars = (maximize, *lerp_scalars(w_t, np.dtype(f32)), eps1_sq, one, *tail)
            H._adafactor_vector_half.launch("cpu", p.numel(), variance, flat[1], flat[2], *scalars)
        den = adafactor_denominator(_norm(update).item(), update.numel(), d)
        H._decayed_step_half.launch(
            "cpu", p.numel(), flat[0], flat[1], wd != 0, f32(1 - lr * wd), f32(-alpha / den), *tail
        )

    def _layout(self, dtype: torch.dtype, params: list) -> _Layout:
        """The :class:`_Layout` of ``params``' shapes (remembered while they stay the same)."""
        key = (dtype, tuple(map(_SHAPE, params)))
        layouts = self.__dict__.setdefault("_layouts", {})
        layout = layouts.get(key)
        if layout is None:
            if len(layouts) >= 8:
                layouts.clear()
            layout = layouts[key] = _Layout(key[1], _views.FLOAT_DTYPES[dtype])
        return layout

    def _state_fits(self, p: torch.Tensor, group: dict) -> bool:
        """As the base class's, and a state that does not fit ``p`` raises here (:meth:`_check_state`), when
        the step sorts its parameters, before anything is written."""
        fits = super()._state_fits(p, group)
        if fits:
            self._check_state(p)
        return fits

    def _check_state(self, p: torch.Tensor) -> None:
        """A loaded or edited state must fit its parameter (the kernels index it by the parameter's shape)."""
        state = self.state.get(p)
        if not state:
            return
        shape, dtype = p.shape, p.dtype
        if len(shape) > 1:
            expected: tuple = (("row_var", shape[:-1] + (1,)), ("col_var", shape[:-2] + (1, shape[-1])))
        else:
            expected = (("variance", shape),)
        for name, shape in expected:
            t = state.get(name)
            if t is None or t.shape != shape or t.dtype is not dtype or not t.is_contiguous():
                raise ValueError(
                    f"Adafactor: state '{name}' of a parameter of shape {tuple(p.shape)} must be a "
                    f"contiguous {p.dtype} tensor of shape {tuple(shape)}, got "
                    f"{None if t is None else (t.dtype, tuple(t.shape))}"
                )
        if "step" not in state:
            raise ValueError("Adafactor: a parameter's state has no 'step'")

    def _adafactor_state(self, p: torch.Tensor, grad: torch.Tensor) -> dict:
        """``self.state[p]``, created as torch creates it on the first step."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = torch.tensor(0.0, dtype=scalar_dtype())
            if grad.dim() > 1:
                state["row_var"] = grad.new_zeros(list(grad.shape[:-1]) + [1])
                state["col_var"] = grad.new_zeros(list(grad.shape[:-2]) + [1, grad.shape[-1]])
            else:
                state["variance"] = torch.zeros_like(grad, memory_format=torch.preserve_format)
        return state


_SHAPE = operator.attrgetter("shape")

#: torch's CPU sum of this many elements or more, into one output, is split over its threads (GRAIN_SIZE)
_PARALLEL_SUM = 32768

#: numpy dtypes of step counters :func:`_increment` updates in one compiled call
_STEP_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
}


class _Layout:
    """What a batch's step needs of its tensors' shapes alone: sizes, chunk table, ``√N`` (Python's
    ``N**0.5``, as torch's host arithmetic), which tensors are matrices and their dimensions; and the
    scratch the updates ``U`` are written to (one array for all of them)."""

    def __init__(self, shapes: tuple, dtype: np.dtype):
        numels = [math.prod(s) for s in shapes]
        self.chunks = _views.chunks(numels)
        self.roots = np.array([n**0.5 for n in numels])
        self.matrices = [k for k, s in enumerate(shapes) if len(s) > 1]
        self.vectors = [k for k, s in enumerate(shapes) if len(s) <= 1]
        mats = [shapes[k] for k in self.matrices]
        #: element counts of each matrix's row_var and col_var
        self.counts = np.array([[math.prod(s[:-1]) for s in mats], [math.prod(s[:-2]) * s[-1] for s in mats]])
        self.counts = self.counts.astype(np.int64).reshape(2, len(mats))
        #: the row length m and the column length n of each matrix, in the dtype
        self.divisors = np.array([[s[-1] for s in mats], [s[-2] for s in mats]], dtype).reshape(2, len(mats))
        #: (n, m) per tensor, (0, 0) for a vector
        self.dims = np.zeros((2, len(shapes)), np.int64)
        for k, s in zip(self.matrices, mats):
            self.dims[:, k] = s[-2:]
        #: every tensor's update U, one after another in one scratch array
        self.scratch = np.empty(sum(numels), dtype)
        offsets = np.cumsum([0] + numels[:-1]).astype(np.int64)
        self._byte_offsets = offsets * dtype.itemsize
        self._spans = [(int(o), n, s) for o, n, s in zip(offsets, numels, shapes)]
        #: one task per tensor, one per matrix (:func:`~optkernels.kernels.torch_many.tensor_norms`)
        self.tasks = np.array([[t, 0, n, n] for t, n in enumerate(numels)], np.int64).reshape(-1, 4)
        self.matrix_tasks = np.array(
            [[j, 0, numels[k], numels[k]] for j, k in enumerate(self.matrices)], np.int64
        ).reshape(-1, 4)
        #: per matrix: its batch count B, n, m and its first row mean's index (B means each)
        batches = [math.prod(s[:-2]) for s in mats]
        firsts = np.cumsum([0] + batches)
        self.matrix_dims = np.array(
            [batches, [s[-2] for s in mats], [s[-1] for s in mats], firsts[:-1]], np.int64
        ).reshape(4, len(mats))
        self.batches = int(firsts[-1])
        #: the matrices whose row mean is one sum that torch splits over its threads
        self.long_columns = [j for j, s in enumerate(mats) if batches[j] == 1 and s[-2] >= _PARALLEL_SUM]

    @property
    def update_addresses(self) -> np.ndarray:
        """The address of each tensor's ``U`` in :attr:`scratch` (read now: a copied layout has its own)."""
        return self.scratch.ctypes.data + self._byte_offsets

    def updates(self) -> list[torch.Tensor]:
        """The tensors' updates ``U``, views of :attr:`scratch` shaped as the tensors."""
        flat = torch.from_numpy(self.scratch)
        return [flat[o : o + n].view(s) for o, n, s in self._spans]


def _floats(tensors: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> np.ndarray:
    """The values of one-element tensors, float64."""
    return np.array(torch.stack(tensors).tolist(), np.float64).reshape(-1)


def _increment(counters: list) -> list:
    """torch's ``step_t += 1`` of every step counter (one-element tensors); their new values, Python floats.
    Counters of one float dtype on the CPU (torch's own) in one compiled call."""
    like: np.dtype | None = _STEP_DTYPES.get(counters[0].dtype) if counters else None
    if like is not None and all(c.dtype is counters[0].dtype and c.is_cpu for c in counters):
        return M.increment_steps(_views.addresses(counters)[0], np.empty(0, like)).tolist()
    torch._foreach_add_(counters, 1)
    return _floats(counters).tolist()


_IS_CONTIGUOUS = torch.Tensor.is_contiguous
_IS_CPU = operator.attrgetter("is_cpu")
_DTYPE = operator.attrgetter("dtype")


def _one_batch(params: list, grads: list) -> bool:
    """Whether every parameter is a CPU float32 or float64 tensor of one dtype, it and its gradient laid out
    in index order (outside :func:`~optkernels.torch._views.simulate_cuda`)."""
    return (
        bool(params)
        and params[0].dtype in _views.FLOAT_DTYPES
        and all(map(_IS_CPU, params))
        and all(map(_IS_CONTIGUOUS, params))
        and all(map(_IS_CONTIGUOUS, grads))
        and len(set(map(_DTYPE, params))) == 1
        and _views.device_kind(params[0]) == "cpu"
    )
