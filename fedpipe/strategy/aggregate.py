"""Aggregation math as pure, typed NumPy functions that every strategy calls."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Weights = list[np.ndarray]


class AggregationError(ValueError):
    """Raised when client updates cannot be aggregated (names the client)."""


def normalized(weights: Sequence[float]) -> np.ndarray:
    """Aggregation coefficients that sum to 1 (float64)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise AggregationError("need at least one client to aggregate")
    if np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
        raise AggregationError(
            f"aggregation weights must be finite, >= 0, sum > 0: {w}"
        )
    return w / w.sum()


def weighted_average(updates: Sequence[Weights], weights: Sequence[float]) -> Weights:
    """Layer-wise weighted mean of client weight lists.

    Accumulates in float64 in the given client order and casts back to each
    layer's dtype, so the result is deterministic for a fixed order.
    """
    coef = normalized(weights)
    if len(updates) != coef.size:
        raise AggregationError(f"{len(updates)} updates but {coef.size} weights")
    first = updates[0]
    for client_weights in updates:
        if len(client_weights) != len(first):
            raise AggregationError(
                f"updates have {len(client_weights)} and {len(first)} layers; "
                "all clients must train the same model"
            )
    out: Weights = []
    for layer, ref in enumerate(first):
        acc = np.zeros(ref.shape, dtype=np.float64)
        for client_weights, c in zip(updates, coef, strict=True):
            if client_weights[layer].shape != ref.shape:
                raise AggregationError(
                    f"layer {layer}: shape {client_weights[layer].shape} "
                    f"differs from {ref.shape}"
                )
            acc += c * client_weights[layer].astype(np.float64)
        out.append(acc.astype(ref.dtype))
    return out


def first_non_finite(update: Weights) -> int | None:
    """Index of the first layer holding NaN or inf, or None."""
    for i, layer in enumerate(update):
        if not np.all(np.isfinite(layer)):
            return i
    return None
