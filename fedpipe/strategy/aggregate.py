"""Aggregation math as pure, typed NumPy functions that every strategy calls.

In the manner of Flower's ``flwr/server/strategy/aggregate.py``: no strategy
objects, no I/O, only weight lists in and weight lists (or scores) out.

Conventions
-----------
* A weight list (:data:`Weights`) is one array per layer; every list passed
  together must have the same number of layers and the same shapes.
* Arithmetic is done in float64, in the order the updates are given (strategies
  pass them sorted by client id), so results are bitwise reproducible.
* Functions that return weights document whether the result is float64 or cast
  back to the dtype of each layer (:func:`cast_like`).
* Means are taken around the first operand, ``x_0 + sum_i c_i (x_i - x_0)``:
  the same value as ``sum_i c_i x_i`` on paper, but identical inputs give back
  exactly that input, bit for bit, whatever the coefficients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.core.errors import FedpipeError

Weights = list[np.ndarray]


class AggregationError(FedpipeError, ValueError):
    """Raised when client updates cannot be aggregated (names the client)."""


# ---------------------------------------------------------------- checks


def normalized(weights: Sequence[float]) -> np.ndarray:
    """Aggregation coefficients that sum to 1 (float64).

    Parameters
    ----------
    weights : sequence of float
        Non-negative, finite, with a positive sum (e.g. sample counts).

    Returns
    -------
    ndarray
        ``c_i = w_i / sum_j w_j`` in float64.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise AggregationError("need at least one client to aggregate")
    if np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
        raise AggregationError(
            f"aggregation weights must be finite, >= 0, sum > 0: {w}"
        )
    return w / w.sum()


def first_non_finite(update: Weights) -> int | None:
    """Index of the first layer holding NaN or inf, or None."""
    for i, layer in enumerate(update):
        if not np.all(np.isfinite(layer)):
            return i
    return None


def check_same_layout(updates: Sequence[Weights]) -> None:
    """Raise :class:`AggregationError` unless all weight lists have equal layouts.

    Same number of layers, and layer ``k`` has the same shape in every list.
    """
    if not updates:
        raise AggregationError("need at least one client to aggregate")
    first = updates[0]
    for client_weights in updates:
        if len(client_weights) != len(first):
            raise AggregationError(
                f"updates have {len(client_weights)} and {len(first)} layers; "
                "all clients must train the same model"
            )
        for layer, (got, ref) in enumerate(zip(client_weights, first, strict=True)):
            if np.shape(got) != np.shape(ref):
                raise AggregationError(
                    f"layer {layer}: shape {np.shape(got)} differs from {np.shape(ref)}"
                )


def cast_like(
    weights: Sequence[np.ndarray], reference: Sequence[np.ndarray]
) -> Weights:
    """Cast each layer to the dtype of the matching ``reference`` layer (copies)."""
    return [
        np.asarray(w).astype(np.asarray(r).dtype)
        for w, r in zip(weights, reference, strict=True)
    ]


def _as64(layer: np.ndarray) -> np.ndarray:
    return np.asarray(layer, dtype=np.float64)


def _stack(updates: Sequence[Weights], layer: int) -> np.ndarray:
    """Layer ``layer`` of every update, stacked on a new axis 0 (float64)."""
    return np.stack([_as64(u[layer]) for u in updates])


# ---------------------------------------------------------------- means


def weighted_average(
    updates: Sequence[Weights], weights: Sequence[float], *, cast: bool = True
) -> Weights:
    """Layer-wise weighted mean of client weight lists (FedAvg's aggregate).

    .. math:: \\bar w = \\sum_i c_i w_i, \\qquad c_i = n_i / \\sum_j n_j

    computed as ``w_b + sum_{i != b} c_i (w_i - w_b)`` in float64, in the given
    order, where ``b`` is the first client with ``c_b > 0``: identical updates
    come back bit for bit, and a zero-weight client adds exactly nothing.

    Parameters
    ----------
    updates : sequence of Weights
        One weight list per client, all with the same layout.
    weights : sequence of float
        One coefficient per client (normalized here; e.g. sample counts).
    cast : bool, default True
        Cast each layer back to the dtype of the first update's layer; with
        False the result stays float64 (for server optimizers).
    """
    coef = normalized(weights)
    if len(updates) != coef.size:
        raise AggregationError(f"{len(updates)} updates but {coef.size} weights")
    check_same_layout(updates)
    b = int(np.flatnonzero(coef > 0)[0])
    out: Weights = []
    for layer in range(len(updates[0])):
        base = _as64(updates[b][layer])
        acc = base.copy()
        for i, (client_weights, c) in enumerate(zip(updates, coef, strict=True)):
            if i != b:
                acc += c * (_as64(client_weights[layer]) - base)
        out.append(acc)
    return cast_like(out, updates[0]) if cast else out


def mean(updates: Sequence[Weights]) -> Weights:
    """Unweighted layer-wise mean in float64 (``1/|S| sum_i w_i``)."""
    return weighted_average(updates, [1.0] * len(updates), cast=False)


def pseudo_gradient(global_weights: Weights, aggregated: Weights) -> Weights:
    """The server's pseudo-gradient ``g = w_t - w_agg`` (float64).

    The direction plain SGD on the server would step against: FedAvg is
    ``w_{t+1} = w_t - 1.0 * g``. Reddi et al.'s :math:`\\Delta_t` is ``-g``.
    """
    check_same_layout([global_weights, aggregated])
    return [
        _as64(w) - _as64(a) for w, a in zip(global_weights, aggregated, strict=True)
    ]


def differences(updates: Sequence[Weights], reference: Weights) -> list[Weights]:
    """Each update minus ``reference``, layer-wise, in float64 (``y_i - w``)."""
    check_same_layout([reference, *updates])
    ref = [_as64(r) for r in reference]
    return [
        [_as64(u) - r for u, r in zip(update, ref, strict=True)] for update in updates
    ]


# ---------------------------------------------------------------- robust


def coordinate_median(updates: Sequence[Weights]) -> Weights:
    """Coordinate-wise median over clients (unweighted), cast back per layer.

    For an even number of clients each coordinate is the mean of the two middle
    values (as :func:`numpy.median`). The median does not depend on the order of
    the updates.
    """
    check_same_layout(updates)
    out = [np.median(_stack(updates, k), axis=0) for k in range(len(updates[0]))]
    return cast_like(out, updates[0])


def trimmed_mean(updates: Sequence[Weights], beta: float) -> Weights:
    """Coordinate-wise trimmed mean, cast back per layer.

    Per coordinate, sort the ``n`` client values, drop the ``k = floor(beta * n)``
    smallest and ``k`` largest, and average the remaining ``n - 2k`` (as
    :func:`scipy.stats.trim_mean` and Flower's ``aggregate_trimmed_avg``).

    Parameters
    ----------
    updates : sequence of Weights
        One weight list per client.
    beta : float
        Share cut from each end, ``0 <= beta < 0.5``; 0 is the plain mean.
    """
    if not 0.0 <= beta < 0.5:
        raise AggregationError(f"trimmed_mean: beta must be in [0, 0.5); got {beta}")
    check_same_layout(updates)
    n = len(updates)
    cut = int(beta * n)
    out = []
    for k in range(len(updates[0])):
        kept = np.sort(_stack(updates, k), axis=0)[cut : n - cut]
        out.append(kept[0] + (kept - kept[0]).sum(axis=0) / kept.shape[0])
    return cast_like(out, updates[0])


def pairwise_squared_distances(updates: Sequence[Weights]) -> np.ndarray:
    """Matrix ``D[i, j] = ||w_i - w_j||^2`` over all layers (float64).

    Computed from differences (not ``|x|^2 + |y|^2 - 2 x.y``), so the diagonal and
    identical updates give exact zeros and ``D`` is exactly symmetric.
    """
    check_same_layout(updates)
    flat = np.stack([np.concatenate([_as64(w).ravel() for w in u]) for u in updates])
    n = flat.shape[0]
    dist = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            diff = flat[i] - flat[j]
            dist[i, j] = dist[j, i] = float(np.dot(diff, diff))
    return dist


def krum_scores(updates: Sequence[Weights], n_byzantine: int) -> np.ndarray:
    """Krum score of each update (Blanchard et al., 2017).

    .. math:: s(i) = \\sum_{j \\in N_i} \\lVert w_i - w_j \\rVert^2

    where :math:`N_i` holds the ``n - f - 2`` updates closest to ``w_i`` (itself
    excluded), ``f = n_byzantine``. Requires ``n > 2f + 2``.

    Returns
    -------
    ndarray
        Shape ``(n,)``, float64; lower is more central.
    """
    n = len(updates)
    if n_byzantine < 0 or n <= 2 * n_byzantine + 2:
        raise AggregationError(
            f"krum needs more than 2f + 2 = {2 * n_byzantine + 2} updates for "
            f"f = {n_byzantine} byzantine clients; got {n}"
        )
    dist = pairwise_squared_distances(updates)
    closest = n - n_byzantine - 2
    scores = np.empty(n, dtype=np.float64)
    for i in range(n):
        others = np.sort(np.delete(dist[i], i))
        scores[i] = others[:closest].sum()
    return scores


def lowest(scores: np.ndarray, count: int) -> list[int]:
    """Indices of the ``count`` lowest scores; ties go to the lower index."""
    if not 1 <= count <= len(scores):
        raise AggregationError(f"cannot select {count} of {len(scores)} updates")
    return [int(i) for i in np.argsort(scores, kind="stable")[:count]]
