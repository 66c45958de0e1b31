"""Classification metrics from predicted probabilities, in pure NumPy.

The same five numbers the seed question reports: loss, accuracy, precision, recall
and ROC AUC. Multi-class precision, recall and AUC are macro averages (AUC one
class against the rest, over classes that have both positives and negatives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import rankdata

METRIC_NAMES = ("loss", "accuracy", "precision", "recall", "auc")


def binary_auc(positive: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula; NaN if one class is absent."""
    positive = positive.astype(bool)
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def classification_metrics(
    y_true: np.ndarray, probs: np.ndarray, losses: np.ndarray
) -> dict[str, float]:
    """Loss, accuracy, precision, recall and AUC of one model on one data set.

    Parameters
    ----------
    y_true : (n,) int array of class indices.
    probs : (n, 1) sigmoid outputs for a binary model, or (n, C) softmax outputs.
    losses : (n,) per-sample losses as the model's loss computed them.
    """
    y_true = np.asarray(y_true).astype(np.int64).ravel()
    if y_true.size == 0:
        return {name: float("nan") for name in METRIC_NAMES}
    loss = float(np.mean(losses, dtype=np.float64))
    if probs.ndim == 1 or probs.shape[1] == 1:
        score = probs.reshape(-1)
        pred = (score >= 0.5).astype(np.int64)
        tp = int(np.sum((pred == 1) & (y_true == 1)))
        precision = tp / max(int(np.sum(pred == 1)), 1)
        recall = tp / max(int(np.sum(y_true == 1)), 1)
        auc = binary_auc(y_true == 1, score)
    else:
        pred = np.argmax(probs, axis=1)
        present = np.unique(y_true)
        precisions, recalls, aucs = [], [], []
        for c in present:
            tp = int(np.sum((pred == c) & (y_true == c)))
            precisions.append(tp / max(int(np.sum(pred == c)), 1))
            recalls.append(tp / int(np.sum(y_true == c)))
            aucs.append(binary_auc(y_true == c, probs[:, c]))
        precision = float(np.mean(precisions))
        recall = float(np.mean(recalls))
        finite = [a for a in aucs if not np.isnan(a)]
        auc = float(np.mean(finite)) if finite else float("nan")
    accuracy = float(np.mean(pred == y_true))
    return {
        "loss": loss,
        "accuracy": accuracy,
        "precision": float(precision),
        "recall": float(recall),
        "auc": float(auc),
    }


def weighted_mean(
    rows: Sequence[Mapping[str, float]], weights: Sequence[float]
) -> dict[str, float]:
    """Per-metric mean weighted by ``weights``, skipping NaN entries."""
    out: dict[str, float] = {}
    w = np.asarray(weights, dtype=np.float64)
    for name in METRIC_NAMES:
        values = np.array([row[name] for row in rows], dtype=np.float64)
        ok = ~np.isnan(values) & (w > 0)
        out[name] = (
            float(np.sum(values[ok] * w[ok]) / np.sum(w[ok]))
            if ok.any()
            else float("nan")
        )
    return out
