"""torch.optim.Muon over optkernels' kernels, and :class:`MuonWithAdamW`, Muon's usual recipe as one optimizer.

Muon's element-wise parts (the momentum EMA and Nesterov blend; the decoupled decay and the step) run in
:mod:`optkernels.kernels.torch_family`; Newton–Schulz runs as torch runs it, the same bfloat16 matmul calls in
the same order (:func:`newton_schulz`), so the results are torch's bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ..kernels import torch_family as K
from ..kernels import torch_many as M
from ..optimizers.muon import default_muon_split as _split_by_name
from . import _views
from ._base import KernelOptimizer, _Work
from .adam import AdamW
from .torch_family import check_lr

__all__ = ["Muon", "MuonWithAdamW", "default_muon_split", "newton_schulz", "newton_schulz_many"]


def newton_schulz(
    update: torch.Tensor,
    ns_coefficients: tuple = (3.4445, -4.7750, 2.0315),
    ns_steps: int = 5,
    eps: float = 1e-7,
) -> torch.Tensor:
    r"""torch Muon's Newton–Schulz orthogonalisation in bfloat16 (MODERN.md §1.2), torch's calls in torch's
    order::

        X = bf16(u) (transposed when rows > cols);  X ← X/max(‖X‖_F, eps)
        ns_steps times:  G = X·Xᵀ;  X ← a·X + (b·G + c·G·G)·X       (two ``torch.addmm``)

    Parameters
    ----------
    update : Tensor
        The 2-D matrix ``u``.
    ns_coefficients : tuple
        ``(a, b, c)``.
    ns_steps : int
        Iterations, < 100.
    eps : float
        The norm's floor.

    Returns
    -------
    Tensor
        The bfloat16 result, of ``update``'s shape.

    Raises
    ------
    ValueError
        torch's: ``ns_steps >= 100``, a matrix that is not 2-D, coefficients that are not 3.
    """
    _check_newton_schulz([update], ns_coefficients, ns_steps)
    x = _iterate(_normalised(update, eps), ns_coefficients, ns_steps)
    return x.T if update.size(0) > update.size(1) else x


def _check_newton_schulz(updates: list, ns_coefficients: tuple, ns_steps: int) -> None:
    """torch's errors for Newton–Schulz's arguments."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if any(len(u.shape) != 2 for u in updates):
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")


def _normalised(update: torch.Tensor, eps: float) -> torch.Tensor:
    """torch's ``X = bf16(u)`` (transposed when rows > cols), ``X ← X/max(‖X‖_F, eps)``."""
    x = update.bfloat16()
    if update.size(0) > update.size(1):
        x = x.T
    return x.div_(x.norm().clamp(min=eps))


def _iterate(x: torch.Tensor, ns_coefficients: tuple, ns_steps: int) -> torch.Tensor:
    """Newton–Schulz's iterations on ``X``: torch's ``torch.addmm`` calls for a matrix, ``torch.baddbmm`` for
    a stack of matrices (the last two dimensions)."""
    a, b, c = ns_coefficients
    multiply_add = torch.addmm if x.dim() == 2 else torch.baddbmm
    for _ in range(ns_steps):
        gram = x @ x.mT
        x = multiply_add(x, multiply_add(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x


#: (shape, count, ns_coefficients, ns_steps, torch's thread count) -> whether torch's batched matmuls
#: (``baddbmm``) gave the same bits as its per-matrix ``addmm`` calls, checked once on this machine
_BATCH_VERDICTS: dict = {}


def newton_schulz_many(
    updates: list,
    ns_coefficients: tuple = (3.4445, -4.7750, 2.0315),
    ns_steps: int = 5,
    eps: float = 1e-7,
) -> list:
    r""":func:`newton_schulz` of each of ``updates`` (2-D matrices), matrices of one shape iterated together as
    one stack through ``torch.baddbmm`` where that gives the bits of torch's per-matrix ``torch.addmm``
    calls on this machine.

    Both are oneDNN matrix products on the CPU; whether the batched one accumulates each element in the
    per-matrix one's order is a property of the library and the processor, not a documented contract. So it
    is checked: until a shape, count, coefficients, step count and torch thread count have been seen with
    finite, non-zero results, both run and the per-matrix results are used; the stack is used from then on
    only if the two were equal bit for bit (the verdict is remembered per process).

    Parameters
    ----------
    updates : list of Tensor
        2-D matrices.
    ns_coefficients, ns_steps, eps
        As :func:`newton_schulz`'s.

    Returns
    -------
    list of Tensor
        The bfloat16 results, in order, each of its update's shape.
    """
    _check_newton_schulz(updates, ns_coefficients, ns_steps)
    out: list = [None] * len(updates)
    same: dict = {}
    for k, u in enumerate(updates):
        same.setdefault(tuple(u.shape), []).append(k)
    for shape, members in same.items():
        if len(members) < 2:
            out[members[0]] = newton_schulz(updates[members[0]], ns_coefficients, ns_steps, eps)
            continue
        key = (shape, len(members), tuple(ns_coefficients), ns_steps, eps, torch.get_num_threads())
        verdict = _BATCH_VERDICTS.get(key)
        results: list = []
        if verdict is not False:
            stack = torch.stack([_normalised(updates[k], eps) for k in members])
            stack = _iterate(stack, ns_coefficients, ns_steps)
            results = list(stack.mT.unbind(0) if shape[0] > shape[1] else stack.unbind(0))
        if verdict is not True:
            single = [newton_schulz(updates[k], ns_coefficients, ns_steps, eps) for k in members]
            # judged on finite, non-zero results only (zero gradients would make any two methods agree)
            if verdict is None and all(bool(x.isfinite().all() and x.ne(0).any()) for x in single):
                _BATCH_VERDICTS[key] = all(torch.equal(x, y) for x, y in zip(results, single))
            results = single
        for k, x in zip(members, results):
            out[k] = x
    return out


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: tuple) -> float:
    """Muon's learning rate for a (rows, cols) matrix: ``lr·√max(1, rows/cols)`` (None, "original") or
    ``lr·0.2·√max(rows, cols)`` ("match_rms_adamw")."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * (0.2 * math.sqrt(max(rows, cols)))
    return lr


class Muon(KernelOptimizer):
    r"""torch.optim.Muon over optkernels' kernels (MODERN.md §1.1), 2-D parameters::

        buf ← lerp(buf, g, 1 − μ);  u = lerp(g, buf, μ) (nesterov) or buf
        O = NS(u) (bfloat16, :func:`newton_schulz`)
        w ← w·(1 − lr·wd);  w ← w − lr·r·O      (r = √max(1, rows/cols), or 0.2·√max(rows, cols))

    Parameters
    ----------
    params : iterable
        2-D tensors or parameter-group dicts.
    lr : float
        Learning rate (1e-3).
    weight_decay : float
        Decoupled decay (0.1).
    momentum : float
        μ (0.95).
    nesterov : bool
        Nesterov blend (True).
    ns_coefficients : tuple
        Newton–Schulz ``(a, b, c)`` ((3.4445, -4.7750, 2.0315)).
    eps : float
        Norm floor (1e-7).
    ns_steps : int
        Newton–Schulz iterations (5).
    adjust_lr_fn : str, optional
        None / "original" (Keller) or "match_rms_adamw" (Moonshot).

    State: ``momentum_buffer``. Errors as torch's (a parameter that is not 2-D: ValueError at construction).
    """

    counts_steps = False  # torch's Muon keeps no 'step'

    def __init__(
        self,
        params: Iterable,
        lr: Any = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple = (3.4445, -4.7750, 2.0315),
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_coefficients=ns_coefficients,
            eps=eps,
            ns_steps=ns_steps,
            adjust_lr_fn=adjust_lr_fn,
        )
        self._check_hyper(defaults)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(
                        f"Muon only supports 2D parameters whereas we found a parameter with size: {p.size()}"
                    )

    def _check_hyper(self, group: dict) -> None:
        check_lr(group["lr"], "Learning rate should be >= 0 but is: {}")
        if not 0.0 <= group["momentum"]:
            raise ValueError(f"momentum should be >= 0 but is: {group['momentum']}")
        if not 0.0 <= group["weight_decay"]:
            raise ValueError(f"weight decay should be >= 0 but is: {group['weight_decay']}")
        fn = group["adjust_lr_fn"]
        if fn is not None and fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {fn} is not supported")

    def _kernel(self, group: dict) -> tuple:
        return K._muon_momentum, ("momentum_buffer",)

    def _prestep(self, group: dict) -> None:
        return None

    def _state_fits(self, p: torch.Tensor, group: dict) -> bool:
        """True; a loaded state that does not fit ``p`` raises here, when the step sorts its parameters, before
        anything is written (torch's Muon would fail mid-step: no fallback to it)."""
        buf = self.state.get(p, {}).get("momentum_buffer")
        if buf is not None and (buf.shape != p.shape or buf.dtype != p.dtype or not buf.is_contiguous()):
            raise ValueError(
                f"Muon: state 'momentum_buffer' must be a contiguous {p.dtype} tensor of shape "
                f"{tuple(p.shape)}, got {buf.dtype} {tuple(buf.shape)}"
            )
        return True

    def _dense_step(self, work: _Work) -> None:
        group, params, grads = work.group, work.dense, work.grads
        if any(grad.ndim != 2 for grad in grads):
            raise ValueError("Param gradient must be a 2D matrix")
        _check_newton_schulz(grads, group["ns_coefficients"], group["ns_steps"])  # before anything is written
        batches: dict = {}  # dtype -> [(p, grad)]: CPU float32/float64 tensors laid out in index order
        for p, grad in zip(params, grads):
            if (
                p.dtype in _views.FLOAT_DTYPES
                and _views.device_kind(p) == "cpu"
                and p.is_contiguous()
                and grad.is_contiguous()
            ):
                batches.setdefault(p.dtype, []).append((p, grad))
            else:
                self._one_step(p, grad, group)
        for dtype, pairs in batches.items():
            self._many_step(_views.FLOAT_DTYPES[dtype], pairs, group)

    def _buffer(self, p: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(grad, memory_format=torch.preserve_format)
        return state["momentum_buffer"]

    def _many_step(self, dtype: np.dtype, pairs: list, group: dict) -> None:
        """The step of contiguous CPU parameters of one float dtype (``pairs``: ``(p, grad)``): the momenta in
        one compiled call, Newton–Schulz per matrix (torch's calls), the steps in one compiled call
        (:mod:`optkernels.kernels.torch_many`)."""
        lr = group["lr"]  # a tensor lr stays a tensor in torch's arithmetic (rounded to its dtype), as here
        params = [p for p, _ in pairs]
        grads = [g for _, g in pairs]
        buffers = [self._buffer(p, g) for p, g in pairs]
        updates = [self._pre_buffer(p) for p in params]
        chunks, like = _views.chunks(list(map(torch.Tensor.numel, params))), np.empty(0, dtype)
        scalars = K.muon_momentum_scalars(dtype, group["momentum"], group["nesterov"])
        M.muon_momenta(chunks, _views.addresses(buffers, updates, grads), like, *scalars)
        orthogonal = newton_schulz_many(updates, group["ns_coefficients"], group["ns_steps"], group["eps"])
        for update, ortho in zip(updates, orthogonal):
            update.copy_(ortho)  # bfloat16 -> the parameter's dtype: exact
        steps = [-float(adjusted_lr(lr, group["adjust_lr_fn"], p.shape)) for p in params]
        decay = dtype.type(float(1 - lr * group["weight_decay"]))
        M.decayed_steps(chunks, _views.addresses(params, updates), np.array(steps, dtype), decay, like)

    def _one_step(self, p: torch.Tensor, grad: torch.Tensor, group: dict) -> None:
        """The step of one parameter (CUDA, or laid out other than in index order)."""
        lr = group["lr"]
        grad = grad if grad.is_contiguous() else grad.contiguous()
        buffer = self._buffer(p, grad)
        kind = _views.device_kind(p)
        dtype = _views.FLOAT_DTYPES.get(p.dtype, _views.FLOAT_DTYPES[torch.float32])
        update = self._pre_buffer(p)
        buf, u, g = (_views.view(t, kind, flat=True) for t in (buffer, update, grad))
        scalars = K.muon_momentum_scalars(dtype, group["momentum"], group["nesterov"])
        K.launch_small(K._muon_momentum, kind, p.numel(), buf, u, g, *scalars)
        ortho = newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
        update.copy_(ortho)  # bfloat16 -> the parameter's dtype: exact
        step = -float(adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
        # the kernels run in index order: a parameter laid out otherwise goes through a contiguous copy
        target = p.detach() if p.is_contiguous() else p.detach().contiguous()
        decay = dtype.type(float(1 - lr * group["weight_decay"]))
        K.launch_small(
            K._decayed_step, kind, p.numel(), _views.view(target, kind, flat=True), u, decay, dtype.type(step)
        )
        if not p.is_contiguous():
            p.detach().copy_(target)


def default_muon_split(name: str, p: torch.Tensor, module: torch.nn.Module | None = None) -> bool:
    """The usual split (Keller Jordan's Muon README, torch's Muon docstring): Muon for the 2-D hidden
    matrices; AdamW for everything else — parameters that are not 2-D (biases, norms' gains, 4-D
    convolutions), embeddings (a parameter of an ``nn.Embedding``/``nn.EmbeddingBag``, or named like one)
    and output heads (named ``head``, ``lm_head``, ``classifier``, ``output``...:
    :data:`optkernels.optimizers.muon.ADAMW_NAMES`).

    Parameters
    ----------
    name : str
        The parameter's qualified name (``model.named_parameters()``).
    p : Tensor
        The parameter.
    module : Module, optional
        The module that owns it.

    Returns
    -------
    bool
        True for Muon.
    """
    if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
        return False
    return _split_by_name(name, tuple(p.shape))


class MuonWithAdamW(torch.optim.Optimizer):
    r"""Muon on the hidden 2-D matrices and AdamW on the rest, as one optimizer (MODERN.md §1.4).

    The split is :func:`default_muon_split` unless ``split`` is given (``split(name, p, module) -> bool``,
    True for Muon). Two parameter groups result: ``use_muon=True`` with Muon's hyper-parameters and
    ``use_muon=False`` with AdamW's (either may be empty and is then left out); both are stepped every
    ``step()``, by :class:`Muon` and :class:`optkernels.torch.AdamW`. ``param_groups``, ``state``,
    ``state_dict()`` and LR schedulers work over both.

    Parameters
    ----------
    model : Module or iterable
        A module (its ``named_parameters()``, and embeddings recognised by type) or ``(name, tensor)`` pairs.
    lr, weight_decay, momentum, nesterov, ns_steps, adjust_lr_fn
        Muon's (defaults 0.02, 0.01, 0.95, True, 5, None: Keller Jordan's recipe).
    adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay
        AdamW's (3e-4, (0.9, 0.95), 1e-8, 0.01).
    split : callable, optional
        The rule; ``split(name, p, module)``.

    Raises
    ------
    ValueError
        A parameter that the rule sends to Muon but is not 2-D; no parameters; out-of-range values (torch's
        messages, from Muon and AdamW).
    """

    def __init__(
        self,
        model: Any,
        lr: float = 0.02,
        weight_decay: float = 0.01,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        adamw_lr: float = 3e-4,
        adamw_betas: tuple = (0.9, 0.95),
        adamw_eps: float = 1e-8,
        adamw_weight_decay: float = 0.01,
        split: Callable[..., bool] | None = None,
    ):
        rule = split or default_muon_split
        muon: list[torch.Tensor] = []
        other: list[torch.Tensor] = []
        for name, p, module in _named(model):
            if p.requires_grad:
                (muon if rule(name, p, module) else other).append(p)
        self._muon_kw: dict[str, Any] = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            adjust_lr_fn=adjust_lr_fn,
        )
        self._adamw_kw: dict[str, Any] = dict(
            lr=adamw_lr, betas=adamw_betas, eps=adamw_eps, weight_decay=adamw_weight_decay
        )
        groups = []
        if muon:
            groups.append(dict(params=muon, use_muon=True))
        if other:
            groups.append(dict(params=other, use_muon=False))
        self._inner: tuple = ()
        super().__init__(groups, {})
        self._link()

    def add_param_group(self, param_group: dict) -> None:
        """A group with ``use_muon`` (True: Muon's defaults, False: AdamW's) and any of their keys."""
        if "use_muon" not in param_group:
            raise ValueError("MuonWithAdamW: a parameter group needs 'use_muon' (True or False)")
        checker = (
            Muon(param_group["params"], **self._muon_kw)
            if param_group["use_muon"]
            else AdamW(param_group["params"], **self._adamw_kw)
        )
        for key, value in checker.defaults.items():
            param_group.setdefault(key, value)
        super().add_param_group(param_group)
        if self._inner:
            self._link()

    def _link(self) -> None:
        """Inner Muon and AdamW over this optimizer's own group dicts and state (rebuilt after a load)."""
        inner = []
        for use_muon, cls, kw in ((True, Muon, self._muon_kw), (False, AdamW, self._adamw_kw)):
            groups = [g for g in self.param_groups if bool(g["use_muon"]) is use_muon]
            if groups:
                opt = cls([p for g in groups for p in g["params"]], **kw)
                opt.param_groups = groups
                opt.state = self.state
                inner.append(opt)
        self._inner = tuple(inner)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict``, then the inner optimizers are rebuilt over the loaded state."""
        super().load_state_dict(state_dict)
        self._link()

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One step of Muon's and AdamW's groups; returns ``closure()``'s loss (or None)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self._inner:
            opt.step()
        return loss


def _named(model: Any) -> list:
    """``(name, parameter, owning module or None)`` of a module or of ``(name, tensor)`` pairs."""
    if isinstance(model, torch.nn.Module):
        items = [
            (f"{prefix}.{name}" if prefix else name, p, module)
            for prefix, module in model.named_modules()
            for name, p in module.named_parameters(recurse=False)
        ]
    else:
        items = []
        for item in model:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor)):
                raise TypeError(
                    "MuonWithAdamW takes a Module or (name, tensor) pairs (model.named_parameters())"
                )
            items.append((item[0], item[1], None))
    seen: set = set()
    unique = []
    for item in items:  # tied weights once
        if id(item[1]) not in seen:
            seen.add(id(item[1]))
            unique.append(item)
    return unique
