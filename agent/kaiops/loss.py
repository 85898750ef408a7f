"""KAIOPS' Dynamic Class-Weighted loss (§III, eqs. 1-6): label-smoothed cross-entropy, each sample weighted by
its true class's weight; weights follow per-class accuracy: W = 1/(acc + ε), w = C·softmax(W/T).

Three choices the paper leaves open: accuracy is measured on a validation split after each epoch (not on the
training batches, which the model fits) and smoothed across epochs (EMA, momentum 0.5: with a few dozen rare-class
validation samples the raw accuracy swings from epoch to epoch), and weights are clamped to [W_MIN, W_MAX] so
that a class at zero accuracy does not take all the weight (shared/research/anomaly_data.md §4, after CDB loss)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

W_MIN, W_MAX = 0.25, 4.0


def class_weights(accuracy: np.ndarray, temperature: float = 3.0, eps: float = 0.1) -> np.ndarray:
    base = 1.0 / (np.asarray(accuracy, dtype=np.float64) + eps)
    z = base / temperature
    soft = np.exp(z - z.max())
    soft /= soft.sum()
    return np.clip(len(base) * soft, W_MIN, W_MAX)


def per_class_accuracy(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int, eps: float = 1e-6) -> np.ndarray:
    correct = np.bincount(y_true[y_true == y_pred], minlength=n_classes)
    total = np.bincount(y_true, minlength=n_classes)
    return correct / (total + eps)


class DynamicClassWeightedLoss(nn.Module):
    def __init__(self, n_classes: int, smoothing: float = 0.1, temperature: float = 3.0, eps: float = 0.1,
                 momentum: float = 0.5):
        super().__init__()
        self.smoothing, self.temperature, self.eps, self.momentum = smoothing, temperature, eps, momentum
        self.register_buffer("weights", torch.ones(n_classes))
        self.accuracy: np.ndarray | None = None

    def update(self, accuracy: np.ndarray) -> np.ndarray:
        """New per-class accuracy (one epoch's validation) -> new weights, returned."""
        acc = np.asarray(accuracy, dtype=np.float64)
        self.accuracy = acc if self.accuracy is None else self.momentum * self.accuracy + (1 - self.momentum) * acc
        w = class_weights(self.accuracy, self.temperature, self.eps)
        self.weights = torch.as_tensor(w, dtype=torch.float32)
        return w

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        n = logits.shape[1]
        soft = torch.full_like(logits, self.smoothing / n)
        soft.scatter_(1, target.unsqueeze(1), 1.0 - self.smoothing + self.smoothing / n)
        per_sample = -(soft * torch.log_softmax(logits, dim=1)).sum(dim=1)
        return (per_sample * self.weights[target]).mean()
