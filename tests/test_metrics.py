"""Tests for fedpipe.model.metrics: AUC, classification metrics and weighted means."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpipe.model.metrics import (
    METRIC_NAMES,
    binary_auc,
    class_report,
    classification_metrics,
    weighted_mean,
)

# ---------------------------------------------------------------- helpers


def _multiclass() -> tuple[np.ndarray, np.ndarray]:
    """Six samples, three classes; predictions 0, 1, 1, 1, 2, 0.

    Per class (tp / predicted, tp / true):
    class 0: precision 1/2, recall 1/2;  class 1: 2/3, 2/2;  class 2: 1/1, 1/2.
    One-vs-rest AUC: class 0 7/8 (0.3 < 0.5), classes 1 and 2: 1.
    """
    y = np.array([0, 0, 1, 1, 2, 2])
    probs = np.array(
        [
            [0.80, 0.10, 0.10],
            [0.30, 0.60, 0.10],
            [0.20, 0.70, 0.10],
            [0.10, 0.65, 0.25],
            [0.10, 0.20, 0.70],
            [0.50, 0.20, 0.30],
        ]
    )
    return y, probs


def _row(value: float) -> dict[str, float]:
    return {name: value for name in METRIC_NAMES}


# ---------------------------------------------------------------- binary_auc


def test_auc_perfect_ranking_is_one() -> None:
    positive = np.array([0, 0, 1, 1])
    assert binary_auc(positive, np.array([0.1, 0.2, 0.8, 0.9])) == 1.0


def test_auc_inverted_ranking_is_zero() -> None:
    positive = np.array([1, 1, 0, 0])
    assert binary_auc(positive, np.array([0.1, 0.2, 0.8, 0.9])) == 0.0


def test_auc_all_ties_is_half() -> None:
    positive = np.array([1, 0, 1, 0, 0])
    assert binary_auc(positive, np.full(5, 0.3)) == 0.5


def test_auc_counts_a_tie_as_half_a_pair() -> None:
    # positive 0.5 vs negatives 0.5 (tie: 1/2) and 0.1 (win: 1) -> 1.5 / 2
    positive = np.array([True, False, False])
    assert binary_auc(positive, np.array([0.5, 0.5, 0.1])) == 0.75


def test_auc_by_hand() -> None:
    # positives 0.4, 0.7, 0.9 vs negatives 0.2, 0.6: 1 + 2 + 2 of 6 pairs
    positive = np.array([0, 0, 1, 1, 1])
    scores = np.array([0.2, 0.6, 0.4, 0.7, 0.9])
    assert binary_auc(positive, scores) == pytest.approx(5 / 6, abs=1e-12)


@pytest.mark.parametrize("positive", [[1, 1, 1], [0, 0, 0]])
def test_auc_with_one_class_absent_is_nan(positive: list[int]) -> None:
    assert math.isnan(binary_auc(np.array(positive), np.array([0.1, 0.5, 0.9])))


# ---------------------------------------------------------------- multi-class


def test_multiclass_accuracy() -> None:
    y, probs = _multiclass()
    metrics = classification_metrics(y, probs, np.zeros(6))
    assert metrics["accuracy"] == pytest.approx(4 / 6, abs=1e-12)


def test_multiclass_macro_precision() -> None:
    y, probs = _multiclass()
    metrics = classification_metrics(y, probs, np.zeros(6))
    assert metrics["precision"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3, abs=1e-12)


def test_multiclass_macro_recall() -> None:
    y, probs = _multiclass()
    metrics = classification_metrics(y, probs, np.zeros(6))
    assert metrics["recall"] == pytest.approx((1 / 2 + 1 + 1 / 2) / 3, abs=1e-12)


def test_multiclass_macro_auc() -> None:
    y, probs = _multiclass()
    metrics = classification_metrics(y, probs, np.zeros(6))
    assert metrics["auc"] == pytest.approx((7 / 8 + 1 + 1) / 3, abs=1e-12)


def test_loss_is_mean_of_per_sample_losses() -> None:
    y, probs = _multiclass()
    losses = np.array([0.5, 1.0, 1.5, 2.0, 0.25, 0.75], dtype=np.float32)
    metrics = classification_metrics(y, probs, losses)
    assert metrics["loss"] == pytest.approx(1.0, abs=1e-7)


def test_metrics_are_the_five_names_as_floats() -> None:
    y, probs = _multiclass()
    metrics = classification_metrics(y, probs, np.zeros(6))
    assert tuple(metrics) == METRIC_NAMES
    assert all(type(v) is float for v in metrics.values())


# ---------------------------------------------------------------- binary


def test_binary_column_probabilities() -> None:
    # predictions (>= 0.5): 0, 1, 0, 1, 1 against truth 0, 0, 1, 1, 1
    y = np.array([0, 0, 1, 1, 1])
    probs = np.array([[0.2], [0.6], [0.4], [0.7], [0.9]])
    metrics = classification_metrics(y, probs, np.full(5, 0.3))
    assert metrics["accuracy"] == pytest.approx(3 / 5, abs=1e-12)
    assert metrics["precision"] == pytest.approx(2 / 3, abs=1e-12)
    assert metrics["recall"] == pytest.approx(2 / 3, abs=1e-12)
    assert metrics["auc"] == pytest.approx(5 / 6, abs=1e-12)
    assert metrics["loss"] == pytest.approx(0.3, abs=1e-12)


def test_binary_threshold_is_inclusive() -> None:
    metrics = classification_metrics(
        np.array([1, 0]), np.array([[0.5], [0.49]]), np.zeros(2)
    )
    assert metrics["accuracy"] == 1.0


def test_binary_without_predicted_positives_has_zero_precision() -> None:
    metrics = classification_metrics(
        np.array([1, 0]), np.array([[0.1], [0.2]]), np.zeros(2)
    )
    assert metrics["precision"] == 0.0
    assert metrics["recall"] == 0.0


# ---------------------------------------------------------------- empty


def test_empty_input_gives_nans() -> None:
    metrics = classification_metrics(
        np.zeros(0, dtype=np.int64), np.zeros((0, 10)), np.zeros(0)
    )
    assert tuple(metrics) == METRIC_NAMES
    assert all(math.isnan(v) for v in metrics.values())


# ---------------------------------------------------------------- weighted_mean


def test_weighted_mean_weights_rows() -> None:
    # (1*1 + 3*3) / 4
    result = weighted_mean([_row(1.0), _row(3.0)], [1, 3])
    assert result == {name: 2.5 for name in METRIC_NAMES}


def test_weighted_mean_skips_nan_entries() -> None:
    rows = [_row(1.0), _row(3.0), _row(float("nan"))]
    rows[0]["auc"] = float("nan")
    result = weighted_mean(rows, [1, 3, 100])
    assert result["accuracy"] == 2.5
    assert result["auc"] == 3.0


def test_weighted_mean_ignores_zero_weights() -> None:
    result = weighted_mean([_row(1.0), _row(50.0)], [2, 0])
    assert result["loss"] == 1.0


def test_weighted_mean_all_nan_is_nan() -> None:
    result = weighted_mean([_row(float("nan")), _row(float("nan"))], [1, 1])
    assert all(math.isnan(v) for v in result.values())


@pytest.mark.parametrize("n", [0, 1, 2, 7, 40, 1000])
@pytest.mark.parametrize("kind", ["distinct", "ties", "float32", "nan"])
def test_average_ranks_are_scipys_to_the_bit(n: int, kind: str) -> None:
    from scipy.stats import rankdata

    from fedpipe.model.metrics import average_ranks

    x = np.random.default_rng(n).random(n)
    if kind == "ties":
        x = np.round(x * 5) / 5
    elif kind == "float32":
        x = x.astype(np.float32)
    elif kind == "nan" and n:
        x[n // 2] = np.nan
    expected, got = rankdata(x), average_ranks(x)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)  # NaN where NaN


# ---------------------------------------------------------------- rare classes


def _imbalanced(seed: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels with a rare class (about 6 %) and noisy probabilities for them."""
    rng = np.random.default_rng(seed)
    share = np.r_[0.06, np.full(n_classes - 1, 0.94 / (n_classes - 1))]
    y = rng.choice(n_classes, size=400, p=share)
    logits = rng.normal(size=(400, n_classes)) + 1.5 * np.eye(n_classes)[y]
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    if n_classes == 2:
        probs = probs[:, 1:]
    return y, probs


@pytest.mark.parametrize("n_classes", [2, 3, 5])
def test_balanced_accuracy_and_class_report_match_scikit_learn(n_classes: int) -> None:
    from sklearn.metrics import (
        balanced_accuracy_score,
        confusion_matrix,
        precision_score,
        recall_score,
    )

    y, probs = _imbalanced(n_classes, n_classes)
    pred = (probs[:, 0] >= 0.5).astype(int) if n_classes == 2 else probs.argmax(axis=1)
    metrics = classification_metrics(y, probs, np.zeros(len(y)))
    assert metrics["balanced_accuracy"] == pytest.approx(
        balanced_accuracy_score(y, pred)
    )
    report = class_report(y, probs, n_classes)
    labels = list(range(n_classes))
    expected = recall_score(y, pred, labels=labels, average=None)
    assert report["recall"] == pytest.approx(list(expected), abs=1e-6)
    expected = precision_score(y, pred, labels=labels, average=None, zero_division=0)
    assert report["precision"] == pytest.approx(list(expected), abs=1e-6)
    assert report["support"] == list(np.bincount(y, minlength=n_classes))
    assert report["confusion"] == confusion_matrix(y, pred, labels=labels).tolist()


def test_balanced_accuracy_of_always_the_majority_is_one_half() -> None:
    # 95 of 100 samples are class 0, and the model always says class 0:
    # accuracy 0.95 but balanced accuracy 0.5 and the rare class's recall 0
    y = np.r_[np.zeros(95, int), np.ones(5, int)]
    probs = np.full((100, 1), 0.1)
    metrics = classification_metrics(y, probs, np.zeros(100))
    assert metrics["accuracy"] == pytest.approx(0.95)
    assert metrics["balanced_accuracy"] == pytest.approx(0.5)
    report = class_report(y, probs, 2)
    assert report["recall"] == [1.0, 0.0]
    assert report["precision"] == [0.95, None]  # class 1 never predicted
    assert report["confusion"] == [[95, 0], [5, 0]]


def test_class_report_of_an_absent_class_has_no_recall() -> None:
    y = np.array([0, 0, 2, 2])
    probs = np.eye(3)[[0, 1, 2, 2]]
    report = class_report(y, probs, 3)
    assert report["recall"] == [0.5, None, 1.0]
    assert report["support"] == [2, 0, 2]


# ---------------------------------------------------------------- every class at once


@pytest.mark.parametrize("kind", ["distinct", "ties", "float32", "nan", "absent"])
@pytest.mark.parametrize("n", [1, 2, 9, 60])
def test_class_aucs_are_binary_aucs_to_the_bit(kind: str, n: int) -> None:
    from fedpipe.model.metrics import class_aucs, column_ranks

    rng = np.random.default_rng(n)
    probs = rng.random((n, 4))
    y = rng.integers(0, 4, n)
    if kind == "ties":
        probs = np.round(probs * 3) / 3
    elif kind == "float32":
        probs = probs.astype(np.float32)
    elif kind == "nan":
        probs[n // 2, 1] = np.nan
    elif kind == "absent":
        y[:] = 2  # one class only: every AUC NaN
    classes = np.flatnonzero(np.bincount(y, minlength=4))
    expected = [binary_auc(y == c, probs[:, c]) for c in classes]
    got = class_aucs(y, probs, classes)
    assert np.array(got).tobytes() == np.array(expected).tobytes()
    from fedpipe.model.metrics import average_ranks

    ranks = column_ranks(probs)
    for c in range(4):
        np.testing.assert_array_equal(ranks[:, c], average_ranks(probs[:, c]))
