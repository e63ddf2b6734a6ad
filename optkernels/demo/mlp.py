"""A multi-layer perceptron classifier in plain NumPy (forward and backward by hand), whose weights are
:class:`~optkernels.optimizers.Parameter` objects that the optimizers update in place."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..optimizers import Parameter
from .metrics import accuracy, softmax_cross_entropy

__all__ = ["MLP"]


class MLP:
    r"""A tanh MLP classifier with a softmax cross-entropy loss::

        h_0 = x;   h_k = tanh(h_{k−1}·W_k + b_k)  (k = 1 .. L−1);   z = h_{L−1}·W_L + b_L
        loss = mean softmax cross-entropy of z and the labels

    Weights start Glorot-uniform, ``W_k ~ U(±sqrt(6/(fan_in + fan_out)))`` (times ``input_gain`` for the
    first layer, so that a 2-D input of unit scale can draw a detailed boundary), biases at zero. The
    parameters are named ``layer<k>.weight`` (shape ``(fan_in, fan_out)``) and ``layer<k>.bias``, so LARS's
    default filter leaves the biases alone.

    Args:
        sizes: the layer widths, input first and classes last, e.g. ``(2, 32, 32, 2)``.
        rng: the generator of the initial weights (the same seed gives the same weights).
        dtype: float32 (default) or float64; every array of the forward and backward pass has it.
        input_gain: factor on the first layer's initial weights. Default 1.0.
    """

    def __init__(
        self,
        sizes: tuple[int, ...],
        rng: np.random.Generator,
        dtype: npt.DTypeLike = np.float32,
        input_gain: float = 1.0,
    ):
        if len(sizes) < 2:
            raise ValueError(f"sizes needs an input and an output width, got {sizes}")
        self.dtype = np.dtype(dtype)
        self.weights: list[Parameter] = []
        self.biases: list[Parameter] = []
        for k, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            limit = np.sqrt(6.0 / (fan_in + fan_out)) * (input_gain if k == 1 else 1.0)
            w = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(self.dtype)
            self.weights.append(Parameter(w, f"layer{k}.weight"))
            self.biases.append(Parameter(np.zeros(fan_out, self.dtype), f"layer{k}.bias"))

    @property
    def parameters(self) -> list[Parameter]:
        """The parameters in optimizer order: ``layer1.weight, layer1.bias, layer2.weight, ...``."""
        return [p for pair in zip(self.weights, self.biases) for p in pair]

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The class scores ``z`` of the inputs ``x`` (shape ``(n, sizes[0])``), shape ``(n, classes)``."""
        h = x.astype(self.dtype, copy=False)
        last = len(self.weights) - 1
        for k, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = h @ w.data + b.data
            if k < last:
                h = np.tanh(h)
        return h

    def loss_and_gradients(self, x: np.ndarray, labels: np.ndarray) -> tuple[float, list[np.ndarray]]:
        r"""The loss on a batch and its gradient for every parameter (backpropagation)::

            δ_L = ∂loss/∂z;   ∂W_k = h_{k−1}ᵀ·δ_k;   ∂b_k = Σ_rows δ_k;   δ_{k−1} = (δ_k·W_kᵀ)·(1 − h_{k−1}²)

        Args:
            x: inputs ``(n, sizes[0])``.
            labels: int classes ``(n,)``.

        Returns:
            ``(loss, gradients)``: the mean loss and one new array per parameter, in :attr:`parameters` order.
        """
        activations = [x.astype(self.dtype, copy=False)]
        last = len(self.weights) - 1
        h = activations[0]
        for k, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = h @ w.data + b.data
            if k < last:
                h = np.tanh(h)
                activations.append(h)
        loss, delta = softmax_cross_entropy(h, labels)
        grads: list[np.ndarray] = []
        for k in range(last, -1, -1):
            inputs = activations[k]
            grads.append(delta.sum(axis=0))
            grads.append(inputs.T @ delta)
            if k > 0:
                delta = (delta @ self.weights[k].data.T) * (1 - inputs * inputs)
        grads.reverse()  # [W_1, b_1, W_2, b_2, ...]
        return loss, grads

    def evaluate(self, x: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
        """``(mean loss, accuracy)`` on a data set."""
        z = self.logits(x)
        return softmax_cross_entropy(z, labels)[0], accuracy(z, labels)
