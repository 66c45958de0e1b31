"""Rare classes (issue 37, item 4): the final table's per-class recall and
balanced accuracy, ``train.class_weight: balanced`` and the doctor's findings on
a model that answers the majority class or trained too little."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.config.params import Params
from fedpipe.data.sources import DatasetSpec
from fedpipe.federation.build import federated_class_counts, model_spec
from fedpipe.model.metrics import class_report
from fedpipe.model.training import (
    ModelRunner,
    ModelSpec,
    balanced_class_weights,
    initial_weights,
)
from fedpipe.observe.history import final_table


def _summary() -> dict:
    metrics = {
        "loss": 0.2,
        "accuracy": 0.93,
        "precision": 0.0,
        "recall": 0.0,
        "auc": 0.7,
        "balanced_accuracy": 0.5,
    }
    return {
        "round": 3,
        "clients_selected": [0, 1],
        "global": metrics,
        "global_on_clients": metrics,
        "global_on_clients_std": {k: 0.01 for k in metrics},
        "local": metrics,
        "local_std": {k: 0.01 for k in metrics},
        "global_classes": {
            "recall": [1.0, 0.0],
            "precision": [0.93, None],
            "support": [93, 7],
            "confusion": [[93, 0], [7, 0]],
        },
    }


def test_final_table_shows_balanced_accuracy_and_recall_per_named_class() -> None:
    table = final_table(_summary(), ["ham", "spam"])
    assert "| balanced accuracy | 0.5000 |" in table
    assert "| spam | 0.0000 | n/a | 7 |" in table
    assert "| ham | 1.0000 | 0.9300 | 93 |" in table
    assert "positive class" in table and "macro" in table  # what they mean


def test_final_table_without_names_says_class_and_label() -> None:
    assert "| class 1 | 0.0000 | n/a | 7 |" in final_table(_summary())


# ---------------------------------------------------------------- class weights


def test_balanced_class_weights_are_scikit_learns() -> None:
    from sklearn.utils.class_weight import compute_class_weight

    y = np.r_[np.zeros(90, int), np.ones(7, int), np.full(3, 2)]
    expected = compute_class_weight("balanced", classes=np.arange(3), y=y)
    got = balanced_class_weights(np.bincount(y))
    assert got == pytest.approx(list(expected))


def test_a_class_without_samples_weighs_one_and_is_not_counted() -> None:
    # scikit-learn's balanced weights over the classes present: 10 / (2 * 8), ...
    assert balanced_class_weights([8, 0, 2]) == pytest.approx((0.625, 1.0, 2.5))


def test_federated_class_counts_sum_the_clients() -> None:
    manifest = {
        "classes": [0, 1],
        "clients": [
            {"client": 0, "train_class_counts": [40, 2]},
            {"client": 1, "train_class_counts": [50, 5]},
        ],
    }
    assert federated_class_counts(manifest) == [90, 7]


def _params(**train: object) -> Params:
    return Params.model_validate(
        {"train": dict(train), "federation": {"rounds": 1}, "round_chain": {1: 0}}
    )


def test_model_spec_carries_the_balanced_weights_only_when_asked() -> None:
    dataset = DatasetSpec("t", (0, 1), (4,), (0.0, 1.0), 1.0, 100)
    manifest = {"classes": [0, 1], "clients": [{"train_class_counts": [90, 10]}]}
    assert model_spec(_params(), dataset, manifest).class_weights is None
    spec = model_spec(_params(class_weight="balanced"), dataset, manifest)
    assert spec.class_weights == pytest.approx((100 / 180, 100 / 20))


def test_class_weight_is_refused_with_privacy_and_unknown_values() -> None:
    with pytest.raises(ValueError, match="train.class_weight.*privacy.mechanism"):
        Params.model_validate(
            {"train": {"class_weight": "balanced"}, "privacy": {"mechanism": "central"}}
        )
    with pytest.raises(ValueError, match="class_weight"):
        _params(class_weight="auto")


def _runner(weights: tuple[float, ...] | None, n_classes: int) -> ModelRunner:
    return ModelRunner(ModelSpec("mlp", (4,), n_classes, "sgd", 0.1, (), weights))


@pytest.mark.parametrize("n_classes", [2, 3])
def test_training_loss_weighs_each_sample_by_its_class(n_classes: int) -> None:
    rng = np.random.default_rng(0)
    weights = (0.5, 4.0, 2.0)[:n_classes]
    runner = _runner(weights, n_classes)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    y = rng.integers(0, n_classes, size=16)
    target = runner._target(y)
    probs = runner.model(x)
    per_sample = runner._loss(target, probs).numpy().reshape(-1)
    expected = float(np.sum(per_sample * np.asarray(weights)[y]) / len(y))
    assert float(runner.data_loss(target, probs)) == pytest.approx(expected, rel=1e-5)
    plain = _runner(None, n_classes)
    assert float(plain.data_loss(target, probs)) == pytest.approx(
        float(np.mean(per_sample)), rel=1e-5
    )


def test_balanced_weights_raise_the_rare_class_recall() -> None:
    """A 5 % class the unweighted fit never predicts; the weighted fit finds it."""
    rng = np.random.default_rng(1)
    n = 400
    y = (rng.random(n) < 0.05).astype(np.int64)
    x = (rng.normal(size=(n, 4)) + 1.2 * y[:, None]).astype(np.float32)
    weights = balanced_class_weights(np.bincount(y))
    recalls = {}
    for name, w in (("plain", None), ("balanced", weights)):
        runner = _runner(w, 2)
        start = initial_weights(runner.spec, 0)
        trained = runner.fit(start, x, y, epochs=5, batch_size=32, seed=3)
        probs, _ = runner.predict(trained, x, y)
        recalls[name] = class_report(y, probs, 2)["recall"][1]
    assert recalls["plain"] < 0.3
    assert recalls["balanced"] > 0.6
