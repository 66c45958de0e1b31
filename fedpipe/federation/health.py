"""A round's health record: how the clients' updates relate, layer by layer.

Pure NumPy. :func:`round_health` turns what a round already has in memory (the
global weights before and after aggregation, each selected client's trained
weights, the new global model's held-out predictions) into the JSON record
``metrics/health/round-K.json`` that :mod:`fedpipe.observe.doctor` reads. The
quantities:

* per client: the update ``Δ_k = w_k - w_before`` (trainable weights), its norm,
  its cosine to the mean update, and the weight the server effectively gave it;
* per layer: the divergence ``D_l = 1 - ||mean_k Δ_k,l||² / mean_k ||Δ_k,l||²``
  (0: all clients moved the layer alike; ``1 - 1/K`` for K independent random
  updates; 1 when they cancel out), the norms before and after, and for
  normalization layers the same divergence over their moving statistics;
* the aggregation actually applied: a least-squares fit of
  ``w_after - w_before ≈ Σ_k a_k Δ_k + g · w_before`` (``a_k`` the effective
  weights, ``g`` the share by which the server rescaled the old global weights);
* the global model's calibration on the held-out set: mean confidence, expected
  calibration error, and how much of the loss a few samples carry;
* the server's own step (in ``aggregation``): ``server_step_ratio =
  ||w_after - w_before|| / ||Σ_k p_k Δ_k||`` with ``p_k = n_k / Σ n`` over the
  aggregated clients (1 for FedAvg up to float error; above 1 when a server
  learning rate, momentum or adaptivity amplifies the clients' mean update),
  with both norms (``server_step_norm``, ``mean_update_norm``);
* what the new global model predicts on the held-out set (in ``global``): the
  most-predicted class and its share (1.0: one class for every sample), and the
  share of the most common label (what always predicting it scores);
* dead units (when the round passes ``dead_units``): per ReLU layer the share of
  units whose output is 0 for every sample of a small fixed probe batch
  (:mod:`fedpipe.model.probe`).

Floats are rounded to 6 significant digits; NaN and infinities are written as
null (the ``nonfinite`` counts say when values were not finite).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Weights = Sequence[np.ndarray]

ECE_BINS = 15  # equal-width confidence bins (Guo et al., 2017)
TOP_LOSS_SHARE = 0.01  # "the worst 1% samples" of loss_top_share
LAYER_KINDS = ("dense", "conv", "norm", "other")


# ---------------------------------------------------------------- small measures


def divergence(deltas: np.ndarray) -> float:
    """``1 - ||mean_k Δ_k||² / mean_k ||Δ_k||²`` over the rows of ``deltas``.

    Parameters
    ----------
    deltas : (K, P) array
        One client's update per row.

    Returns
    -------
    float
        In [0, 1]: the share of the updates' energy that is disagreement (their
        variance around the mean update). 0 for identical updates and for K = 1;
        about ``1 - 1/K`` for K independent random ones. NaN if every update is
        zero, or the input is not finite.
    """
    d = np.asarray(deltas, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] == 0:
        return float("nan")
    return _divergence(_gram(d))


def _gram(rows: np.ndarray) -> np.ndarray:
    """``rows @ rows.T`` in float64: every quantity here is a function of it."""
    r = np.asarray(rows, dtype=np.float64)
    return r @ r.T


def _divergence(gram: np.ndarray) -> float:
    """:func:`divergence` from the K x K Gram matrix of the updates."""
    k = gram.shape[0]
    energy = float(np.trace(gram)) / k if k else float("nan")
    if not math.isfinite(energy) or energy <= 0.0:
        return float("nan")
    share = float(gram.sum()) / k**2 / energy
    return float(min(max(1.0 - share, 0.0), 1.0))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flat vectors; NaN if either is zero or not finite."""
    a64 = np.asarray(a, dtype=np.float64).ravel()
    b64 = np.asarray(b, dtype=np.float64).ravel()
    na = math.sqrt(float(np.einsum("i,i->", a64, a64)))
    nb = math.sqrt(float(np.einsum("i,i->", b64, b64)))
    if not (math.isfinite(na) and math.isfinite(nb)) or na == 0.0 or nb == 0.0:
        return float("nan")
    return float(np.clip(np.einsum("i,i->", a64, b64) / (na * nb), -1.0, 1.0))


@dataclass(frozen=True)
class AggregationFit:
    """What :func:`effective_weights` found.

    Attributes
    ----------
    weights : (K,) array
        Effective weight ``a_k`` of each update (NaN for a zero update).
    weight_sum : float
        ``Σ a_k``; NaN when the updates do not determine it (they are linearly
        dependent in a way that lets weight move between them and change the
        sum, e.g. more clients than varying parameters).
    global_coefficient : float
        ``g``, the coefficient of ``w_before`` (0 without ``before``).
    residual : float
        ``||step - fit|| / ||step||``; NaN when the step is zero.
    rank : int
        Numerical rank of ``[Δ_1 .. Δ_K, w_before]``.
    """

    weights: np.ndarray
    weight_sum: float
    global_coefficient: float
    residual: float
    rank: int


#: eigenvalues of the scaled Gram matrix below this share of the largest are
#: treated as zero: singular values below 1e-6 of the largest, far under any
#: real difference between client updates, far above float64 rounding of the
#: squared values (the Gram squares the condition number)
RANK_TOLERANCE = 1e-12


def effective_weights(
    deltas: np.ndarray, step: np.ndarray, before: np.ndarray | None = None
) -> AggregationFit:
    """The aggregation the server applied, by least squares.

    Fits ``step ≈ Σ_k a_k Δ_k + g · before`` in float64 through the small
    (K+1) x (K+1) normal equations: columns are scaled to unit norm first (a small
    update next to the large weight vector is not lost), and the system is solved
    by a pseudo-inverse from its eigen-decomposition, so collinear updates (two
    identical clients) get the minimum-norm split of their common weight, which
    keeps the sum right; K = 1 works the same way. The residual is computed from
    the vectors themselves, not the normal equations.

    Parameters
    ----------
    deltas : (K, P) array
        Client updates ``w_k - w_before``.
    step : (P,) array
        ``w_after - w_before``.
    before : (P,) array or None
        ``w_before``; None fits the updates alone.

    Returns
    -------
    AggregationFit
        ``g`` is 0 when the server added a combination of updates to the old
        weights (FedAvg, server learning rates) and ``Σa - 1`` when it computed
        ``Σ_k a_k w_k`` with weights that do not sum to 1. The residual is about 0
        (float32 rounding) for any linear aggregation and large for server
        optimizers (FedAdam) and coordinate-wise rules (median).
    """
    d = np.asarray(deltas, dtype=np.float64)
    rows = [d] if before is None else [d, np.asarray(before, np.float64)[None, :]]
    x = np.concatenate(rows + [np.asarray(step, np.float64).reshape(1, -1)])
    return _fit(_gram(x), x, n_updates=d.shape[0], with_before=before is not None)


def _fit(
    gram: np.ndarray, rows: np.ndarray, *, n_updates: int, with_before: bool
) -> AggregationFit:
    """:func:`effective_weights` from the Gram matrix of ``[Δ.., (w_before), step]``
    (``rows`` are those vectors, for the residual)."""
    n = gram.shape[0] - 1  # regressors; the last row is the step
    h, b = gram[:n, :n], gram[:n, n]
    scale = np.sqrt(np.clip(np.diag(h), 0.0, None))
    used = np.flatnonzero(scale > 0)
    coef = np.full(n, np.nan)
    weight_sum, rank = float("nan"), 0
    fit = np.zeros(rows.shape[1])
    if used.size:
        s = scale[used]
        values, vectors = np.linalg.eigh(h[np.ix_(used, used)] / np.outer(s, s))
        keep = values > values.max() * RANK_TOLERANCE
        rank = int(keep.sum())
        inverse = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T
        z = inverse @ (b[used] / s)
        coef[used] = z / s
        fit = coef[used] @ rows[used]
        # the sum is determined iff the summing vector is orthogonal to the null
        # space (in the scaled coordinates)
        summing = np.where(used < n_updates, 1.0 / s, 0.0)
        null = vectors[:, ~keep]
        loose = float(np.linalg.norm(null.T @ summing)) if null.size else 0.0
        if loose <= 1e-6 * float(np.linalg.norm(summing)) and (used < n_updates).any():
            weight_sum = float(np.sum(coef[used[used < n_updates]]))
        if with_before and n_updates in used and null.size:
            if np.abs(null[used == n_updates]).max() > 1e-6:
                coef[n_updates] = np.nan  # w_before's share is not determined
    step = rows[n]
    norm_step = math.sqrt(float(np.einsum("i,i->", step, step)))
    left = step - fit
    residual = (
        math.sqrt(float(np.einsum("i,i->", left, left))) / norm_step
        if norm_step > 0
        else float("nan")
    )
    g = float(coef[n_updates]) if with_before else 0.0
    return AggregationFit(
        weights=coef[:n_updates],
        weight_sum=weight_sum,
        global_coefficient=g,
        residual=residual,
        rank=rank,
    )


def confidence(probs: np.ndarray) -> np.ndarray:
    """The probability of the predicted class per sample (sigmoid: max(p, 1-p))."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim == 1 or p.shape[1] == 1:
        s = p.reshape(-1)
        return np.maximum(s, 1.0 - s)
    return p.max(axis=1)


def predictions(probs: np.ndarray) -> np.ndarray:
    """Predicted class per sample (sigmoid: p >= 0.5 is class 1)."""
    p = np.asarray(probs)
    if p.ndim == 1 or p.shape[1] == 1:
        return (p.reshape(-1) >= 0.5).astype(np.int64)
    return np.argmax(p, axis=1)


def expected_calibration_error(
    probs: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS
) -> float:
    """ECE: ``Σ_b (n_b / n) |accuracy_b - confidence_b|`` over equal-width bins.

    Bin ``b`` holds the confidences in ``(b/bins, (b+1)/bins]`` (a confidence of
    exactly 0 goes to the first bin). NaN for an empty set.
    """
    conf = confidence(probs)
    if conf.size == 0:
        return float("nan")
    correct = predictions(probs) == np.asarray(labels).reshape(-1)
    which = np.clip(np.ceil(conf * bins).astype(np.int64) - 1, 0, bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            gap = abs(float(correct[inside].mean()) - float(conf[inside].mean()))
            total += inside.sum() / conf.size * gap
    return float(total)


def loss_top_share(losses: np.ndarray, share: float = TOP_LOSS_SHARE) -> float:
    """Share of the total loss carried by the worst ``share`` of samples.

    The worst ``ceil(share * n)`` samples (at least one). 0.01 for uniform losses
    at the default; near 1 when a few confidently wrong samples carry the loss.
    NaN if the losses are not finite or their total is not positive.
    """
    loss = np.asarray(losses, dtype=np.float64).ravel()
    total = float(loss.sum())
    if loss.size == 0 or not math.isfinite(total) or total <= 0:
        return float("nan")
    top = max(1, math.ceil(share * loss.size))
    return float(np.sort(loss)[-top:].sum() / total)


def nonfinite(weights: Weights) -> int:
    """Number of NaN or infinite values in a weight list."""
    return int(sum(np.size(w) - np.count_nonzero(np.isfinite(w)) for w in weights))


# ---------------------------------------------------------------- the record


@dataclass(frozen=True)
class RoundUpdates:
    """What the round's clients sent back and what the server made of it.

    Attributes
    ----------
    before, after : list of ndarray
        Global weights before and after aggregation, in ``model.get_weights()``
        order. ``after`` may be None when aggregation refused the updates (e.g.
        non-finite client weights): the client and layer parts are still filled.
    clients : mapping of int to list of ndarray
        Each selected client's weights after local training.
    n_train : mapping of int to int
        Each selected client's number of training samples.
    train_loss : mapping of int to float, optional
        Each client's mean local training loss (``ModelRunner.last_train_loss``).
    excluded : mapping of int to str, optional
        Clients left out of aggregation and why (:mod:`fedpipe.federation.failures`).
        Those whose update came back (non-finite ones) are in ``clients`` too.
    """

    before: Weights
    after: Weights | None
    clients: Mapping[int, Weights]
    n_train: Mapping[int, int]
    train_loss: Mapping[int, float] | None = None
    excluded: Mapping[int, str] | None = None


@dataclass(frozen=True)
class ModelLayers:
    """Where the model's layers sit in its weight list.

    Attributes
    ----------
    layers : sequence of tuples
        Per weight-bearing layer ``(name, indices)`` as
        :func:`fedpipe.model.zoo.layer_groups` returns, or ``(name, indices, kind)``
        or :func:`fedpipe.model.zoo.layer_info` rows ``(name, indices, kind, ...)``.
    trainable : sequence of int
        Positions of the trainable variables in the weight list
        (``ModelRunner.trainable_indices()``); the rest (moving statistics) are
        compared separately.
    kinds : sequence of str, optional
        ``dense | conv | norm | other`` per layer, when ``layers`` has no kinds.
    """

    layers: Sequence[tuple[Any, ...]]
    trainable: Sequence[int]
    kinds: Sequence[str] | None = None


@dataclass(frozen=True)
class HeldOut:
    """The new global model on the held-out test set (``ModelRunner.predict``):
    probabilities (``(n, 1)`` sigmoid or ``(n, C)`` softmax), labels and
    per-sample losses; any may be None."""

    probs: np.ndarray | None = None
    labels: np.ndarray | None = None
    losses: np.ndarray | None = None


def round_health(
    round_: int,
    updates: RoundUpdates,
    model: ModelLayers,
    held_out: HeldOut | None = None,
    *,
    record: Any = None,
    dead_units: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """The health record of one round (the contract of ``metrics/health``).

    Parameters
    ----------
    round_ : int
        The round number K.
    updates : RoundUpdates
        The weights before and after, the clients' weights and sample counts.
    model : ModelLayers
        The model's layers and trainable positions.
    held_out : HeldOut, optional
        The new global model's predictions on the held-out set.
    record : RoundRecord or dict, optional
        The round's :class:`fedpipe.federation.records.RoundRecord` or its
        ``summary()``: global loss/accuracy and the gap between the global model on
        client tests and the local models.
    dead_units : mapping of str to float, optional
        Share of dead units per ReLU layer of the new global model
        (:func:`fedpipe.model.probe.dead_unit_shares`); written as ``dead_units``.

    Returns
    -------
    dict
        JSON-ready (rounded, NaN as None), keys ``round``, ``clients``, ``layers``,
        ``aggregation``, ``global``, ``gap``, ``seconds`` (and ``excluded`` when
        clients were left out, ``dead_units`` when given).
    """
    started = time.perf_counter()
    stack = _vectors(updates, model)
    aggregation, effective = aggregation_part(stack, updates)
    out = {
        "round": int(round_),
        "clients": client_rows(stack, updates, effective),
        "layers": layer_rows(stack, updates),
        "aggregation": aggregation,
        "global": global_part(stack, updates.after, held_out or HeldOut(), record),
        "gap": _gap(record),
    }
    if updates.excluded:
        excluded = updates.excluded
        out["excluded"] = {str(c): excluded[c] for c in sorted(excluded)}
    if dead_units is not None:
        out["dead_units"] = {str(k): v for k, v in dead_units.items()}
    out = _clean(out)
    out["seconds"] = _clean(time.perf_counter() - started)
    return out


@dataclass(frozen=True)
class RoundVectors:
    """The vectors every number of the record is made of, and their Gram matrices.

    ``vectors`` has one row per finite client's update, then ``w_before`` and (if
    ``after`` is usable) the step and ``w_after``; ``grams`` are their Gram
    matrices per layer of ``table``, ``total`` their sum.
    """

    ids: list[int]  # every selected client, sorted
    finite: np.ndarray  # per id: its update (and w_before) is finite
    usable_after: bool  # w_after is given and finite
    vectors: np.ndarray
    slices: dict[int, slice]  # where each trainable array sits in a row
    table: list[tuple[str, str, list[int], list[int], list[int]]]
    grams: list[np.ndarray]
    total: np.ndarray

    @property
    def kf(self) -> int:
        """Number of finite clients (the first ``kf`` rows)."""
        return int(self.finite.sum())

    @property
    def finite_ids(self) -> list[int]:
        return [c for c, f in zip(self.ids, self.finite, strict=True) if f]


def _vectors(updates: RoundUpdates, model: ModelLayers) -> RoundVectors:
    before, after, clients = updates.before, updates.after, updates.clients
    ids = sorted(int(c) for c in clients)
    train = sorted(int(j) for j in model.trainable)
    table = _layer_table(model.layers, model.kinds, set(train))
    before_ok = nonfinite([before[j] for j in train]) == 0
    finite = np.array(
        [before_ok and not nonfinite([clients[c][j] for j in train]) for c in ids],
        dtype=bool,
    )
    usable_after = after is not None and nonfinite([after[j] for j in train]) == 0
    # written in place: a model of P weights and K clients holds (K + 3) P
    # float64 at a time
    vectors = _stacked(
        before,
        after if usable_after else None,
        train,
        [clients[c] for c, ok in zip(ids, finite, strict=True) if ok],
    )
    slices = _slices(before, train)
    grams = [_layer_gram(vectors, [slices[j] for j in own]) for *_, own, _ in table]
    total = sum(grams, np.zeros((len(vectors), len(vectors))))
    return RoundVectors(ids, finite, usable_after, vectors, slices, table, grams, total)


def aggregation_part(
    stack: RoundVectors, updates: RoundUpdates
) -> tuple[dict[str, Any], np.ndarray]:
    """The aggregation the server applied: the least-squares fit of its step on
    the updates (:func:`effective_weights`), the sample shares it was meant to
    use, and its step against the mean update (:func:`server_step`).

    Returns the ``aggregation`` part and the effective weight of each finite
    client (NaN when not fitted)."""
    kf = stack.kf
    out: dict[str, Any] = {
        "weight_sum": None,
        "fit_residual": None,
        "global_coefficient": None,
        "rank": None,
        "n_fitted": kf,
    }
    effective = np.full(kf, np.nan)
    if stack.usable_after and kf:
        fitted = _fit(
            stack.total[: kf + 2, : kf + 2],
            stack.vectors[: kf + 2],
            n_updates=kf,
            with_before=True,
        )
        effective = fitted.weights
        out.update(
            weight_sum=fitted.weight_sum,
            fit_residual=fitted.residual,
            global_coefficient=fitted.global_coefficient,
            rank=fitted.rank,
        )
    n_train, out_ids = updates.n_train, {int(c) for c in updates.excluded or {}}
    total_n = float(sum(n_train[c] for c in stack.ids if c not in out_ids))
    out["nominal_weights"] = {
        str(c): (n_train[c] / total_n if total_n > 0 and c not in out_ids else None)
        for c in stack.ids
    }
    out.update(
        server_step(
            stack.total,
            [n_train[c] if c not in out_ids else 0 for c in stack.finite_ids],
            usable_after=stack.usable_after,
        )
    )
    return out, effective


def client_rows(
    stack: RoundVectors, updates: RoundUpdates, effective: np.ndarray
) -> list[dict[str, Any]]:
    """Per client: its update's norm and cosine to the mean update, its
    non-finite count, training loss and effective aggregation weight."""
    kf = stack.kf
    g = stack.total[:kf, :kf]
    norms = np.sqrt(np.clip(np.diag(g), 0.0, None))
    mean_norm = math.sqrt(max(float(g.sum()), 0.0)) / kf if kf else 0.0
    along_mean = g.sum(axis=1) / kf if kf else np.zeros(0)
    rows, position = [], 0
    for c, finite in zip(stack.ids, stack.finite, strict=True):
        row: dict[str, Any] = {
            "client": c,
            "n_train": int(updates.n_train[c]),
            "update_norm": None,
            "cosine_to_mean": None,
            "nonfinite": nonfinite(updates.clients[c]),
            "train_loss": (
                None if updates.train_loss is None else updates.train_loss.get(c)
            ),
            "aggregation_weight": None,
        }
        if finite:
            norm = norms[position]
            if norm > 0 and mean_norm > 0:
                row["cosine_to_mean"] = float(
                    np.clip(along_mean[position] / (norm * mean_norm), -1, 1)
                )
            row["update_norm"] = float(norm)
            row["aggregation_weight"] = float(effective[position])
            position += 1
        rows.append(row)
    return rows


def layer_rows(stack: RoundVectors, updates: RoundUpdates) -> list[dict[str, Any]]:
    """Per layer: the clients' divergence, their mean update norm, the weight
    norms before and after, and for normalization layers the divergence and
    spread of their moving statistics."""
    kf, slices = stack.kf, stack.slices
    rows = []
    for index, ((name, kind, _, own, stats), gram) in enumerate(
        zip(stack.table, stack.grams, strict=True)
    ):
        gk = gram[:kf, :kf]
        row = {
            "index": index,
            "name": name,
            "kind": kind,
            "n_params": int(sum(slices[j].stop - slices[j].start for j in own)),
            "divergence": _divergence(gk) if own and kf else None,
            "update_norm_mean": (
                float(np.mean(np.sqrt(np.clip(np.diag(gk), 0, None)))) if kf else None
            ),
            "weight_norm": (
                math.sqrt(max(float(gram[-1, -1]), 0.0)) if stack.usable_after else None
            ),
            "weight_norm_before": math.sqrt(max(float(gram[kf, kf]), 0.0)),
            "stats_divergence": None,
            "stats_spread": None,
        }
        if kind == "norm" and stats and stack.finite_ids:
            s0 = _flat(updates.before, stats)
            values = np.stack(
                [_flat(updates.clients[c], stats) for c in stack.finite_ids]
            )
            row["stats_divergence"] = _divergence(_gram(values - s0))
            row["stats_spread"] = _spread(values)
        rows.append(row)
    return rows


def server_step(
    gram: np.ndarray, n_train: Sequence[int], *, usable_after: bool
) -> dict[str, Any]:
    """The server's step against the sample-weighted mean client update.

    Parameters
    ----------
    gram : (K + 3, K + 3) array
        Gram matrix of ``[Δ_1 .. Δ_K, w_before, step, w_after]`` (the rows of
        ``_stacked``; only the first K + 2 are read).
    n_train : sequence of int
        ``n_k`` of the K finite clients, 0 for one left out of aggregation.
    usable_after : bool
        Whether the new global weights are finite (the step row exists).

    Returns
    -------
    dict
        ``server_step_norm`` (``||w_after - w_before||``), ``mean_update_norm``
        (``||Σ p_k Δ_k||``, ``p_k = n_k / Σ n``) and ``server_step_ratio`` (their
        quotient: 1 for FedAvg; None when either is unknown or the mean is 0).
    """
    out: dict[str, Any] = {
        "server_step_norm": None,
        "mean_update_norm": None,
        "server_step_ratio": None,
    }
    k = len(n_train)
    total = float(sum(n_train))
    if k and total > 0:
        p = np.asarray(n_train, dtype=np.float64) / total
        out["mean_update_norm"] = math.sqrt(max(float(p @ gram[:k, :k] @ p), 0.0))
    if usable_after:
        out["server_step_norm"] = math.sqrt(max(float(gram[k + 1, k + 1]), 0.0))
    if out["server_step_norm"] is not None and out["mean_update_norm"]:
        out["server_step_ratio"] = out["server_step_norm"] / out["mean_update_norm"]
    return out


def prediction_shares(
    probs: np.ndarray, labels: np.ndarray
) -> dict[str, float | int | None]:
    """The most-predicted class and its share, and the most common label's share.

    ``top_class_share`` is 1.0 when the model predicts one class for every sample;
    ``majority_share`` is the accuracy of always predicting the most common label.
    """
    predicted = predictions(probs)
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    if predicted.size == 0 or y.size == 0:
        return {"top_class": None, "top_class_share": None, "majority_share": None}
    counts = np.bincount(predicted)
    return {
        "top_class": int(np.argmax(counts)),
        "top_class_share": float(counts.max() / predicted.size),
        "majority_share": float(np.bincount(y - min(int(y.min()), 0)).max() / y.size),
    }


def _layer_table(
    layers: Sequence[tuple[Any, ...]],
    layer_kinds: Sequence[str] | None,
    trainable: set[int],
) -> list[tuple[str, str, list[int], list[int], list[int]]]:
    """(name, kind, indices, trainable indices, other indices) per layer."""
    out = []
    for position, layer in enumerate(layers):
        name, indices = str(layer[0]), [int(j) for j in layer[1]]
        if len(layer) > 2:
            kind = str(layer[2])
        elif layer_kinds is not None:
            kind = str(layer_kinds[position])
        else:
            kind = "other"
        own = [j for j in indices if j in trainable]
        out.append((name, kind, indices, own, [j for j in indices if j not in own]))
    return out


def _layer_gram(stacked: np.ndarray, parts: Sequence[slice]) -> np.ndarray:
    """Gram matrix of the rows of ``stacked`` restricted to one layer's columns."""
    n = stacked.shape[0]
    gram = np.zeros((n, n))
    for part in parts:
        block = stacked[:, part]
        gram += block @ block.T
    return gram


def _slices(weights: Weights, indices: Sequence[int]) -> dict[int, slice]:
    """Where each weight array sits in the flat vector of ``indices``."""
    out, start = {}, 0
    for j in indices:
        size = int(np.size(weights[j]))
        out[j] = slice(start, start + size)
        start += size
    return out


def _stacked(
    before: Weights,
    after: Weights | None,
    indices: Sequence[int],
    clients: Sequence[Weights],
) -> np.ndarray:
    """Rows ``[w_k - w_before .., w_before, (w_after - w_before, w_after)]`` over
    the weights at ``indices``, as one float64 array filled in place."""
    n_rows = len(clients) + 1 + (2 if after is not None else 0)
    out = np.empty((n_rows, sum(int(np.size(before[j])) for j in indices)))
    kf = len(clients)
    start = 0
    for j in indices:
        part = slice(start, start + int(np.size(before[j])))
        w0 = np.asarray(before[j], dtype=np.float64).ravel()
        for k, weights in enumerate(clients):
            np.subtract(np.asarray(weights[j]).ravel(), w0, out=out[k, part])
        out[kf, part] = w0
        if after is not None:
            out[kf + 2, part] = np.asarray(after[j], dtype=np.float64).ravel()
            np.subtract(out[kf + 2, part], w0, out=out[kf + 1, part])
        start = part.stop
    return out


def _flat(weights: Weights, indices: Sequence[int]) -> np.ndarray:
    """The arrays at ``indices`` as one float64 vector."""
    if not indices:
        return np.zeros(0)
    return np.concatenate(
        [np.asarray(weights[j], dtype=np.float64).ravel() for j in indices]
    )


def _spread(values: np.ndarray) -> float:
    """``sqrt(mean_k ||s_k - mean s||²) / ||mean s||``: how far apart the rows are,
    relative to their size (0: identical; NaN if the mean is zero)."""
    mean = values.mean(axis=0)
    size = math.sqrt(float(np.einsum("i,i->", mean, mean)))
    if size == 0.0:
        return float("nan")
    apart = values - mean
    return math.sqrt(float(np.einsum("kp,kp->", apart, apart)) / len(values)) / size


def global_part(
    stack: RoundVectors, after: Weights | None, held_out: HeldOut, record: Any
) -> dict[str, Any]:
    """The new global model: its weight norms and non-finite count, the
    clients' overall divergence, and its predictions on the held-out set
    (:func:`held_out_part`); loss and accuracy are the round record's when given,
    so the two files agree."""
    total, kf = stack.total, stack.kf
    out: dict[str, Any] = {
        "weight_norm": (
            math.sqrt(max(float(total[-1, -1]), 0.0)) if stack.usable_after else None
        ),
        "weight_norm_before": math.sqrt(max(float(total[kf, kf]), 0.0)),
        "nonfinite": None if after is None else nonfinite(after),
        "divergence": _divergence(total[:kf, :kf]) if kf else None,
        **held_out_part(held_out),
    }
    summary = _summary(record)
    if summary is not None:
        for key in ("loss", "accuracy"):
            out[key] = summary.get("global", {}).get(key, out[key])
    return out


def held_out_part(held_out: HeldOut) -> dict[str, Any]:
    """Calibration, loss concentration and prediction shares on the held-out set."""
    probs, labels, losses = held_out.probs, held_out.labels, held_out.losses
    out: dict[str, Any] = {
        "mean_confidence": None,
        "ece": None,
        "loss": None,
        "accuracy": None,
        "loss_top_share": None,
        "top_class": None,
        "top_class_share": None,
        "majority_share": None,
    }
    if probs is not None and labels is not None and len(labels):
        out.update(prediction_shares(probs, labels))
        out["mean_confidence"] = float(np.mean(confidence(probs)))
        out["ece"] = expected_calibration_error(probs, labels)
        out["accuracy"] = float(
            np.mean(predictions(probs) == np.asarray(labels).reshape(-1))
        )
    if losses is not None and np.size(losses):
        out["loss"] = float(np.mean(np.asarray(losses, dtype=np.float64)))
        out["loss_top_share"] = loss_top_share(losses)
    return out


def _summary(record: Any) -> Mapping[str, Any] | None:
    if record is None:
        return None
    if hasattr(record, "summary"):
        return record.summary()
    return record


def _gap(record: Any) -> dict[str, Any]:
    """Global model on client tests minus local models on their own tests."""
    summary = _summary(record)
    out: dict[str, Any] = {"loss": None, "accuracy": None}
    if summary is None:
        return out
    on_clients, local = summary.get("global_on_clients", {}), summary.get("local", {})
    for key in out:
        g, lo = on_clients.get(key), local.get(key)
        if g is not None and lo is not None:
            out[key] = float(g) - float(lo)
    return out


def json_ready(value: Any) -> Any:
    """``value`` as the health record writes it: floats rounded to 6
    significant digits, NaN/inf as None, numpy as Python, keys as strings."""
    return _clean(value)


def _clean(value: Any) -> Any:
    """Round floats to 6 significant digits, NaN/inf to None, numpy to Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        x = float(value)
        return float(f"{x:.6g}") if math.isfinite(x) else None
    return value
