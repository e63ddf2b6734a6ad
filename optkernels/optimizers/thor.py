"""THOR: natural-gradient momentum with Kronecker-factored curvature (MindSpore ``nn.thor``) for NumPy models.

THOR (Chen et al., "THOR, Trace-based Hardware-driven layer-ORiented Natural Gradient Descent Computation",
AAAI 2021) preconditions the gradient of each Dense or convolution weight ``W`` (``C_out × K``) with the
damped inverses of two Kronecker factors of its Fisher block, then runs momentum::

    A = aᵀa / N            the layer input's covariance   (a: N × K; a conv layer's im2col patches)
    G = δᵀδ / N            the output gradient's covariance (δ: N × C_out, the gradient of the loss with
                           respect to the layer's output)
    g̃ = G'⁻¹ · g · A'⁻¹    with the damped factors A', G' below, refreshed every ``frequency`` steps

MindSpore gets ``a`` and ``δ`` from THOR layers that replace the network's Dense and Conv2d cells. A NumPy
model has no cells to replace, so :func:`thor` asks the model for them through a small protocol.

The protocol (what ``net`` must provide)
----------------------------------------
``net.thor_layers()`` returns a sequence of layer records, one per layer THOR treats (Dense, conv,
Embedding, LayerNorm), always the same layers in the same order. :class:`ThorLayer` is such a record; any
object with these attributes works:

* ``weight``: the layer's weight :class:`Parameter`, shape ``(C_out, C_in)`` for ``kind="dense"``,
  ``(C_out, C_in, kh, kw)`` for ``kind="conv"`` (its gradient is reshaped to ``(C_out, C_in·kh·kw)``),
  the table ``(vocab, dim)`` for ``kind="embedding"``, the scale ``gamma`` (any shape) for
  ``kind="layernorm"``.
* ``kind``: ``"dense"``, ``"conv"``, ``"embedding"`` or ``"layernorm"``.
* ``bias``: the bias :class:`Parameter` or None. Dense/conv biases are not preconditioned (plain momentum),
  as in MindSpore; a LayerNorm's ``beta`` gets the LayerNorm rule, as its ``gamma`` does. Embedding
  layers have none.
* the statistics of the current batch, needed only on the steps where THOR refreshes its factors
  (:attr:`Thor.is_thor_step`), either

  - ``inputs`` (``N × K``: the layer's input rows; for conv, the im2col patches, one row per example and
    output position, columns in the order of ``weight.reshape(C_out, -1)``) and ``output_grads``
    (``N × C_out``: the gradient of the *mean* loss, times the loss scale if the loss is scaled, with
    respect to the layer's output rows), from which THOR forms ``A = aᵀa/N`` and ``G = δᵀδ/N``; or
  - ``a_cov`` (``K × K``) and ``g_cov`` (``C_out × C_out``): A and G computed by the model itself (they
    take precedence when set).

* embedding layers: the same two ways, with ``inputs`` the batch's token ids (an integer array of any
  shape, values in ``[0, vocab)``) and ``output_grads`` (``N × dim``, one row per token, ``N`` the number
  of ids): THOR forms ``A = counts`` (how often each id occurs: the diagonal of ``onehotᵀ·onehot``, a
  vector of ``vocab`` values, not divided by ``N``) and ``G = δᵀδ/N``; or ``a_cov`` (``vocab`` values)
  and ``g_cov`` (``dim × dim``). LayerNorm layers need no statistics.
* conv layers only, optional: ``a_normalizer`` and ``g_normalizer`` (default 1.0), MindSpore's per-layer
  normalisers. The damping of a conv layer's A and G is divided by them and both inverses are multiplied
  by ``sqrt(1/a_normalizer)``; with A and G averaged over all ``N·P`` patch rows (``P`` output positions per
  example), ``a_normalizer = g_normalizer = P`` gives the KFC approximation of Grosse & Martens (2016).

``net.trainable_params()`` (optional) returns every Parameter to optimise, in the order gradients are
passed to the optimizer; parameters with ``requires_grad=False`` are left out, as MindSpore does. Without
it the parameters are each layer's weight then bias, in layer order. Parameters outside the THOR layers are
updated with plain momentum.

The update (KERNELS §18, MindSpore's GPU path), per step
--------------------------------------------------------
1. ``g ← g/loss_scale`` for every gradient.
2. ``λ = damping[cov_step]`` (read on THOR steps, and on every step when there are LayerNorm layers:
   only where it is used).
3. On a THOR step (``cov_step % frequency == 0``: the first of every ``frequency`` steps, as MindSpore's
   model wrapper drives it), for each layer: ``λ_A = λ/a_normalizer``, ``λ_G = λ/g_normalizer``,
   ``fm = sqrt(1/a_normalizer)`` for conv (``λ_A = λ_G = λ``, ``fm = 1`` for dense);
   ``A' = A + sqrt(λ_A)·I``; ``G' = G·batch_size²/loss_scale² + sqrt(λ_G)·I`` (note: the *square root* of
   the damping); the inverses through Cholesky factors (``A' = L·Lᵀ``, ``A'⁻¹ = L⁻ᵀ·L⁻¹``), each
   multiplied by ``fm`` and kept. On the other steps the kept (stale) inverses are used.
   Embedding layers: ``A'⁻¹ = 1/(A/batch_size + sqrt(λ))`` element-wise and ``G'⁻¹`` as above (``fm = 1``).
4. For each Dense/conv weight: ``g̃ = G'⁻¹·g·A'⁻¹`` (``g`` as ``C_out × K``); for each embedding table:
   ``g̃ = (A'⁻¹[:, None]·g)·G'⁻¹``; on every step (THOR step or not), for a LayerNorm's ``gamma`` and
   ``beta``: ``g̃ = g / (g²/batch_size + sqrt(λ))`` with this step's ``λ``.
5. ``cov_step += 1``.
6. If ``weight_decay > 0``: ``g̃ ← g̃ + weight_decay·w`` for the parameters passing ``decay_filter``
   (after preconditioning, not multiplied by the loss scale).
7. If ``enable_clip_grad``: ``g̃ ← g̃ / max(‖g̃‖₂, 1)`` per parameter (clip by norm 1.0).
8. Momentum (``ApplyMomentum``, KERNELS §7) with ``lr = learning_rate[global_step]``.

Where this differs from MindSpore
---------------------------------
* A is normalised by the number of rows ``N`` for every layer kind. MindSpore's GPU Dense layer divides
  ``aᵀa`` by its input dimension ``C_in`` instead (a quirk that makes the damping's effect depend on the
  layer width); its conv layers and its Ascend path use ``N``. Pass ``a_cov`` to use another normalisation.
* MindSpore recognises Embedding and LayerNorm layers by their cell types; here a record says so
  (``kind="embedding"``, ``kind="layernorm"``). Parameters in no record get plain momentum.
* LayerNorm's rule and an embedding's ``A'⁻¹`` are computed in the parameter's dtype (MindSpore: float32).
* The factors and inverses are computed in float64 (SciPy's Cholesky and triangular solve) and stored in
  the parameter's dtype; the preconditioning products run in that dtype (MindSpore: float32 throughout;
  the Ascend path also pads and rescales matrices, which is not reproduced).
* Parameters must be NumPy arrays (the matrix products run on the host).
* Distributed (``comm=``, with :mod:`optkernels.distributed` imported): the parallel optimizer of the base
  class (each rank keeps the momentum of its share of the parameters), and on THOR steps every rank's
  statistics (A and G of each layer) are averaged over the ranks before the inverses, one fused
  all-reduce per group of ``split_indices`` (as MindSpore's: ``[26, 53]`` over 54 layers with statistics
  makes the groups 0..26 and 27..53); the sum is taken in rank order, so every rank computes the same
  inverses. Without ``comm``, ``split_indices`` is only checked.
* ``damping`` may also be a :class:`LearningRateSchedule` (called with ``cov_step``); past the end of a
  damping table the damping is 0.0 with a warning (MindSpore's Gather returns 0.0 out of range).
* ``batch_size`` must be a positive int (MindSpore does not check it).

Worked example
--------------
A two-layer tanh MLP fitted to a teacher network that sees standardised features, while the student sees
them in units two orders of magnitude apart; THOR and Momentum take the same 100 mini-batch steps with the
same learning rate (Momentum's best among 0.001 to 0.3), momentum and seed. THOR's A factor whitens the
first layer's inputs: it ends with about a third of Momentum's loss (0.039 against 0.128).
``tests/test_thor.py`` runs this code and checks that THOR's loss is below half of Momentum's::

    import numpy as np
    from optkernels.optimizers import Momentum, Parameter, ThorLayer, thor

    class MLP:
        '''x → tanh(x·W0ᵀ + b0) → ·W1ᵀ + b1; loss = mean over the batch of ½‖out − y‖².'''

        def __init__(self, sizes, seed):
            rng = np.random.default_rng(seed)
            self.layers = [ThorLayer(Parameter(rng.standard_normal((o, i)) / np.sqrt(i), f"fc{k}.weight"),
                                     "dense", bias=Parameter(np.zeros(o), f"fc{k}.bias"))
                           for k, (i, o) in enumerate(zip(sizes[:-1], sizes[1:]))]

        def thor_layers(self):
            return self.layers

        def trainable_params(self):
            return [p for layer in self.layers for p in (layer.weight, layer.bias)]

        def forward(self, x):
            h = x
            for k, layer in enumerate(self.layers):
                layer.inputs = h                       # recorded for THOR
                h = h @ layer.weight.data.T + layer.bias.data
                if k < len(self.layers) - 1:
                    h = np.tanh(h)
            return h

        def loss_and_grads(self, x, y):
            out = self.forward(x)
            loss = 0.5 * np.mean(np.sum((out - y) ** 2, axis=1))
            delta = (out - y) / len(x)                 # d(mean loss)/d(output)
            grads = []
            for k in reversed(range(len(self.layers))):
                layer = self.layers[k]
                layer.output_grads = delta             # recorded for THOR
                grads[:0] = [delta.T @ layer.inputs, delta.sum(axis=0)]
                if k:
                    delta = (delta @ layer.weight.data) * (1.0 - layer.inputs ** 2)
            return loss, grads

    rng = np.random.default_rng(0)
    scales = np.logspace(-1, 1, 12)                   # features in units 100 times apart
    x = rng.standard_normal((512, 12)) * scales
    y = MLP([12, 16, 2], seed=1).forward(x / scales) + 0.01 * rng.standard_normal((512, 2))
    steps, batch = 100, 32
    lr = np.full(steps, 0.03)                         # Momentum's best rate on this problem
    losses = {}
    for name in ("thor", "momentum"):
        net = MLP([12, 16, 2], seed=2)
        if name == "thor":
            opt = thor(net, lr, np.full(steps, 0.1), 0.9, batch_size=batch, frequency=5)
        else:
            opt = Momentum(net.trainable_params(), lr, 0.9)
        order = np.random.default_rng(3)
        for step in range(steps):
            pick = order.choice(len(x), batch, replace=False)
            _, grads = net.loss_and_grads(x[pick], y[pick])
            opt(grads)
        losses[name] = net.loss_and_grads(x, y)[0]
    assert losses["thor"] < losses["momentum"]
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels._checks import check_range as check_kernel_range
from ..kernels.momentum import _momentum
from ._validators import check_bool, check_float, check_range
from .optimizer import Optimizer, scalar_batch
from .parameter import Parameter
from .schedules import LearningRateSchedule

__all__ = ["Thor", "ThorLayer", "thor", "thor_inverses"]

_KINDS = ("dense", "conv", "embedding", "layernorm")
_PRECONDITIONED = ("dense", "conv", "embedding")  # the kinds with Kronecker factors


@dataclass
class ThorLayer:
    """One Dense, conv, Embedding or LayerNorm layer as THOR sees it (see the module docstring for the
    protocol).

    Attributes:
        weight: the weight Parameter, ``(C_out, C_in)`` (dense), ``(C_out, C_in, kh, kw)`` (conv), the table
            ``(vocab, dim)`` (embedding) or gamma (layernorm).
        kind: ``"dense"``, ``"conv"``, ``"embedding"`` or ``"layernorm"``.
        bias: the bias Parameter, or None (dense/conv: never preconditioned; layernorm: beta, which gets the
            LayerNorm rule).
        inputs: this batch's layer inputs, ``N × K`` (conv: im2col patch rows; embedding: the token ids, any
            shape), or None.
        output_grads: this batch's gradients of the mean (loss-scaled) loss w.r.t. the layer's output rows,
            ``N × C_out`` (embedding: ``N × dim``, N the number of ids), or None.
        a_cov: a precomputed ``A`` (``K × K``; embedding: the ``vocab`` id counts), used instead of
            ``inputs`` when set.
        g_cov: a precomputed ``G`` (``C_out × C_out``; embedding: ``dim × dim``), used instead of
            ``output_grads`` when set.
        a_normalizer, g_normalizer: conv layers' damping normalisers (MindSpore's), default 1.0.
    """

    weight: Parameter
    kind: str
    bias: Parameter | None = None
    inputs: np.ndarray | None = None
    output_grads: np.ndarray | None = None
    a_cov: np.ndarray | None = None
    g_cov: np.ndarray | None = None
    a_normalizer: float = 1.0
    g_normalizer: float = 1.0


def _damped_inverse(matrix: np.ndarray, shift: float, what: str) -> np.ndarray:
    """``(matrix + shift·I)⁻¹`` through the Cholesky factor: ``L⁻ᵀ·L⁻¹`` (float64)."""
    import scipy.linalg  # here, so that importing optkernels.optimizers does not load SciPy

    n = matrix.shape[0]
    eye = np.eye(n)
    try:
        lower = scipy.linalg.cholesky(matrix + shift * eye, lower=True)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"{what} is not positive definite (increase the damping): {exc}") from None
    lower_inv = scipy.linalg.solve_triangular(lower, eye, lower=True)
    return lower_inv.T @ lower_inv


def thor_inverses(
    a_cov: Any,
    g_cov: Any,
    damping: float,
    *,
    kind: str = "dense",
    batch_size: int = 32,
    loss_scale: float = 1.0,
    a_normalizer: float = 1.0,
    g_normalizer: float = 1.0,
    name: str = "layer",
) -> tuple[np.ndarray, np.ndarray]:
    r"""THOR's damped inverse Kronecker factors of one layer (KERNELS §18 step 3), in float64::

        λ_A = λ/a_normalizer, λ_G = λ/g_normalizer, fm = sqrt(1/a_normalizer)    (conv)
        λ_A = λ_G = λ, fm = 1                                                   (dense, embedding)
        A⁻¹ = fm·(A + sqrt(λ_A)·I)⁻¹                                            (dense, conv)
        A⁻¹ = 1/(A/batch_size + sqrt(λ))        element-wise, A a vector         (embedding)
        G⁻¹ = fm·(G·batch_size²/loss_scale² + sqrt(λ_G)·I)⁻¹

    each matrix inverse computed as ``L⁻ᵀ·L⁻¹`` from the Cholesky factor ``L`` of the damped matrix.

    Args:
        a_cov: A, a symmetric ``K × K`` array (embedding: the ``vocab`` id counts, a vector).
        g_cov: G, a symmetric ``C_out × C_out`` array (embedding: ``dim × dim``).
        damping: λ >= 0.
        kind: ``"dense"``, ``"conv"`` or ``"embedding"``.
        batch_size: the batch size the output gradients were averaged over.
        loss_scale: the loss scale included in the output gradients.
        a_normalizer, g_normalizer: conv normalisers (> 0).
        name: the layer's name, for error messages.

    Returns:
        ``(A⁻¹, G⁻¹)``, new float64 arrays.

    Raises:
        ValueError: a factor is not square (embedding: A not a vector), or not positive definite after
            damping (embedding: an entry of ``A/batch_size + sqrt(λ)`` not > 0).
    """
    a = np.asarray(a_cov, dtype=np.float64)
    g = np.asarray(g_cov, dtype=np.float64)
    embedding = kind == "embedding"
    for what, m in (("G", g),) if embedding else (("A", a), ("G", g)):
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"THOR factor {what} of {name} must be a square matrix, got shape {m.shape}")
    if embedding and a.ndim != 1:
        raise ValueError(
            f"THOR factor A of embedding {name} must be a vector (one count per id), got shape {a.shape}"
        )
    if embedding:
        damped = a / float(batch_size) + math.sqrt(damping)
        if not np.all(damped > 0.0):
            raise ValueError(
                f"THOR factor A of {name} has an entry <= 0 after damping (an id that never "
                f"occurs, with damping 0: increase the damping)"
            )
        a_inv = 1.0 / damped
        g_scaled = g * (float(batch_size) ** 2 / float(loss_scale) ** 2)
        return a_inv, _damped_inverse(g_scaled, math.sqrt(damping), f"THOR factor G of {name}")
    if kind == "conv":
        damping_a, damping_g = damping / a_normalizer, damping / g_normalizer
        fm = math.sqrt(1.0 / a_normalizer)
    else:
        damping_a = damping_g = damping
        fm = 1.0
    a_inv = _damped_inverse(a, math.sqrt(damping_a), f"THOR factor A of {name}")
    g_scaled = g * (float(batch_size) ** 2 / float(loss_scale) ** 2)
    g_inv = _damped_inverse(g_scaled, math.sqrt(damping_g), f"THOR factor G of {name}")
    return fm * a_inv, fm * g_inv


class _Damping:
    """The damping: a table indexed by ``cov_step`` (0.0 past its end), a fixed 0-d array, or a schedule."""

    schedule: LearningRateSchedule | None
    table: Any  # the 1-D damping table, or None with a schedule

    def __init__(self, damping: Any, owner: str):
        self._warned = False
        if isinstance(damping, LearningRateSchedule):
            self.schedule, self.table = damping, None
            return
        if isinstance(damping, (bool, np.bool_)) or not isinstance(damping, (np.ndarray, list, tuple)):
            raise TypeError(
                f"For '{owner}', 'damping' must be an array (one value per step), a list or "
                f"tuple of numbers, or a LearningRateSchedule, got {type(damping).__name__}"
            )
        if not isinstance(damping, np.ndarray) and any(
            isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating))
            for v in damping
        ):
            raise TypeError(f"For '{owner}', every item of 'damping' must be a number")
        if isinstance(damping, np.ma.MaskedArray):
            raise TypeError(
                f"For '{owner}', 'damping' must not be a masked array (its mask cannot be honoured)"
            )
        values = np.asarray(damping)
        if values.dtype.kind not in "fiu":
            raise TypeError(f"For '{owner}', 'damping' must have a real dtype, got {values.dtype}")
        values = values.astype(np.float64)
        if values.ndim > 1:
            raise ValueError(f"For '{owner}', 'damping' must be 0-d or 1-D, got shape {values.shape}")
        if values.size == 0:
            raise ValueError(f"For '{owner}', 'damping' must not be empty")
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"For '{owner}', 'damping' values must be finite and >= 0")
        self.schedule, self.table = None, values.reshape(-1) if values.ndim else values.reshape(1)
        self.fixed = values.ndim == 0

    def value(self, cov_step: int, owner: str) -> float:
        if self.schedule is not None:
            value = float(self.schedule(cov_step))
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(
                    f"For '{owner}', the damping schedule returned {value} at cov_step {cov_step}"
                )
            return value
        if self.fixed:
            return float(self.table[0])
        if cov_step < self.table.shape[0]:
            return float(self.table[cov_step])
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"For '{owner}', cov_step {cov_step} is past the end of the damping table "
                f"({self.table.shape[0]} values): the damping is 0.0 from now on",
                UserWarning,
                stacklevel=5,
            )
        return 0.0


def _layer_name(layer: Any) -> str:
    name = getattr(getattr(layer, "weight", None), "name", None)
    return name if isinstance(name, str) else type(layer).__name__


def _check_layer(layer: Any, owner: str) -> tuple[int, int]:
    """Validate one layer record's structure; returns its ``(C_out, K)`` (embedding: ``(vocab, dim)``)."""
    name = _layer_name(layer)
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, Parameter):
        raise TypeError(
            f"For '{owner}', the THOR layer {name} must have a 'weight' Parameter, got "
            f"{type(weight).__name__}"
        )
    kind = getattr(layer, "kind", None)
    if kind not in _KINDS:
        raise ValueError(
            f"For '{owner}', the THOR layer {name} has kind {kind!r}; it must be 'dense', "
            f"'conv', 'embedding' or 'layernorm'"
        )
    rank = {"dense": 2, "conv": 4, "embedding": 2}.get(kind)
    if rank is not None and weight.ndim != rank:
        raise ValueError(
            f"For '{owner}', the {kind} layer {name} must have a weight of rank {rank}, got "
            f"shape {weight.shape}"
        )
    bias = getattr(layer, "bias", None)
    if bias is not None and not isinstance(bias, Parameter):
        raise TypeError(
            f"For '{owner}', the bias of THOR layer {name} must be a Parameter or None, got "
            f"{type(bias).__name__}"
        )
    if weight.is_cuda:
        raise TypeError(f"For '{owner}', THOR runs on NumPy parameters only; {name} is a CUDA array")
    if kind == "conv":
        for attr in ("a_normalizer", "g_normalizer"):
            value = getattr(layer, attr, 1.0)
            is_number = isinstance(value, (int, float, np.integer, np.floating))
            if isinstance(value, (bool, np.bool_)) or not is_number:
                raise TypeError(f"For '{owner}', '{attr}' of THOR layer {name} must be a number")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"For '{owner}', '{attr}' of THOR layer {name} must be > 0, got {value}")
    if kind == "embedding" and bias is not None:
        raise ValueError(f"For '{owner}', the embedding layer {name} has no bias (set bias=None)")
    if kind == "layernorm" and bias is not None and bias.is_cuda:
        raise TypeError(
            f"For '{owner}', THOR runs on NumPy parameters only; the bias of {name} is a CUDA array"
        )
    c_out = weight.shape[0] if weight.ndim else 1
    return c_out, weight.size // max(c_out, 1)


def _net_structure(net: Any, owner: str) -> tuple[list, list[Parameter]]:
    """The layer records and the parameters to optimise (see the module docstring's protocol)."""
    get_layers = getattr(net, "thor_layers", None)
    if not callable(get_layers):
        raise TypeError(
            f"For '{owner}', 'net' must have a method thor_layers() returning its layer "
            f"layer records (see optkernels.optimizers.thor), got {type(net).__name__}"
        )
    layers = get_layers()
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(
            f"For '{owner}', net.thor_layers() must return a sequence of layer records, got "
            f"{type(layers).__name__}"
        )
    layers = list(layers)
    for layer in layers:
        _check_layer(layer, owner)
    get_params = getattr(net, "trainable_params", None)
    if callable(get_params):
        params = [p for p in get_params() if getattr(p, "requires_grad", True)]
    else:
        params = [p for layer in layers for p in (layer.weight, layer.bias) if p is not None]
    ids = {id(p) for p in params}
    for layer in layers:
        if id(layer.weight) not in ids:
            raise ValueError(
                f"For '{owner}', the weight of THOR layer {_layer_name(layer)} is not among the "
                f"parameters to optimise"
            )
        if layer.kind == "layernorm" and layer.bias is not None and id(layer.bias) not in ids:
            raise ValueError(
                f"For '{owner}', the bias of LayerNorm layer {_layer_name(layer)} is not among "
                f"the parameters to optimise"
            )
    return layers, params


class Thor(Optimizer):
    r"""THOR's optimizer (MindSpore ``ThorGpu``), built by :func:`thor`: see the module docstring for the
    protocol ``net`` follows and the update rule. Use :func:`thor` to create one.

    Attributes:
        cov_step: the number of steps taken (MindSpore's ``cov_step``); the next step refreshes the factors
            when ``cov_step % frequency == 0``.
        momentum, use_nesterov, batch_size, frequency, enable_clip_grad, decay_flags: as given.

    Slots: ``moments`` (zeros), as :class:`Momentum`; ``matrix_a_inv``/``matrix_g_inv`` hold the kept
    inverses (see the properties). :meth:`state_dict` holds ``moments.<name>``, ``global_step``,
    ``cov_step`` and the kept inverses (``matrix_a_inv.<weight name>``, ``matrix_g_inv.<weight name>``), so
    that a loaded state resumes between two THOR steps with the same stale inverses.
    """

    _coupled_decay = False
    _centralizes = False

    def __init__(
        self,
        net: Any,
        learning_rate: Any,
        damping: Any,
        momentum: float,
        weight_decay: Any = 0.0,
        loss_scale: Any = 1.0,
        batch_size: int = 32,
        use_nesterov: bool = False,
        decay_filter: Callable[[Parameter], bool] = lambda x: x.name not in [],
        split_indices: Sequence[int] | None = None,
        enable_clip_grad: bool = False,
        frequency: int = 100,
        comm: Any = None,
    ):
        owner = type(self).__name__
        layers, params = _net_structure(net, owner)
        if not params:
            raise ValueError(f"For '{owner}', 'net' has no trainable parameters")
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(
                    f"For '{owner}', net.trainable_params() must return Parameters, got {type(p).__name__}"
                )
            if p.is_cuda:
                raise TypeError(
                    f"For '{owner}', THOR runs on NumPy parameters only; {p.name} is a CUDA array"
                )
        super().__init__(learning_rate, params, weight_decay, loss_scale, comm=comm)
        self.momentum = check_range("momentum", check_float("momentum", momentum, owner), owner, 0.0)
        if isinstance(frequency, (bool, np.bool_)) or not isinstance(frequency, (int, np.integer)):
            raise TypeError(f"For '{owner}', 'frequency' must be an int, got {type(frequency).__name__}")
        if frequency < 2:
            raise ValueError(f"For '{owner}', 'frequency' must be at least 2, got {frequency}")
        self.frequency = int(frequency)
        if not isinstance(learning_rate, (np.ndarray, list, tuple, LearningRateSchedule)):
            raise TypeError(
                f"For '{owner}', 'learning_rate' must be an array (one value per step), a list "
                f"or tuple, or a LearningRateSchedule, got {type(learning_rate).__name__}"
            )
        self.use_nesterov = check_bool("use_nesterov", use_nesterov, owner)
        self._damping = _Damping(damping, owner)
        self.damping = damping
        if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"For '{owner}', 'batch_size' must be an int, got {type(batch_size).__name__}")
        if batch_size <= 0:
            raise ValueError(f"For '{owner}', 'batch_size' must be > 0, got {batch_size}")
        self.batch_size = int(batch_size)
        if not callable(decay_filter):
            raise TypeError(
                f"For '{owner}', 'decay_filter' must be callable, got {type(decay_filter).__name__}"
            )
        if split_indices is not None and (
            not isinstance(split_indices, (list, tuple))
            or any(
                isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) for i in split_indices
            )
        ):
            raise TypeError(f"For '{owner}', 'split_indices' must be None or a list of ints")
        n_stats = sum(layer.kind != "layernorm" for layer in layers)
        if split_indices is not None and (
            any(not 0 <= i < n_stats for i in split_indices)
            or any(b <= a for a, b in zip(split_indices, split_indices[1:]))
        ):
            raise ValueError(
                f"For '{owner}', 'split_indices' must be increasing indices of the layers with "
                f"statistics, in [0, {n_stats}), got {list(split_indices)}"
            )
        self.split_indices = split_indices
        self.enable_clip_grad = check_bool("enable_clip_grad", enable_clip_grad, owner)
        self.decay_flags = tuple(bool(decay_filter(p)) for p in self._params)
        self._net = net
        self._layer_weights = [layer.weight for layer in layers]
        self._layer_kinds = [layer.kind for layer in layers]
        index = {id(p): k for k, p in enumerate(self._params)}
        self._layer_of = {index[id(w)]: k for k, w in enumerate(self._layer_weights)}
        for k, layer in enumerate(layers):  # a LayerNorm's beta takes the LayerNorm rule too
            if layer.kind == "layernorm" and layer.bias is not None:
                self._layer_of[index[id(layer.bias)]] = k
        self._has_layernorm = "layernorm" in self._layer_kinds
        self._inverses: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(layers)
        self.cov_step = 0
        self._add_slots({"moments": 0.0})

    # ------------------------------------------------------------------------------------ public API

    @property
    def is_thor_step(self) -> bool:
        """True if the next step refreshes the factors (and so reads the layers' statistics)."""
        return self.cov_step % self.frequency == 0

    @property
    def matrix_a_inv(self) -> tuple:
        """The kept ``A'⁻¹·fm`` of each layer (in ``thor_layers()`` order, the parameter's dtype; a vector for
        an embedding; None before the first step, and always for a LayerNorm layer)."""
        return tuple(None if inv is None else inv[0] for inv in self._inverses)

    @property
    def matrix_g_inv(self) -> tuple:
        """The kept ``G'⁻¹·fm`` of each layer (as :attr:`matrix_a_inv`)."""
        return tuple(None if inv is None else inv[1] for inv in self._inverses)

    # ------------------------------------------------------------------------------------ the step

    def _token_counts(self, ids: Any, vocab: int, name: str) -> np.ndarray:
        """An embedding's A: how often each id in ``[0, vocab)`` occurs in ``ids`` (float64), checked."""
        owner = self._owner
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(
                f"For '{owner}', 'inputs' of embedding layer {name} must be integer token ids, "
                f"got dtype {ids.dtype}"
            )
        ids = ids.reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(
                f"For '{owner}', 'inputs' of embedding layer {name} must be ids in "
                f"[0, {vocab}), got values from {ids.min()} to {ids.max()}"
            )
        return np.bincount(ids, minlength=vocab).astype(np.float64)

    def _layer_statistics(self, layer: Any, c_out: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """A and G of one layer from its record (float64), checked. Dense/conv: ``A = aᵀa/N`` (``K × K``);
        embedding (``c_out, k = vocab, dim``): A the id counts (``vocab`` values); ``G = δᵀδ/N`` for both."""
        owner, name = self._owner, _layer_name(layer)
        embedding = layer.kind == "embedding"
        a_shape, g_dim = ((c_out,), k) if embedding else ((k, k), c_out)
        a_cov, g_cov = getattr(layer, "a_cov", None), getattr(layer, "g_cov", None)
        if a_cov is None or g_cov is None:
            inputs, grads = getattr(layer, "inputs", None), getattr(layer, "output_grads", None)
            if inputs is None or grads is None:
                what = "'inputs' (the token ids)" if embedding else "'inputs'"
                raise ValueError(
                    f"For '{owner}', THOR layer {name} has no statistics for this THOR step: "
                    f"set {what} and 'output_grads' (or 'a_cov' and 'g_cov')"
                )
            if embedding:
                n = np.asarray(inputs).size
                counts = self._token_counts(inputs, c_out, name)
            else:
                a = np.asarray(inputs, dtype=np.float64)
                if a.ndim != 2 or a.shape[1] != k:
                    raise ValueError(
                        f"For '{owner}', 'inputs' of THOR layer {name} must have shape "
                        f"(N, {k}), got {a.shape}"
                    )
                n = a.shape[0]
            if n == 0:
                raise ValueError(f"For '{owner}', 'inputs' of THOR layer {name} has no rows")
            d = np.asarray(grads, dtype=np.float64)
            if d.shape != (n, g_dim):
                raise ValueError(
                    f"For '{owner}', 'output_grads' of THOR layer {name} must have shape "
                    f"({n}, {g_dim}) (one row per input row), got {d.shape}"
                )
            if a_cov is None:
                a_cov = counts if embedding else a.T @ a / n
            if g_cov is None:
                g_cov = d.T @ d / n
        a_cov = np.asarray(a_cov, dtype=np.float64)
        g_cov = np.asarray(g_cov, dtype=np.float64)
        if a_cov.shape != a_shape:
            raise ValueError(
                f"For '{owner}', 'a_cov' of THOR layer {name} must have shape {a_shape}"
                f"{' (one count per id)' if embedding else ''}, got {a_cov.shape}"
            )
        if g_cov.shape != (g_dim, g_dim):
            raise ValueError(
                f"For '{owner}', 'g_cov' of THOR layer {name} must have shape "
                f"({g_dim}, {g_dim}), got {g_cov.shape}"
            )
        if not (np.all(np.isfinite(a_cov)) and np.all(np.isfinite(g_cov))):
            raise ValueError(f"For '{owner}', the statistics of THOR layer {name} are not finite")
        return a_cov, g_cov

    def _statistics(self) -> list:
        """Per layer ``(layer, a_cov, g_cov)`` (None for LayerNorm), checked."""
        owner = self._owner
        layers = list(self._net.thor_layers())
        if [id(getattr(layer, "weight", None)) for layer in layers] != [id(w) for w in self._layer_weights]:
            raise ValueError(
                f"For '{owner}', net.thor_layers() must return the same layers, in the same "
                f"order, at every step"
            )
        out: list[Any] = []
        for layer in layers:
            c_out, k = _check_layer(layer, owner)
            if layer.kind == "layernorm":
                out.append(None)
            else:
                out.append((layer, *self._layer_statistics(layer, c_out, k)))
        return out

    def _averaged_statistics(self) -> list:
        """With a communicator: every rank's statistics checked (all ranks raise if one rank's are bad), then
        averaged over the ranks, one fused all-reduce per group of ``split_indices`` (group ``j`` holds the
        layers with statistics after ``split_indices[j-1]`` up to ``split_indices[j]``; those after the last
        index form the last group; None: one group)."""
        error = None
        try:
            stats = self._statistics()
        except (TypeError, ValueError) as caught:
            error = caught
        parallel = self._parallel
        assert parallel is not None  # called only with a communicator
        ok = parallel.all_agree(error is None)
        if error is not None:
            raise error
        if not ok:
            raise ValueError(
                f"For '{self._owner}', another rank's THOR statistics were invalid (its error "
                "names them); nothing was changed"
            )
        having = [k for k, item in enumerate(stats) if item is not None]
        cuts = [i + 1 for i in (self.split_indices or [])]
        bounds = [0] + [c for c in cuts if c < len(having)] + [len(having)]
        groups = [having[a:b] for a, b in zip(bounds, bounds[1:])]
        averaged = parallel.average_groups([[m for k in g for m in stats[k][1:]] for g in groups])
        for g, arrays in zip(groups, averaged):
            for j, k in enumerate(g):
                stats[k] = (stats[k][0], arrays[2 * j], arrays[2 * j + 1])
        return stats

    def _refreshed_inverses(self, damping: float) -> list[tuple[np.ndarray, np.ndarray] | None]:
        stats = self._statistics() if self._parallel is None else self._averaged_statistics()
        out: list[tuple[np.ndarray, np.ndarray] | None] = []
        for item in stats:
            if item is None:
                out.append(None)
                continue
            layer, a_cov, g_cov = item
            conv = layer.kind == "conv"
            a_norm = float(getattr(layer, "a_normalizer", 1.0)) if conv else 1.0
            g_norm = float(getattr(layer, "g_normalizer", 1.0)) if conv else 1.0
            a_inv, g_inv = thor_inverses(
                a_cov,
                g_cov,
                damping,
                kind=layer.kind,
                batch_size=self.batch_size,
                loss_scale=self._loss_scale,
                a_normalizer=a_norm,
                g_normalizer=g_norm,
                name=_layer_name(layer),
            )
            dtype = layer.weight.dtype
            out.append((a_inv.astype(dtype), g_inv.astype(dtype)))
        return out

    def _prepare_step(self, ctx: Any) -> None:
        # the damping is read only where it is used: on THOR steps, and by the LayerNorm rule on every step
        damping = (
            self._damping.value(self.cov_step, self._owner)
            if self.is_thor_step or self._has_layernorm
            else None
        )
        ctx.extra["damping"] = damping
        if self.is_thor_step and damping is not None:  # a THOR step always reads the damping
            ctx.extra["inverses"] = self._refreshed_inverses(damping)
        else:
            ctx.extra["inverses"] = self._inverses

    def _commit_step(self, ctx: Any) -> None:
        self._inverses = ctx.extra["inverses"]
        self.cov_step += 1

    # ------------------------------------------------------------------------------------ state

    def _inverse_shapes(self) -> list[tuple[tuple, tuple, np.dtype] | None]:
        """Per layer, the shapes of its kept ``A'⁻¹`` and ``G'⁻¹`` and their dtype (None: LayerNorm)."""
        out: list[tuple[tuple, tuple, np.dtype] | None] = []
        for w, kind in zip(self._layer_weights, self._layer_kinds):
            if kind == "layernorm":
                out.append(None)
            elif kind == "embedding":
                out.append(((w.shape[0],), (w.shape[1], w.shape[1]), w.dtype))
            else:
                k, c_out = w.size // w.shape[0], w.shape[0]
                out.append(((k, k), (c_out, c_out), w.dtype))
        return out

    def _scalar_state(self) -> dict[str, np.ndarray]:
        """``cov_step`` and the kept inverses (``matrix_a_inv.<weight name>``, ``matrix_g_inv.<weight
        name>``; zeros before the first step; none for LayerNorm layers), so that a loaded state resumes
        between two THOR steps."""
        out = {"cov_step": np.array(self.cov_step, dtype=np.int64)}
        for w, inv, shapes in zip(self._layer_weights, self._inverses, self._inverse_shapes()):
            if shapes is None:
                continue
            a_shape, g_shape, dtype = shapes
            a_inv, g_inv = inv if inv is not None else (np.zeros(a_shape, dtype), np.zeros(g_shape, dtype))
            out[f"matrix_a_inv.{w.name}"] = a_inv.copy()
            out[f"matrix_g_inv.{w.name}"] = g_inv.copy()
        return out

    def _load_scalar_state(self, state: dict[str, np.ndarray]) -> None:
        self.cov_step = int(state["cov_step"])
        self._inverses = [
            None
            if shapes is None
            else (np.array(state[f"matrix_a_inv.{w.name}"]), np.array(state[f"matrix_g_inv.{w.name}"]))
            for w, shapes in zip(self._layer_weights, self._inverse_shapes())
        ]

    def load_state_dict(self, state: Any) -> None:
        """Restore a state saved by :meth:`state_dict` (see :meth:`Optimizer.load_state_dict`); ``"cov_step"``
        must be an integer >= 0 (ValueError, raised before anything is written)."""
        if hasattr(state, "keys") and "cov_step" in state.keys():
            step = np.asarray(state["cov_step"])
            if step.shape == () and step.dtype.kind in "iu" and int(step) < 0:
                raise ValueError(f"For '{self._owner}', the state entry 'cov_step' must be >= 0, got {step}")
        super().load_state_dict(state)

    # ------------------------------------------------------------------------------------ kernel scalars

    def _kernel_scalars(self, ctx: Any, lr: float, dtype: np.dtype) -> tuple:
        b = scalar_batch(dtype)
        lr_ = b.scalar("learning_rate", lr)
        check_kernel_range("learning_rate", lr_, 0.0)
        return lr_, b.scalar("momentum", self.momentum), dtype.type(1.0), self.use_nesterov

    def _apply_dense(self, plan: Any, grad: Any, scalars: tuple, ctx: Any) -> None:
        layer = self._layer_of.get(plan.index)
        kind = None if layer is None else self._layer_kinds[layer]
        if kind == "layernorm":  # g / (g²/batch_size + sqrt(λ)), in the parameter's dtype
            dtype = plan.dtype.type
            fim = grad * grad * dtype(1.0 / self.batch_size) + dtype(math.sqrt(ctx.extra["damping"]))
            grad = grad * (dtype(1.0) / fim)
        elif kind == "embedding":
            a_inv, g_inv = ctx.extra["inverses"][layer]
            grad = ((a_inv[:, None] * grad.reshape(plan.shape[0], -1)) @ g_inv).reshape(-1)
        elif kind is not None:
            a_inv, g_inv = ctx.extra["inverses"][layer]
            c_out = plan.shape[0]
            grad = (g_inv @ grad.reshape(c_out, -1) @ a_inv).reshape(-1)
        wd = ctx.wds[plan.wd_index]
        if wd > 0.0 and self.decay_flags[plan.index]:
            grad = grad + plan.dtype.type(wd) * plan.flat
        if self.enable_clip_grad:
            norm = math.sqrt(math.fsum(np.square(grad, dtype=np.float64)))
            grad = grad * plan.dtype.type(1.0 / max(norm, 1.0))
        grad = np.ascontiguousarray(grad)
        _momentum.launch(plan.device, plan.size, plan.flat, plan.flats[0], grad, *scalars)


def thor(
    net: Any,
    learning_rate: Any,
    damping: Any,
    momentum: float,
    weight_decay: Any = 0.0,
    loss_scale: Any = 1.0,
    batch_size: int = 32,
    use_nesterov: bool = False,
    decay_filter: Callable[[Parameter], bool] = lambda x: x.name not in [],
    split_indices: Sequence[int] | None = None,
    enable_clip_grad: bool = False,
    frequency: int = 100,
    comm: Any = None,
) -> Thor:
    """THOR, MindSpore ``nn.thor``'s signature and defaults (OPTIMIZERS §2.15): a :class:`Thor` optimizer over
    ``net``'s parameters. See the module docstring for what ``net`` must provide and for the update.

    Call it like any optimizer: ``opt(gradients)`` with one gradient per parameter in ``opt.parameters``
    order (``net.trainable_params()`` order). Before a step on which :attr:`Thor.is_thor_step` is True, the
    layers of ``net.thor_layers()`` must hold the batch's statistics.

    Args:
        net: an object with ``thor_layers()`` (and optionally ``trainable_params()``), see the module
            docstring.
        learning_rate: one value per step: a 1-D array, a list or tuple (0.0 past the end), a 0-d array
            (fixed), or a :class:`LearningRateSchedule`. A plain number is a TypeError (MindSpore requires a
            Tensor).
        damping: λ per step, indexed by ``cov_step``: a 1-D array, list or tuple (0.0 past the end), a 0-d
            array, or a :class:`LearningRateSchedule` (called with ``cov_step``); values >= 0.
        momentum: a float >= 0 (an int is a TypeError).
        weight_decay: float or int >= 0 (or a callable of the global step), added after preconditioning to
            the parameters passing ``decay_filter``. Default 0.0.
        loss_scale: float or int > 0: gradients are divided by it and G by its square. Default 1.0.
        batch_size: positive int; G is multiplied by ``batch_size²``. Default 32.
        use_nesterov: bool. Default False.
        decay_filter: ``Parameter -> bool``. Default: every parameter.
        split_indices: None or increasing indices of the layers with statistics (Dense, conv, Embedding,
            counted in ``thor_layers()`` order): with ``comm``, the groups of layers whose statistics are
            averaged over the ranks in one fused all-reduce each (``[26, 53]``: layers 0..26, then 27..53;
            None: one group); checked and otherwise unused without ``comm``.
        enable_clip_grad: bool: clip each preconditioned gradient to L2 norm 1.0. Default False.
        frequency: int >= 2: the factors are refreshed on the first of every ``frequency`` steps. Default 100.
        comm: None, or an mpi4py communicator: the parallel optimizer (see :class:`Optimizer`) with the
            statistics averaged over the ranks (see ``split_indices``).

    Returns:
        The :class:`Thor` optimizer.

    Raises:
        TypeError: ``net`` does not follow the protocol; ``learning_rate`` or ``damping`` of another type;
            ``momentum`` not a float; ``frequency`` (2.5 too: MindSpore's code checks the type first, though
            its documentation says ValueError) or ``batch_size`` not an int; ``use_nesterov`` or
            ``enable_clip_grad`` not a bool; ``decay_filter`` not callable; ``split_indices`` not None or a
            list of ints; CUDA parameters; the base class's type errors (loss_scale, weight_decay). At a
            THOR step: an embedding's ``inputs`` that are not integer ids.
        ValueError: ``momentum`` < 0; ``frequency`` < 2; ``batch_size`` <= 0; a bad layer record (kind,
            weight rank, an embedding with a bias, a LayerNorm bias not among the parameters); negative or
            non-finite damping; the base class's value errors. At a THOR step: missing or mis-shaped
            statistics, ids out of range, or a factor that is not positive definite after damping (raised
            before anything is written).
    """
    return Thor(
        net,
        learning_rate,
        damping,
        momentum,
        weight_decay,
        loss_scale,
        batch_size,
        use_nesterov,
        decay_filter,
        split_indices,
        enable_clip_grad,
        frequency,
        comm,
    )
