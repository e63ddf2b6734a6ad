"""``Adam`` (MindSpore ``nn.Adam``: plain, AMSGrad, lazy and offload modes) and the beta powers it shares
with LazyAdam, AdamOffload and AdaMax."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import _lowp
from ..kernels.adam import _adam, _adam_amsgrad, _betas_epsilon, _bias_corrected_lr
from ..sparse import fused_sparse_adam, fused_sparse_lazy_adam
from . import _offload
from ._offload import offload_step
from ._validators import check_betas_eps, check_bool
from .optimizer import Optimizer, StepContext, scalar_batch

__all__ = ["Adam"]

_KWARGS = ("use_lazy", "use_offload")


class BetaPowers:
    """Shared ``beta^t`` scalars (MindSpore's ``beta1_power``/``beta2_power`` Parameters): they start at 1 and
    are multiplied by beta BEFORE each update (t = 1 on the first step), once per step for all parameters.

    They are kept in the parameters' dtype (float32, as MindSpore's, when the dtypes are mixed), each product
    rounded to it: ``power ← power·beta``.
    """

    def __init__(self, optimizer: Optimizer, betas: dict[str, float]):
        dtypes = {plan.dtype for plan in optimizer._plans}
        self.dtype = np.dtype(np.float64) if dtypes == {np.dtype(np.float64)} else np.dtype(np.float32)
        self.betas = {name: self.dtype.type(beta) for name, beta in betas.items()}
        self.values = {name: self.dtype.type(1.0) for name in betas}

    def advanced(self) -> dict[str, Any]:
        """The powers of the coming step (not stored)."""
        return {name: self.values[name] * self.betas[name] for name in self.values}

    def state(self) -> dict[str, np.ndarray]:
        return {name: np.array(value, dtype=self.dtype) for name, value in self.values.items()}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.values = {name: self.dtype.type(state[name]) for name in self.values}


class Adam(Optimizer):
    r"""Adam (MindSpore ``nn.Adam``; OPTIMIZERS §2.3)::

        g ← w·(wd·loss_scale) + g (decay flag) → centralize (not with use_offload) → g ← g/loss_scale
        beta1_power ← beta1_power·beta1;  beta2_power ← beta2_power·beta2    (before the update; t = 1 first)
        lr_t = lr·sqrt(1 − beta2_power)/(1 − beta1_power)
        moment1 ← moment1 + (g − moment1)·(1 − beta1);  moment2 ← moment2 + (g² − moment2)·(1 − beta2)
        w ← w − lr_t·moment1/(sqrt(moment2) + eps)        (use_nesterov: numerator beta1·m + (1 − beta1)·g)

    The bias correction is folded into the step size and eps is added to ``sqrt`` of the uncorrected
    moment2 (MindSpore's and TensorFlow's kernels; not the textbook ``m̂/(sqrt(v̂)+ε)``).

    Modes (at most one of ``use_amsgrad``, ``use_lazy``, ``use_offload``):

    * default: dense → ``apply_adam``; row-sparse → non-lazy sparse Adam (every row of the moments decays and
      every row of ``w`` moves).
    * ``use_amsgrad``: ``apply_adam_with_amsgrad`` (slot ``vhat``; ``use_nesterov`` has no effect, as in
      MindSpore); row-sparse gradients are a TypeError.
    * ``use_lazy``: dense → ``apply_adam``; row-sparse → lazy sparse Adam (only the indexed rows change).
    * ``use_offload``: the moments live in host memory and the math runs on the host
      (``adam_no_update_param``: ``m ← β1·m + (1−β1)·g`` form); the parameter (NumPy or CUDA) receives
      ``w ← w + delta``. No gradient centralization, dense only (see :class:`AdamOffload`).

    Row-sparse gradients (``optkernels.sparse.RowSparse``): weight decay adds ``w[indices]·wd`` to the values,
    centralization and loss-scale division apply to the values; see :attr:`target` for the kernel choice.

    Args:
        params: Parameters or group dicts (see :class:`Optimizer`).
        learning_rate: default 1e-3 (any form of :class:`Optimizer`).
        beta1, beta2: floats in (0, 1). Defaults 0.9, 0.999.
        eps: float > 0. Default 1e-8.
        use_locking: bool (accepted for compatibility). Default False.
        use_nesterov: bool. Default False.
        weight_decay: float or int >= 0, or a callable of the global step. Default 0.0.
        loss_scale: float or int > 0. Default 1.0.
        use_amsgrad: bool. Default False.
        **kwargs: ``use_lazy`` (bool, default False) and ``use_offload`` (bool, default False), as MindSpore
            2.0; any other keyword is a TypeError.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`).

    Slots: ``moment1``, ``moment2`` (zeros), ``vhat`` (zeros, AMSGrad); scalars ``beta1_power``,
    ``beta2_power`` (start at 1).

    Raises:
        TypeError: a beta or eps not a float; a flag not a bool; an unknown keyword; the base class's errors.
        ValueError: a beta outside (0, 1); eps <= 0; ``use_lazy`` with ``use_offload``; ``use_amsgrad`` with
            either; the base class's errors.
    """

    _target_rules: str | None = "platform"
    _accepts_sparse = True

    def __init__(
        self,
        params: Any,
        learning_rate: Any = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        use_locking: bool = False,
        use_nesterov: bool = False,
        weight_decay: Any = 0.0,
        loss_scale: float = 1.0,
        use_amsgrad: bool = False,
        comm: Any = None,
        **kwargs: Any,
    ):
        unknown = [k for k in kwargs if k not in _KWARGS]
        if unknown:
            raise TypeError(
                f"For '{type(self).__name__}', unexpected keyword argument(s) {unknown}; the "
                f"accepted ones are {list(_KWARGS)}"
            )
        use_lazy, use_offload = kwargs.get("use_lazy", False), kwargs.get("use_offload", False)
        if use_offload is True:
            self._centralizes = False
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        owner = self._owner
        self.beta1, self.beta2, self.eps = check_betas_eps(beta1, beta2, eps, owner)
        self.use_locking = check_bool("use_locking", use_locking, owner)
        self.use_nesterov = check_bool("use_nesterov", use_nesterov, owner)
        self.use_amsgrad = check_bool("use_amsgrad", use_amsgrad, owner)
        self.use_lazy = check_bool("use_lazy", use_lazy, owner)
        self.use_offload = check_bool("use_offload", use_offload, owner)
        if self.use_lazy and self.use_offload:
            raise ValueError(f"For '{owner}', 'use_lazy' and 'use_offload' cannot both be True")
        if self.use_amsgrad and (self.use_lazy or self.use_offload):
            raise ValueError(
                f"For '{owner}', 'use_amsgrad' cannot be combined with 'use_lazy' or 'use_offload'"
            )
        if self.use_amsgrad or self.use_offload:
            self._accepts_sparse = False
        self._powers = BetaPowers(self, {"beta1_power": self.beta1, "beta2_power": self.beta2})
        slots = {"moment1": 0.0, "moment2": 0.0}
        if self.use_amsgrad:
            slots["vhat"] = 0.0
        self._add_slots(slots, host=self.use_offload)
        if self.use_offload:
            # per parameter, its transport (see _offload); steps in the compute dtype (float32 for
            # float16/bfloat16 parameters: w + delta is then rounded once)
            self._transports: dict[int, Any] = {}

    @property
    def beta1_power(self) -> float:
        """``beta1**t`` after the last step (1.0 before the first)."""
        return float(self._powers.values["beta1_power"])

    @property
    def beta2_power(self) -> float:
        """``beta2**t`` after the last step (1.0 before the first)."""
        return float(self._powers.values["beta2_power"])

    def _sparse_refusal(self) -> str:
        mode = "use_amsgrad=True" if self.use_amsgrad else "use_offload=True"
        return f"'{self._owner}' with {mode} does not support (MindSpore raises for it)"

    # ------------------------------------------------------------------ per step

    def _prepare_step(self, ctx: StepContext) -> None:
        ctx.extra.update(self._powers.advanced())

    def _commit_step(self, ctx: StepContext) -> None:
        self._powers.values = {name: ctx.extra[name] for name in self._powers.values}

    def _kernel_scalars(self, ctx, lr, dtype):
        b = scalar_batch(dtype)
        lr_t = _bias_corrected_lr(b, ctx.extra["beta1_power"], ctx.extra["beta2_power"], lr)
        b1, b2, eps = _betas_epsilon(b, self.beta1, self.beta2, self.eps)
        one = dtype.type(1)
        if self.use_amsgrad:
            return lr_t, one - b1, one - b2, eps
        if self.use_offload:
            return lr_t, b1, one - b1, b2, one - b2, eps, self.use_nesterov
        return lr_t, b1, one - b1, one - b2, eps, self.use_nesterov

    def _dense_kernel(self, plan):
        if self.use_offload:
            return None
        return (_adam_amsgrad if self.use_amsgrad else _adam), (plan.flat, *plan.flats)

    def _apply_dense(self, plan, grad, scalars, ctx):
        if self.use_offload:
            self._apply_offload(plan, grad, scalars)
        else:
            super()._apply_dense(plan, grad, scalars, ctx)

    def _apply_offload(self, plan, grad, scalars):
        """AdamNoUpdateParam on the host, then ``w ← w + delta`` where ``w`` lives, chunk by chunk, the
        host's next chunk overlapping the copies (:func:`._offload.offload_step`)."""
        m, v = plan.flats
        offload_step(self._transport(plan), plan.flat, m, v, grad, scalars)

    def _transport(self, plan):
        """The parameter's transport, made on its first step (pinned buffers are costly to allocate)."""
        chunk = max(1, min(_offload.CHUNK, plan.size))
        if plan.device == "cpu" or (plan.dtype != plan.cdtype and _lowp.stochastic_stream() is not None):
            # a host parameter has no copy to overlap; stochastic rounding's random stream is indexed by
            # the element: one chunk
            chunk = max(1, plan.size)
        transport = self._transports.get(plan.index)
        if transport is None or transport.chunk != chunk:
            if plan.device == "cpu":
                transport = _offload.HostTransport(chunk, plan.cdtype)
            else:
                transport = _offload.CudaTransport(chunk, plan.cdtype, plan.grad_dtype)
            self._transports[plan.index] = transport
        return transport

    def _apply_sparse(self, plan, grad, ctx):
        kernel = fused_sparse_lazy_adam if self.use_lazy else fused_sparse_adam
        fused = self._target_assigned and self._target == "CPU"
        if not fused:
            grad = self._merge_if_unique(grad)
        m, v = plan.slots["moment1"], plan.slots["moment2"]
        kernel(
            plan.param.data,
            m,
            v,
            ctx.extra["beta1_power"],
            ctx.extra["beta2_power"],
            ctx.lrs[plan.lr_index],
            self.beta1,
            self.beta2,
            self.eps,
            grad.values,
            grad.indices,
            use_locking=self.use_locking,
            use_nesterov=self.use_nesterov,
            out_of_range="drop" if fused else "raise",
        )

    # ------------------------------------------------------------------ state

    def _scalar_state(self):
        return self._powers.state()

    def _load_scalar_state(self, state):
        self._powers.load(state)
