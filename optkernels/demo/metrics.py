"""Losses and scores of the demo, in plain NumPy: softmax cross-entropy, logistic loss, accuracy, ROC AUC."""

from __future__ import annotations

import numpy as np

__all__ = ["accuracy", "logistic_loss", "roc_auc", "sigmoid", "softmax_cross_entropy"]


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    r"""Mean softmax cross-entropy and its gradient with respect to the logits::

        loss = mean_i (logsumexp(z_i) − z_i[y_i]);   ∂loss/∂z_i = (softmax(z_i) − onehot(y_i)) / n

    computed in the logits' dtype, stably (the row maximum is subtracted first).

    Args:
        logits: array ``(n, classes)``.
        labels: int array ``(n,)`` of classes in ``[0, classes)``.

    Returns:
        ``(loss, grad)``: the loss as a Python float and the gradient, of the logits' shape and dtype.
    """
    n = logits.shape[0]
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, labels]))
    grad = exp / total
    grad[rows, labels] -= 1
    grad /= n
    return loss, grad


def logistic_loss(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    r"""Mean logistic loss (binary cross-entropy on logits) and its gradient::

        loss = mean_i (softplus(z_i) − y_i·z_i);   ∂loss/∂z_i = (sigmoid(z_i) − y_i) / n

    with ``softplus(z) = max(z, 0) + log1p(exp(−|z|))`` (stable for any z).

    Args:
        logits: array ``(n,)``.
        targets: array ``(n,)`` of 0.0 and 1.0.

    Returns:
        ``(loss, grad)``: the loss as a Python float and the gradient, of the logits' shape and dtype.
    """
    softplus = np.maximum(logits, 0) + np.log1p(np.exp(-np.abs(logits)))
    loss = float(np.mean(softplus - targets * logits))
    grad = (sigmoid(logits) - targets) / logits.shape[0]
    return loss, grad.astype(logits.dtype, copy=False)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """``1/(1 + exp(−z))``, without overflow warnings for large ``|z|``."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1 / (1 + e), e / (1 + e))


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The fraction of rows whose largest logit is the label's."""
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def roc_auc(scores: np.ndarray, targets: np.ndarray) -> float:
    r"""Area under the ROC curve: the probability that a random positive scores above a random negative,
    ties counting one half (the Mann–Whitney statistic)::

        AUC = (Σ_{i positive} rank_i − P·(P + 1)/2) / (P·N)

    where ``rank`` is the 1-based rank of each score among all (tied scores get their average rank), ``P``
    and ``N`` the numbers of positives and negatives.

    Args:
        scores: array ``(n,)`` of any real scores (probabilities or logits: only their order matters).
        targets: array ``(n,)`` of 0 and 1.

    Returns:
        The AUC in ``[0, 1]``; 0.5 means no better than chance.

    Raises:
        ValueError: the targets are all of one class (the AUC is undefined).
    """
    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(targets) > 0.5
    n_pos = int(positive.sum())
    n_neg = positive.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("roc_auc needs both positive and negative targets")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # Average 1-based rank of each run of equal scores.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], sorted_scores.shape[0]]
    run_ranks = (starts + 1 + ends) / 2.0
    ranks = np.empty_like(scores)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
