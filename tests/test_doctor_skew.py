"""The doctor's drift and normalization-statistics findings name the kind of skew
(label, feature, quantity) from the partition report's skew.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.drift import check_drift
from fedpipe.observe.doctor.norm_statistics import check_norm_statistics
from fedpipe.observe.doctor.skewkind import skew_kinds
from fedpipe.observe.runfiles import RunFiles

#: skew.json figures measured on the default digits, 10 clients, seed 42
#: (docs/own-data.md, benchmarks/bench_feature_skew.py --figures)
IID_DOMAINS = {"label_skew": 0.060, "feature_skew": 1.164, "size_cv": 0.01}
DIRICHLET_01 = {"label_skew": 0.670, "feature_skew": 0.535, "size_cv": 0.08}
DIRICHLET_DOMAINS = {"label_skew": 0.491, "feature_skew": 1.247, "size_cv": 0.05}
IID = {"label_skew": 0.060, "feature_skew": 0.091, "size_cv": 0.01}
QUANTITY = {"label_skew": 0.072, "feature_skew": 0.075, "size_cv": 1.2}


def _health(n_clients: int = 6) -> dict[str, Any]:
    """A round where the clients drift apart and pull batch norm apart."""
    return {
        "global": {"divergence": 0.95},
        "gap": {"accuracy": -0.3, "loss": -0.5},
        "clients": [
            {"client": c, "update_norm": 1.0 + 0.01 * c, "cosine_to_mean": 0.3}
            for c in range(n_clients)
        ],
        "layers": [
            {
                "name": "bn_01",
                "kind": "norm",
                "divergence": 0.9,
                "stats_divergence": 0.6,
                "stats_spread": 0.2,
            },
            {"name": "dense", "kind": "dense", "divergence": 0.9},
        ],
    }


def _run(
    tmp_path: Path, skew: dict[str, float], method: str, feature_skew: str
) -> RunFiles:
    return RunFiles(
        root=tmp_path,
        health={k: _health() for k in (1, 2, 3)},
        skew=dict(skew, n_clients=6),
        manifest={"method": method, "params": {"feature_skew": feature_skew}},
    )


def test_a_domain_skewed_run_is_named_feature_skew(tmp_path: Path) -> None:
    run = _run(tmp_path, IID_DOMAINS, "iid", "domains")
    (drift,) = check_drift(run)
    (stats,) = check_norm_statistics(run)
    line = (
        "kind of skew: feature skew (skew.json: label skew 0.06, feature skew 1.16, "
        "size CV 0.01; partition.feature_skew: domains)"
    )
    for finding in (drift, stats):
        assert line in finding.evidence
        assert "label skew and" not in " ".join(finding.evidence)
    assert drift.code == codes.CLIENT_DRIFT
    assert drift.fix.startswith("the clients' inputs differ (feature skew)")
    assert "personalization.method: fedbn" in drift.fix
    assert "data is split i.i.d." not in drift.fix  # the method is iid, the data not
    assert stats.fix.startswith("the clients' inputs differ (feature skew)")


def test_a_label_skewed_run_is_named_label_skew(tmp_path: Path) -> None:
    run = _run(tmp_path, DIRICHLET_01, "dirichlet", "none")
    (drift,) = check_drift(run)
    (stats,) = check_norm_statistics(run)
    line = (
        "kind of skew: label skew (skew.json: label skew 0.67, feature skew 0.54, "
        "size CV 0.08)"
    )
    for finding in (drift, stats):
        assert line in finding.evidence
        assert "feature skew)" not in finding.fix
    assert drift.fix.startswith("correct for drift: strategy.name: fedprox")
    assert stats.fix.startswith("the clients hold different classes (label skew)")
    assert "helps less here" in stats.fix


@pytest.mark.parametrize(
    ("skew", "kinds"),
    [
        (IID, ()),
        (IID_DOMAINS, ("feature",)),
        (DIRICHLET_01, ("label",)),  # label skew moves the inputs' figure too
        (DIRICHLET_DOMAINS, ("label", "feature")),
        (QUANTITY, ("quantity",)),
        ({"label_skew": 0.06, "feature_skew": 0.391}, ("feature",)),  # noise 0.2
    ],
)
def test_skew_kinds_from_the_figures(
    tmp_path: Path, skew: dict[str, float], kinds: tuple[str, ...]
) -> None:
    found = skew_kinds(RunFiles(root=tmp_path, skew=skew))
    assert found.kinds == kinds


def test_both_kinds_are_named_and_fedbn_is_added_to_the_label_fix(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, DIRICHLET_DOMAINS, "dirichlet", "domains")
    (drift,) = check_drift(run)
    assert any(
        e.startswith("kind of skew: label skew and feature skew")
        for e in drift.evidence
    )
    assert drift.fix.startswith("correct for drift")
    assert "inputs differ too (feature skew)" in drift.fix


def test_without_skew_json_the_findings_are_as_before(tmp_path: Path) -> None:
    run = RunFiles(root=tmp_path, health={k: _health() for k in (1, 2, 3)})
    (stats,) = check_norm_statistics(run)
    assert not any(e.startswith("kind of skew") for e in stats.evidence)
    assert stats.fix.startswith("the clients' inputs differ in scale or distribution")
