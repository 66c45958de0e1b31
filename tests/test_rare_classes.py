"""Rare classes (issue 37, item 4): the final table's per-class recall and
balanced accuracy, ``train.class_weight: balanced`` and the doctor's findings on
a model that answers the majority class or trained too little."""

from __future__ import annotations

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
