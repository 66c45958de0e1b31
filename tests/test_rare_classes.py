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


# ---------------------------------------------------------------- the doctor


def _round(k: int, accuracy: float, loss: float, recall: list[float]) -> dict:
    return {
        "round": k,
        "global": {"accuracy": accuracy, "loss": loss, "balanced_accuracy": 0.5},
        "global_classes": {
            "recall": recall,
            "precision": [accuracy, None],
            "support": [93, 7],
            "confusion": [[93, 0], [7, 0]],
        },
    }


def _health(k: int, n_train: int = 400) -> dict:
    return {
        "round": k,
        "global": {"top_class": 0, "top_class_share": 1.0, "majority_share": 0.93},
        "clients": [{"client": c, "n_train": n_train} for c in range(3)],
    }


def _run(tmp_path, losses, *, n_train: int = 400, **train: object):
    from fedpipe.observe.runfiles import RunFiles

    rounds = {k: _round(k, 0.93, loss, [1.0, 0.0]) for k, loss in enumerate(losses, 1)}
    return RunFiles(
        root=tmp_path,
        rounds=rounds,
        health={k: _health(k, n_train) for k in rounds},
        config=_params(**train),
        schema={"classes": [0, 1], "class_names": ["ham", "spam"]},
    )


def test_a_model_answering_the_majority_is_told_to_weigh_classes_not_lower_lr(
    tmp_path,
) -> None:
    from fedpipe.observe.doctor import codes, diagnose

    findings = diagnose(_run(tmp_path, [0.40, 0.31, 0.27]))
    found = {f.code: f for f in findings}
    assert codes.PREDICTIONS_CONSTANT not in found  # it did not diverge
    f = found[codes.PREDICTS_MAJORITY_CLASS]
    assert "majority class (ham)" in f.title
    assert any("spam 0" in line for line in f.evidence)  # by name, not "class 1"
    assert "train.class_weight: balanced" in f.fix and "train.epochs" in f.fix
    assert "lower train.lr" not in f.fix


def test_a_diverged_model_predicting_one_class_is_still_the_learning_rate(
    tmp_path,
) -> None:
    from fedpipe.observe.doctor import check_majority_class, check_predictions, codes

    run = _run(tmp_path, [0.40, 0.9, float("nan")])
    (f,) = check_predictions(run)
    assert f.code == codes.PREDICTIONS_CONSTANT and "lower train.lr" in f.fix
    assert "predicts ham for" in f.evidence[0]
    assert check_majority_class(run) == []


def test_a_weighted_run_is_told_only_to_train_more(tmp_path) -> None:
    from fedpipe.observe.doctor import check_majority_class

    run = _run(tmp_path, [0.40, 0.31, 0.27], class_weight="balanced")
    (f,) = check_majority_class(run)
    assert "class_weight" not in f.fix and "train.epochs = 1" in f.fix


def _series_run(tmp_path, accuracy, loss, n_train: int):
    from fedpipe.observe.runfiles import RunFiles

    rounds = {
        k: {"round": k, "global": {"accuracy": a, "loss": v}}
        for k, (a, v) in enumerate(zip(accuracy, loss, strict=True), 1)
    }
    return RunFiles(
        root=tmp_path,
        rounds=rounds,
        health={k: _health(k, n_train) for k in rounds},
        config=_params(),
    )


def _learning_run(tmp_path, n_train: int):
    # 12 rounds climbing every round: a run of 4 (as before) is a short run,
    # which the doctor leaves alone (MIN_ROUNDS)
    accuracy = [0.40 + 0.03 * k for k in range(12)]
    loss = [1.6 - 0.05 * k for k in range(12)]
    return _series_run(tmp_path, accuracy, loss, n_train)


def test_one_step_a_round_while_still_learning_is_under_training(tmp_path) -> None:
    from fedpipe.observe.doctor import check_under_training, codes

    # 27 rows a client, batch 32: one step a round (the glass table)
    (f,) = check_under_training(_learning_run(tmp_path, 27))
    assert f.code == codes.UNDER_TRAINED
    assert "about 1 local step" in f.title
    assert "train.epochs = 1" in f.fix and "train.batch_size = 32" in f.fix


def test_enough_steps_a_round_is_not_under_training(tmp_path) -> None:
    from fedpipe.observe.doctor import check_under_training

    assert check_under_training(_learning_run(tmp_path, 400)) == []  # 13 steps


# iris at fedpipe's defaults (scripts/table_corpus.py, 1 epoch, 30 rounds, 1
# step a round; 3.3 points behind the central baseline), rounded: the accuracy
# moves one held-out row at a time and sits flat between, so it does not climb
# at every one of the last 3 rounds
IRIS_ACCURACY = [0.533, 0.567, 0.633, 0.700, 0.733] + [0.767] * 12 + [0.833] * 7
IRIS_ACCURACY += [0.867] * 3 + [0.900] * 3
IRIS_LOSS = [1.034 - 0.0335 * k for k in range(10)]
IRIS_LOSS += [0.737 - 0.0098 * k for k in range(20)]


def test_a_noisy_rise_with_few_steps_is_under_training(tmp_path) -> None:
    from fedpipe.observe.doctor import check_under_training, codes

    # 8 steps a round (digits: 230 rows a client, batch 32), the accuracy noisy:
    # it dips at the last round and the loss rises once in the last three
    accuracy = [0.60 + 0.01 * k + (0.015 if k % 3 == 1 else 0.0) for k in range(30)]
    accuracy[-1] = accuracy[-2] - 0.01
    loss = [1.0 - 0.015 * k for k in range(30)]
    loss[-2] = loss[-3] + 0.005
    (f,) = check_under_training(_series_run(tmp_path, accuracy, loss, 230))
    assert f.code == codes.UNDER_TRAINED and "about 8 local step" in f.title
    assert "1 epoch" in f.evidence[0]
    trend = f.evidence[1]
    assert trend.startswith("rounds 21-30 (the last 10 of 30): held-out loss")
    assert "slope -0.01" in trend and "best 0.895" in trend  # the trend, its figures
    assert f.rounds == list(range(21, 31))
    assert "train.epochs = 1" in f.fix and "federation.rounds" in f.fix


def test_iris_at_the_defaults_is_under_training(tmp_path) -> None:
    from fedpipe.observe.doctor import check_under_training

    (f,) = check_under_training(_series_run(tmp_path, IRIS_ACCURACY, IRIS_LOSS, 19))
    assert "about 1 local step" in f.title
    assert "best 0.9 in rounds 26-30, above 0.867 before" in f.evidence[1]


def test_a_converged_flat_tail_is_not_under_training(tmp_path) -> None:
    from fedpipe.observe.doctor import check_under_training

    # learned in 10 rounds, then flat with noise: a held-out row either way,
    # the loss within 1 % (a little higher at the end, as when it overfits)
    accuracy = [0.5 + 0.045 * k for k in range(10)]
    accuracy += [0.933, 0.967, 0.933, 0.967, 0.967] * 4
    loss = [1.0 - 0.08 * k for k in range(10)]
    loss += [0.200 + 0.001 * (k % 3) + 0.0002 * k for k in range(20)]
    assert check_under_training(_series_run(tmp_path, accuracy, loss, 24)) == []


def test_a_loss_still_falling_under_a_flat_accuracy_is_not_under_training(
    tmp_path,
) -> None:
    from fedpipe.observe.doctor import check_under_training

    # iris's first 24 rounds then flat: no new best in the last rounds
    accuracy = IRIS_ACCURACY[:24] + [0.833] * 6
    run = _series_run(tmp_path, accuracy, IRIS_LOSS, 24)
    assert check_under_training(run) == []


def test_a_plateau_reached_before_the_last_rounds_is_not_under_training(
    tmp_path,
) -> None:
    from fedpipe.observe.doctor import check_under_training

    # iris at 90 rounds x 5 epochs (5 steps a round), level with the central
    # baseline: 0.933 from round 67 to the end while the held-out loss still
    # falls (0.218 -> 0.176 over rounds 61-90, 20 %); the last new best is 24
    # rounds old, so the accuracy's line over rounds 61-90 climbs but nothing
    # is learned at the end
    accuracy = [0.733, 0.767, 0.767, 0.833, 0.867] + [0.9] * 61 + [0.933] * 24
    loss = [0.882 * 0.98**k for k in range(90)]  # still falling, 2 % a round
    assert check_under_training(_series_run(tmp_path, accuracy, loss, 24)) == []


def test_a_short_run_still_climbing_is_not_under_training(tmp_path) -> None:
    from fedpipe.observe.doctor import check_under_training

    # the tests' tiny runs (4-5 rounds, a few steps): still climbing, by design
    accuracy, loss = [0.3, 0.5, 0.6, 0.68, 0.72], [2.0, 1.5, 1.2, 1.0, 0.9]
    assert check_under_training(_series_run(tmp_path, accuracy, loss, 80)) == []


# ---------------------------------------------------------------- the report


def test_the_report_shows_recall_per_named_class_and_the_validation_warnings(
    tmp_path,
) -> None:
    import json

    from fedpipe.observe.report import build_report
    from fedpipe.observe.runfiles import load_run

    (tmp_path / "metrics/rounds").mkdir(parents=True)
    (tmp_path / "metrics/rounds/round-1.json").write_text(json.dumps(_summary()))
    (tmp_path / "data/prepared").mkdir(parents=True)
    (tmp_path / "data/prepared/schema.json").write_text(
        json.dumps({"classes": [0, 1], "class_names": ["ham", "spam"]})
    )
    (tmp_path / "reports/validation").mkdir(parents=True)
    imbalance = "class ham has 290 samples, 29.0x class spam (10)"
    (tmp_path / "reports/validation/summary.json").write_text(
        json.dumps(
            {
                "success": True,
                "n_rows": 300,
                "n_expectations": 12,
                "failures": [],
                "warnings": [
                    {
                        "expectation": "fedpipe_class_imbalance",
                        "column": "label",
                        "unexpected_count": 0,
                        "examples": [],
                        "detail": imbalance,
                    }
                ],
            }
        )
    )
    page = build_report(tmp_path, findings=[], run=load_run(tmp_path))
    assert "Data validation warnings" in page
    assert "fedpipe_class_imbalance" in page and "29.0x class spam" in page
    assert "<td>spam</td><td>0.0000</td><td>n/a</td><td>7</td>" in page
    assert "positive class" in page
