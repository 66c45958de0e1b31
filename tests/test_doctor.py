"""Tests for fedpipe.observe.doctor: each finding, produced on purpose by a real tiny
run.

Every scenario is a small federation (tests/helpers_fl.py: the built-in digits,
ModelRunner, the strategies, round_health) with one thing broken; the test checks
that the doctor names it, with the right rounds, layers or clients in the evidence.
Runs are made on first use and shared by the tests of this module.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers_fl import run_federation, scaled_inputs, shuffled_labels

from fedpipe.config import layout
from fedpipe.config.params import round_chain
from fedpipe.core.jsonio import write_json
from fedpipe.federation.attacks import AttackPlan, make_attack
from fedpipe.observe.doctor import SIDES, Finding, codes, diagnose, robust_z
from fedpipe_app.cli import main

TINY = {"lr": 0.1, "epochs": 2, "rounds": 4}
SMALL = dict(TINY, n_samples=500, clients=5)
FLAT_BN_CNN = (("batch_norm", True), ("depth", 2), ("head", "flatten"), ("width", 4))
BATCH_NORM_CNN = {
    "model": "cnn",
    "model_settings": (("batch_norm", True), ("depth", 2), ("width", 4)),
    "n_samples": 500,
    "rounds": 3,
}


def _times_50(client: int) -> Callable[[int, int, list], list]:
    def hook(c: int, round_: int, weights: list) -> list:
        return [w * np.float32(50) for w in weights] if c == client else weights

    return hook


def _bias_dies_from(round_: int) -> Callable[[int, int, list], list]:
    """Every client sends its hidden layer's bias as -50 from ``round_`` on."""

    def hook(c: int, k: int, weights: list) -> list:
        if k < round_:
            return weights
        return [weights[0], np.full_like(weights[1], -50.0), *weights[2:]]

    return hook


@functools.cache
def breast_cancer(standardized: bool = False) -> pd.DataFrame:
    """sklearn's breast-cancer table (569 rows, 30 measurements from about 0.001 to
    4,254; a public table nobody here made), with its 0/1 ``label``; every column
    standardized by hand when asked."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    table = data.data.copy()
    if standardized:
        table = (table - table.mean()) / table.std(ddof=0)
    table["label"] = data.target
    return table


#: 8 clients of very unequal sizes (log-normal, sigma 2: 4 to 316 rows), Adam
#: (a step of about lr whatever the gradient, so the largest client's update is
#: about 5x the median's: it takes 10x their local steps)
QUANTITY_SKEW = dict(
    TINY,
    n_samples=1000,
    clients=8,
    partition="quantity",
    partition_settings={"quantity_sigma": 2.0},
    optimizer="adam",
    lr=0.001,
)

SCENARIOS: dict[str, dict[str, Any]] = {
    "healthy": dict(TINY),
    "healthy-batch-norm": dict(TINY, **BATCH_NORM_CNN),
    # every personalization method, healthy: what stays on the clients is not
    # averaged, which is neither misweighted aggregation nor drift
    **{
        f"healthy-{method}": dict(
            TINY,
            **dict(BATCH_NORM_CNN, model_settings=FLAT_BN_CNN, clients=5),
            personalization={"method": method},
        )
        for method in ("fedper", "fedbn", "finetune", "ditto")
    },
    # (a) binary digits 4/9, Adam, many local epochs: the held-out loss doubles
    # while accuracy holds (the seed question's pattern)
    "over-confident": dict(
        classes=(4, 9),
        n_samples=600,
        epochs=10,
        lr=0.03,
        optimizer="adam",
        rounds=5,
    ),
    # (b) the server sums n_k-weighted client weights with shares summing to 1.8
    "weights-sum-1.8": dict(TINY, rounds=3, weight_sum_fault=1.8),
    # (c) a binary task stored with labels 0/2 for the one sigmoid output
    "labels-0-2": dict(
        TINY, rounds=3, classes=(0, 1), relabel=lambda y: y * 2, n_classes=2
    ),
    # (d) client 3 trains on shuffled labels / sends its weights x50
    "shuffled-client": dict(TINY, client_data=shuffled_labels(3)),
    "scaled-client": dict(TINY, rounds=3, client_update=_times_50(3)),
    # (h) a learning rate so small that nothing moves
    "lr-tiny": dict(TINY, rounds=3, lr=1e-6),
    # (e) lr 5 with plain SGD
    "lr-5": dict(TINY, rounds=3, lr=5.0),
    # (f) Dirichlet(0.1) label skew
    "dirichlet": dict(TINY, partition="dirichlet", alpha=0.1),
    # (g) batch norm; clients 5-9 see inputs x10 (another unit / preprocessing)
    "scaled-inputs-batch-norm": dict(
        TINY, **BATCH_NORM_CNN, client_data=scaled_inputs(10.0, [5, 6, 7, 8, 9])
    ),
    # the server's step: FedAvgM with server_lr 10 (momentum 0.9), FedAdam with
    # server_lr 1, on clients that train normally (train.lr 0.1)
    "fedavgm-server-lr-10": dict(
        SMALL,
        rounds=3,
        strategy="fedavgm",
        strategy_settings={"server_lr": 10.0, "server_momentum": 0.9},
    ),
    "fedadam-server-lr-1": dict(
        SMALL, rounds=2, strategy="fedadam", strategy_settings={"server_lr": 1.0}
    ),
    # learns for 2 rounds, then every client's hidden bias is thrown to -50: the
    # hidden layer dies, the model answers one class, accuracy falls to chance
    "bias-dies": dict(SMALL, client_update=_bias_dies_from(3)),
    # SGD at lr 1.5: the hidden ReLU layer dies (the model never learns)
    "lr-1.5": dict(SMALL, lr=1.5),
    # (i) the breast-cancer table fed raw (columns 2e5x apart): local training
    # blows up at lr 0.05, and the cause is the inputs; its control, the same
    # table standardized by hand
    "table-unscaled": dict(TINY, table=breast_cancer(), clients=5, rounds=3, lr=0.05),
    "table-standardized": dict(
        TINY, table=breast_cancer(True), clients=5, rounds=3, lr=0.05
    ),
    # (d) under quantity skew, healthy; and with client 0 (the largest) sending
    # its update x8 (the scaling attack)
    "quantity-skew": QUANTITY_SKEW,
    "quantity-skew-scaled": dict(
        QUANTITY_SKEW,
        attack=AttackPlan(make_attack("scaling", scale=8.0), (0,), seed=0),
    ),
    # (e) FedProx at mu 100 with SGD at lr 0.05: lr mu = 5 overshoots
    "fedprox-mu-100": dict(
        TINY,
        lr=0.05,
        rounds=2,
        clients=5,
        strategy="fedprox",
        strategy_settings={"proximal_mu": 100.0},
    ),
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The directory of a scenario's run (run on first use)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            run_federation(root, **SCENARIOS[name])
            made[name] = root
        return made[name]

    return get


def _one(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, [f.code for f in findings]
    return matching[0]


def _text(finding: Finding) -> str:
    return "\n".join([finding.title, *finding.evidence, finding.fix])


# ---------------------------------------------------------------- healthy runs


def test_a_healthy_run_has_no_findings(run_dir) -> None:
    assert diagnose(run_dir("healthy")) == []


@pytest.mark.parametrize("method", ["fedper", "fedbn", "finetune", "ditto"])
def test_a_healthy_personalized_run_gets_no_error(run_dir, method) -> None:
    root = run_dir(f"healthy-{method}")
    params = yaml.safe_load((root / "params.yaml").read_text())
    assert params["personalization"]["method"] == method
    record = json.loads((root / layout.round_metrics(3)).read_text())
    # it learned (10 classes): the personalized models, each on its own client
    assert record["personalized"]["accuracy"] > 0.3
    errors = [f.code for f in diagnose(root) if f.severity == "error"]
    assert errors == []


def test_iid_batch_norm_clients_raise_no_statistics_finding(run_dir) -> None:
    # the control of (g): same model, inputs alike on every client. This tiny
    # batch-norm CNN does not beat guessing in 3 short rounds (its moving
    # statistics barely move), which the doctor says, and nothing else.
    found = [f.code for f in diagnose(run_dir("healthy-batch-norm"))]
    assert found in ([], [codes.NOT_LEARNING])


def test_cli_says_no_findings_and_exits_0(run_dir, capsys) -> None:
    assert main(["-C", str(run_dir("healthy")), "doctor"]) == 0
    assert capsys.readouterr().out.strip() == "no findings"


# ---------------------------------------------------------------- (a)


def test_loss_rising_while_accuracy_holds(run_dir) -> None:
    findings = diagnose(run_dir("over-confident"))
    f = _one(findings, codes.LOSS_RISING_ACCURACY_HOLDS)
    assert f.severity == "warning"
    assert findings[0] is f  # nothing else explains it
    text = _text(f)
    assert "round 5" in text and 5 in f.rounds
    assert "mean confidence" in text and "ECE" in text
    assert "worst 1% of held-out samples carry" in text
    assert "layers that grew: hidden" in text  # the hidden layer grew most
    assert "train.lr" in f.fix


# ---------------------------------------------------------------- (b)


def test_aggregation_weights_summing_to_1_8(run_dir) -> None:
    findings = diagnose(run_dir("weights-sum-1.8"))
    f = findings[0]
    assert f.code == codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED
    assert f.severity == "error"
    assert f.rounds == [1, 2, 3]
    assert "1.8" in f.title
    assert "round 1: effective weights sum to 1.8" in _text(f)
    # the symptom it causes is named, as its consequence
    rising = _one(findings, codes.LOSS_RISING_ACCURACY_HOLDS)
    assert rising.severity == "info" and "consequence" in rising.title


# ---------------------------------------------------------------- (c)


# no test label is 1, so every client's AUC is nan and so is their std
@pytest.mark.filterwarnings("ignore:Degrees of freedom <= 0:RuntimeWarning")
def test_labels_outside_the_sigmoid_range(run_dir) -> None:
    findings = diagnose(run_dir("labels-0-2"))
    f = findings[0]
    assert f.code == codes.LABELS_OUTSIDE_LOSS_RANGE
    assert f.severity == "error"
    text = _text(f)
    assert "labels 2 (" in text and "0/1 (one sigmoid output)" in text
    assert "clients training on them: client" in text
    assert "negative" in text  # the held-out loss went below zero


# ---------------------------------------------------------------- (d)


def test_a_client_with_shuffled_labels_is_an_outlier(run_dir) -> None:
    findings = diagnose(run_dir("shuffled-client"))
    f = _one(findings, codes.CLIENT_UPDATE_OUTLIER)
    assert findings[0] is f
    assert "client 3" in f.title and "pointing away" in f.title
    assert f.rounds == [1, 2, 3, 4]
    assert "cosine to the mean update" in _text(f)
    assert "strategy.name: fedmedian" in f.fix


def test_a_client_scaling_its_weights_by_50_is_an_outlier(run_dir) -> None:
    findings = diagnose(run_dir("scaled-client"))
    f = findings[0]
    assert f.code == codes.CLIENT_UPDATE_OUTLIER
    assert f.severity == "error"
    assert "client 3" in f.title and "far larger" in f.title
    assert "round 1: update norm" in _text(f)
    # what it does to the global model is not blamed on the learning rate
    assert codes.LEARNING_RATE_TOO_HIGH not in [g.code for g in findings]


# ---------------------------------------------------------------- (e)


def test_learning_rate_5_blows_up(run_dir) -> None:
    findings = diagnose(run_dir("lr-5"))
    f = findings[0]
    assert f.code == codes.LEARNING_RATE_TOO_HIGH
    assert f.severity == "error"
    assert 1 in f.rounds
    assert "median local training loss" in _text(f)
    assert "train.lr = 5, train.optimizer = sgd -> try 0.5" in f.fix


def test_an_oscillating_loss_is_a_learning_rate_warning(tmp_path: Path) -> None:
    # the global loss alone, written as a round stage would
    for k, loss in enumerate([2.0, 1.0, 2.5, 0.9, 2.4, 1.0], start=1):
        write_json(
            tmp_path / layout.round_metrics(k),
            {"round": k, "global": {"loss": loss, "accuracy": 0.5}},
        )
    findings = diagnose(tmp_path)
    f = _one(findings, codes.LEARNING_RATE_TOO_HIGH)
    assert f.severity == "warning"
    assert f.rounds == [2, 3, 4, 5, 6]
    assert "swings up and down" in _text(f)


# ---------------------------------------------------------------- (f)


def test_dirichlet_skew_is_client_drift(run_dir) -> None:
    findings = diagnose(run_dir("dirichlet"))
    f = findings[0]
    assert f.code == codes.CLIENT_DRIFT
    text = _text(f)
    assert "partition: dirichlet (alpha=0.1)" in text
    assert "divergence" in text and "median cosine" in text
    assert "most divergent layers: " in text
    assert "fedprox" in f.fix and "train.epochs" in f.fix


# ---------------------------------------------------------------- (g)


def test_batch_norm_statistics_disagree_between_scaled_clients(run_dir) -> None:
    findings = diagnose(run_dir("scaled-inputs-batch-norm"))
    f = findings[0]
    assert f.code == codes.NORM_STATISTICS_DISAGREE
    assert _text(f).count("bn_01:") == 1
    assert "personalization.method: fedbn" in f.fix


# ---------------------------------------------------------------- reading the files


def test_rounds_without_health_records_are_reported(run_dir, tmp_path) -> None:
    root = tmp_path / "run"
    shutil.copytree(run_dir("healthy"), root)
    (root / layout.health_metrics(3)).unlink()
    (root / layout.health_metrics(4)).unlink()
    [f] = diagnose(root)
    assert (f.code, f.severity, f.rounds) == (
        codes.HEALTH_RECORDS_MISSING,
        "info",
        [3, 4],
    )


def test_no_recorded_round_is_a_clear_error(tmp_path, capsys) -> None:
    with pytest.raises(FileNotFoundError, match="no round-K.json"):
        diagnose(tmp_path)
    assert main(["-C", str(tmp_path), "doctor"]) == 1
    assert "no round-K.json" in capsys.readouterr().err


def test_cli_formats_and_exit_codes(run_dir, capsys) -> None:
    root = str(run_dir("weights-sum-1.8"))
    assert main(["-C", root, "doctor", "--format", "json"]) == 1  # an error
    payload = json.loads(capsys.readouterr().out)
    assert payload[0]["code"] == codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED
    assert set(payload[0]) == {
        "code",
        "severity",
        "title",
        "evidence",
        "fix",
        "rounds",
        "side",
    }
    assert payload[0]["side"] == "server aggregation"
    assert (
        main(["-C", root, "doctor", "--format", "markdown", "--fail-on", "never"]) == 0
    )
    markdown = capsys.readouterr().out
    assert markdown.startswith("### error: aggregation weights")
    assert "**Side:** server aggregation" in markdown
    drift = str(run_dir("dirichlet"))  # a warning only
    assert main(["-C", drift, "doctor"]) == 0
    assert main(["-C", drift, "doctor", "--fail-on", "warning"]) == 1


def test_robust_z() -> None:
    z = robust_z([1.0, 1.1, 0.9, 1.0, 5.0])
    assert z[-1] > 3.5 and abs(z[0]) < 1
    assert list(robust_z([2.0, 2.0, 3.0])) == [0.0, 0.0, np.inf]


# ---------------------------------------------------------------- (h)


def test_a_model_that_does_not_learn(run_dir) -> None:
    findings = diagnose(run_dir("lr-tiny"))
    f = _one(findings, codes.NOT_LEARNING)
    assert f.severity == "warning" and f.rounds == [1, 2, 3]
    assert "guessing gives 0.1 (10 classes)" in _text(f)
    assert "nothing learns" in f.fix and "train.lr" in f.fix


def test_a_symptom_names_the_root_cause_not_another_symptom(run_dir) -> None:
    # weights summing to 1.8 explain both a too-high-lr look and the rising loss
    for f in diagnose(run_dir("weights-sum-1.8"))[1:]:
        if "likely a consequence of" in f.title:
            assert codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED in f.title, f.title


def test_label_finding_names_the_classes(tmp_path: Path) -> None:
    from fedpipe.observe.doctor.labels import check_labels
    from fedpipe.observe.runfiles import RunFiles

    run = RunFiles(
        root=tmp_path,
        schema={"classes": [0, 1, 2], "class_names": ["cat", "dog", "with_mask"]},
        labels=np.array([0, 1, 2, 3]),
    )
    (finding,) = check_labels(run)
    assert (
        "labels 3 (1 samples) outside 0..2 (0 cat, 1 dog, 2 with_mask)"
        in (finding.evidence[0])
    )


# ---------------------------------------------------------------- sides and knobs


@pytest.mark.parametrize(
    "name",
    ["weights-sum-1.8", "lr-5", "shuffled-client", "dirichlet", "lr-tiny", "bias-dies"],
)
def test_every_finding_names_its_side_and_the_current_values(run_dir, name) -> None:
    findings = diagnose(run_dir(name))
    assert findings
    for f in findings:
        assert f.side in SIDES, (f.code, f.side)
        assert " = " in f.fix, (f.code, f.fix)  # a param with its current value


def test_a_setting_left_unset_reads_null_not_a_question_mark(tmp_path: Path) -> None:
    """The doctor rendered federation.round_deadline_steps (null) as '= ?', the
    mark it keeps for params it could not read (issue 36, item 8)."""
    from fedpipe.config.params import parse_params
    from fedpipe.observe.doctor.base import knobs
    from fedpipe.observe.runfiles import RunFiles

    raw = {"federation": {"rounds": 1, "dropout": 0.2}, "round_chain": {"1": 0}}
    config = parse_params(raw)
    run = RunFiles(root=tmp_path, config=config)
    assert knobs(run, "federation.dropout", "federation.round_deadline_steps") == (
        "federation.dropout = 0.2, federation.round_deadline_steps = null"
    )
    assert knobs(run, "privacy.adaptive_clip") == "privacy.adaptive_clip = false"
    assert knobs(RunFiles(root=tmp_path), "train.lr") == "train.lr = ?"


# ---------------------------------------------------------------- the server's step


@pytest.mark.parametrize(
    ("name", "values"),
    [
        (
            "fedavgm-server-lr-10",
            ["strategy.server_lr = 10 -> try 1", "strategy.server_momentum = 0.9"],
        ),
        ("fedadam-server-lr-1", ["strategy.server_lr = 1 -> try 0.1", "strategy.tau"]),
    ],
)
def test_a_server_step_too_large_is_named_on_the_server_side(
    run_dir, name, values
) -> None:
    findings = diagnose(run_dir(name))
    f = findings[0]
    assert (f.code, f.severity, f.side) == (
        codes.SERVER_STEP_TOO_LARGE,
        "error",
        "server aggregation",
    )
    assert all(v in f.fix for v in values), f.fix
    assert "train.lr = 0.1 is not the cause" in f.fix
    text = _text(f)
    assert "x the clients' mean update" in text and "trained normally" in text
    # not blamed on the clients' learning rate (or only as its consequence)
    for g in findings:
        if g.code == codes.LEARNING_RATE_TOO_HIGH:
            assert g.severity == "info" and "consequence" in g.title


def test_server_step_ratio_is_1_for_fedavg(run_dir) -> None:
    for k in range(1, 5):
        path = run_dir("healthy") / layout.health_metrics(k)
        aggregation = json.loads(path.read_text())["aggregation"]
        assert aggregation["server_step_ratio"] == pytest.approx(1.0, abs=1e-4)
        assert aggregation["server_step_norm"] == pytest.approx(
            aggregation["mean_update_norm"], rel=1e-4
        )


def test_server_step_ratio_is_the_server_lr_for_fedavgm_round_1(run_dir) -> None:
    path = run_dir("fedavgm-server-lr-10") / layout.health_metrics(1)
    ratio = json.loads(path.read_text())["aggregation"]["server_step_ratio"]
    assert ratio == pytest.approx(10.0, rel=1e-4)  # no momentum yet in round 1


def test_a_client_learning_rate_stays_a_client_finding(run_dir) -> None:
    findings = diagnose(run_dir("lr-5"))
    assert findings[0].code == codes.LEARNING_RATE_TOO_HIGH
    assert findings[0].side == "client training"
    assert codes.SERVER_STEP_TOO_LARGE not in [f.code for f in findings]


# ---------------------------------------------------------------- collapse, dead


def test_a_collapse_names_peak_round_collapse_round_and_cause(run_dir) -> None:
    findings = diagnose(run_dir("bias-dies"))
    f = findings[0]
    assert (f.code, f.severity, f.side) == (
        codes.ACCURACY_COLLAPSED,
        "error",
        "client training",
    )
    assert "collapsed to guessing in round 3 (after peaking in round 2)" in f.title
    text = _text(f)
    assert "likely cause: local training blew up" in text
    assert "round 3: dead ReLU units: hidden 100%" in text
    assert "round 3: the global model predicts class" in text
    assert "train.lr (train.lr = 0.1" in f.fix and "keep the model of round 2" in f.fix
    # what the collapsed model looks like, found on its own, as its consequence
    constant = _one(findings, codes.PREDICTIONS_CONSTANT)
    dead = _one(findings, codes.DEAD_UNITS)
    assert constant.rounds == [3, 4] and dead.rounds == [3, 4]
    assert "consequence of accuracy-collapsed" in constant.title
    assert "layer hidden" in dead.title and "from round 3" in dead.title


def test_a_dead_layer_is_named_with_its_round(run_dir) -> None:
    findings = diagnose(run_dir("lr-1.5"))
    f = findings[0]
    assert (f.code, f.severity) == (codes.DEAD_UNITS, "error")
    assert "layer hidden" in f.title and f.rounds[0] == 4
    assert "train.lr = 1.5" in f.fix and "try 0.15" in f.fix


def test_health_records_the_prediction_shares_and_dead_units(run_dir) -> None:
    record = json.loads((run_dir("healthy") / layout.health_metrics(4)).read_text())
    g = record["global"]
    assert 0 < g["top_class_share"] < 0.5 and g["majority_share"] < 0.2
    assert record["dead_units"] == {"hidden": pytest.approx(0.0, abs=0.1)}


def test_a_healthy_run_learning_keeps_no_collapse(run_dir) -> None:
    # the collapse check on a run whose accuracy rises to the end
    from fedpipe.observe.doctor import (
        check_collapse,
        check_dead_units,
        check_predictions,
    )
    from fedpipe.observe.runfiles import load_run

    run = load_run(run_dir("healthy"))
    assert check_collapse(run) == check_predictions(run) == check_dead_units(run) == []


# ---------------------------------------------------------------- damaged runs


def _copy(run_dir, tmp_path: Path, name: str = "healthy") -> Path:
    root = tmp_path / "run"
    shutil.copytree(run_dir(name), root)
    return root


def _records(findings: list[Finding]) -> Finding:
    f = _one(findings, codes.RECORDS_UNREADABLE)
    assert (f.severity, f.side) == ("info", "run records")
    return f


def test_a_run_stopped_mid_round(run_dir, tmp_path, capsys) -> None:
    root = _copy(run_dir, tmp_path)
    for k in (3, 4):
        (root / layout.round_metrics(k)).unlink()
        (root / layout.client_metrics(k)).unlink()
    (root / layout.health_metrics(4)).unlink()  # health 1..3, rounds 1..2
    f = _records(diagnose(root))
    assert "round 3: a health record but no metrics/rounds file" in _text(f)
    assert main(["-C", str(root), "doctor"]) == 0  # info only
    out = capsys.readouterr().out
    assert "records-unreadable" in out and "side: run records" in out


def test_truncated_and_garbage_files_are_listed_not_raised(run_dir, tmp_path) -> None:
    root = _copy(run_dir, tmp_path)
    health = root / layout.health_metrics(2)
    health.write_text(health.read_text()[:100])  # partly written
    (root / layout.round_metrics(4)).write_bytes(b"\x00\x01 garbage")
    findings = diagnose(root)
    text = _text(_records(findings))
    assert "metrics/health/round-2.json: not read (JSONDecodeError" in text
    assert "metrics/rounds/round-4.json: not read (" in text
    # the rest was read: round 2 is the one without a health record
    assert _one(findings, codes.HEALTH_RECORDS_MISSING).rounds == [2]


def test_a_record_the_checks_cannot_read_is_named(run_dir, tmp_path, capsys) -> None:
    root = _copy(run_dir, tmp_path)
    health = root / layout.health_metrics(3)
    health.write_text(json.dumps({"round": 3, "clients": "not a list", "global": 1}))
    findings = diagnose(root)
    text = _text(_records(findings))
    assert "could not run: AttributeError" in text
    assert main(["-C", str(root), "doctor", "--format", "json"]) == 0
    assert codes.RECORDS_UNREADABLE in capsys.readouterr().out


def test_records_of_an_older_format_still_get_a_diagnosis(run_dir, tmp_path) -> None:
    root = _copy(run_dir, tmp_path)
    new = ("server_step_ratio", "server_step_norm", "mean_update_norm")
    for k in range(1, 5):
        path = root / layout.health_metrics(k)
        record = json.loads(path.read_text())
        record.pop("dead_units")
        for key in new:
            record["aggregation"].pop(key)
        for key in ("top_class", "top_class_share", "majority_share"):
            record["global"].pop(key)
        path.write_text(json.dumps(record))
    assert diagnose(root) == []


def _health(k: int, accuracy: float, loss: float, *, ratio: float, step: float):
    clients = [
        {"client": c, "n_train": 50, "update_norm": 0.3, "train_loss": 2.0}
        for c in range(4)
    ]
    return {
        "round": k,
        "clients": clients,
        "layers": [],
        "aggregation": {
            "server_step_ratio": ratio,
            "server_step_norm": step,
            "mean_update_norm": step / ratio,
        },
        "global": {
            "loss": loss,
            "accuracy": accuracy,
            "weight_norm_before": 9.0,
            "majority_share": 0.1,
            "top_class_share": 0.3,
        },
    }


def test_a_collapse_the_server_caused_names_the_server(tmp_path: Path) -> None:
    # written as a round stage would: FedAdam learns for 2 rounds, then its step
    # (20x the clients' mean update) throws the model back to guessing
    params = {
        "strategy": {"name": "fedadam", "server_lr": 1.0},
        "train": {"lr": 0.05},
        "federation": {"rounds": 4},
        "round_chain": round_chain(4),
    }
    (tmp_path / "params.yaml").write_text(json.dumps(params))  # JSON is YAML
    rows = [(0.5, 1.5, 3.0, 0.9), (0.6, 1.2, 3.0, 0.9), (0.1, 9.0, 20.0, 6.0)]
    rows.append((0.1, 8.0, 20.0, 6.0))
    for k, (accuracy, loss, ratio, step) in enumerate(rows, start=1):
        record = _health(k, accuracy, loss, ratio=ratio, step=step)
        write_json(tmp_path / layout.health_metrics(k), record)
        write_json(tmp_path / layout.round_metrics(k), {"round": k, **record})
    findings = diagnose(tmp_path)
    first = findings[0]
    assert (first.code, first.rounds) == (codes.SERVER_STEP_TOO_LARGE, [3, 4])
    collapsed = _one(findings, codes.ACCURACY_COLLAPSED)
    assert collapsed.side == "server aggregation" and collapsed.severity == "info"
    assert "round 3 (after peaking in round 2)" in collapsed.title
    assert "strategy.server_lr = 1 -> try 0.1" in collapsed.fix
    assert "train.lr = 0.05 is not the cause" in collapsed.fix


def _write_rounds(root: Path, params: dict, records: list[dict]) -> None:
    params = dict(params, round_chain=round_chain(len(records)))
    (root / "params.yaml").write_text(json.dumps(params))  # JSON is YAML
    for k, record in enumerate(records, start=1):
        write_json(root / layout.health_metrics(k), record)
        write_json(root / layout.round_metrics(k), {"round": k, **record})


@pytest.mark.parametrize(("ratio", "named"), [(4.0, True), (1.0, False)])
def test_a_slow_blow_up_the_server_amplifies_is_named_on_the_server_side(
    tmp_path: Path, ratio: float, named: bool
) -> None:
    # FedAvgM amplifying every round: the loss climbs 1.0 -> 2.7 without one
    # round doubling it; the same climb at a step ratio of 1 is not the server's
    params = {"strategy": {"name": "fedavgm", "server_lr": 4.0, "server_momentum": 0.9}}
    rows = [(0.63, 1.0), (0.64, 1.3), (0.57, 2.0), (0.62, 2.7)]
    records = [
        _health(k, acc, loss, ratio=ratio, step=0.5 * ratio)
        for k, (acc, loss) in enumerate(rows, start=1)
    ]
    _write_rounds(tmp_path, params, records)
    found = [f.code for f in diagnose(tmp_path)]
    assert (codes.SERVER_STEP_TOO_LARGE in found) is named, found
    if named:
        assert found[0] == codes.SERVER_STEP_TOO_LARGE


def _opposed_round(k: int, loss_ratio: float) -> dict:
    """Five clients agree (cosine 0.9); client 4 points against them, with a
    training loss ``loss_ratio`` times theirs."""
    clients = [
        {"client": c, "n_train": 50, "update_norm": 0.3, "train_loss": 0.5,
         "cosine_to_mean": 0.9}
        for c in range(4)
    ]  # fmt: skip
    clients.append(
        {"client": 4, "n_train": 50, "update_norm": 0.3,
         "train_loss": 0.5 * loss_ratio, "cosine_to_mean": -0.5}
    )  # fmt: skip
    return {
        "round": k,
        "clients": clients,
        "layers": [],
        "global": {"loss": 1.0 - 0.1 * k, "accuracy": 0.6 + 0.05 * k},
    }


@pytest.mark.parametrize(("loss_ratio", "attacker"), [(1.0, True), (3.0, False)])
def test_a_client_that_cannot_fit_its_data_is_not_called_an_attacker(
    tmp_path: Path, loss_ratio: float, attacker: bool
) -> None:
    # a sign-flipper trains honestly (its loss is the others'); a client with
    # random labels cannot fit them (3x the others' loss): bad data
    _write_rounds(tmp_path, {}, [_opposed_round(k, loss_ratio) for k in (1, 2, 3)])
    found = [f.code for f in diagnose(tmp_path)]
    assert (codes.CLIENTS_AGAINST_FEDERATION in found) is attacker, found


def test_a_client_that_moved_nothing_does_not_unbalance_the_weight_sum() -> None:
    from fedpipe.observe.doctor.aggregation import identifiable_sum

    def round_(fitted: list[float | None], norms: list[float]) -> dict:
        clients = [
            {"client": c, "aggregation_weight": w, "update_norm": n}
            for c, (w, n) in enumerate(zip(fitted, norms, strict=True))
        ]
        nominal = {str(c): 0.25 for c in range(4)}
        return {"clients": clients, "aggregation": {"nominal_weights": nominal}}

    # client 1 converged (update 0): its fitted weight 0.61 is arbitrary
    h = round_([0.25, 0.61, 0.25, 0.25], [0.04, 0.0, 0.05, 0.05])
    assert identifiable_sum(h, 1.36) == pytest.approx(1.0)
    h = round_([0.25, None, 0.25, 0.25], [0.04, 0.0, 0.05, 0.05])
    assert identifiable_sum(h, 0.75) == pytest.approx(1.0)
    # every client moved: a sum of 1.6 stays 1.6 (the planted fault)
    h = round_([0.4] * 4, [0.8, 0.7, 0.8, 0.8])
    assert identifiable_sum(h, 1.6) == pytest.approx(1.6)


def test_the_drift_cosine_limit_scales_with_the_number_of_clients() -> None:
    from fedpipe.observe.doctor.drift import cosine_limit

    assert cosine_limit(10) == pytest.approx(0.5)
    assert cosine_limit(4) == pytest.approx(0.79, abs=0.01)
    assert cosine_limit(2) == pytest.approx(0.8)  # capped
    assert cosine_limit(40) == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("accuracy_after", "severity"), [(0.62, "warning"), (0.3, "error")]
)
def test_one_huge_update_is_an_error_only_when_it_set_the_model_back(
    tmp_path: Path, accuracy_after: float, severity: str
) -> None:
    def round_(k: int, accuracy: float, big: bool) -> dict:
        clients = [
            {"client": c, "n_train": 50, "train_loss": 0.8, "cosine_to_mean": 0.9,
             "update_norm": 6.6 if big and c == 2 else 0.15 + 0.01 * c}
            for c in range(5)
        ]  # fmt: skip
        return {"round": k, "clients": clients, "layers": [],
                "global": {"loss": 1.0, "accuracy": accuracy}}  # fmt: skip

    rows = [(0.4, False), (0.5, False), (0.55, False), (0.6, False)]
    rows += [(accuracy_after, True), (0.63, False)]
    _write_rounds(tmp_path, {}, [round_(k, a, b) for k, (a, b) in enumerate(rows, 1)])
    outlier = _one(diagnose(tmp_path), codes.CLIENT_UPDATE_OUTLIER)
    assert outlier.severity == severity
    assert "round 5: update norm 6.6" in outlier.evidence[0]


# ---------------------------------------------------------------- (i) the inputs


def test_an_unscaled_table_is_named_before_the_learning_rate(run_dir) -> None:
    findings = diagnose(run_dir("table-unscaled"))
    f = findings[0]
    assert f.code == codes.INPUTS_UNSCALED, [g.code for g in findings]
    assert f.severity == "error" and f.side == "data"
    text = _text(f)
    # the widest columns at both ends, and the key to set
    assert "worst area" in f.title and "fractal dimension error" in f.title
    assert "largest: worst area (rms 1048, max |x| 4254)" in text
    assert "preprocess.numeric: standard" in f.fix
    assert "now preprocess.numeric = none" in f.fix
    # the learning rate blew up too, and is ranked below as its consequence
    lr = _one(findings, codes.LEARNING_RATE_TOO_HIGH)
    assert findings.index(lr) > 0
    assert "likely a consequence of inputs-unscaled" in lr.title


def test_the_same_table_standardized_has_no_input_finding(run_dir) -> None:
    found = [f.code for f in diagnose(run_dir("table-standardized"))]
    assert codes.INPUTS_UNSCALED not in found
    assert codes.LEARNING_RATE_TOO_HIGH not in found


@pytest.mark.parametrize(("numeric", "fires"), [("none", True), ("standard", False)])
def test_the_input_finding_reads_preprocess_numeric(
    run_dir, tmp_path: Path, numeric: str, fires: bool
) -> None:
    root = tmp_path / "run"
    shutil.copytree(run_dir("table-unscaled"), root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["preprocess"] = {"numeric": numeric}  # the key may not exist yet
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    found = [f.code for f in diagnose(root)]
    assert (codes.INPUTS_UNSCALED in found) is fires, found


def test_a_model_that_normalizes_its_inputs_gets_no_input_finding(
    run_dir, tmp_path: Path
) -> None:
    # what a real model whose first layer is a Keras Normalization records as
    # its first weight-bearing layer (the test wrote "norm" into the record and
    # read it back, which passed whatever a model records)
    import keras

    from fedpipe.model.zoo import layer_info

    # (adapted on data: its mean and variance are weights; one built with fixed
    # mean= and variance= holds none, is no weight-bearing layer, and the doctor
    # cannot see it: a known gap, the record lists weight-bearing layers only)
    inputs = keras.Input((3,))
    layer = keras.layers.Normalization()
    layer.adapt(np.array([[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]], np.float32))
    model = keras.Model(inputs, keras.layers.Dense(2)(layer(inputs)))
    first = layer_info(model)[0]
    assert first.kind == "norm" and first.trainable == []
    root = tmp_path / "run"
    shutil.copytree(run_dir("table-unscaled"), root)
    for path in (root / layout.HEALTH_METRICS_DIR).glob("round-*.json"):
        health = json.loads(path.read_text())
        health["layers"][0]["kind"] = first.kind
        path.write_text(json.dumps(health))
    assert codes.INPUTS_UNSCALED not in [f.code for f in diagnose(root)]


# ---------------------------------------------------------------- (d) and the work


def test_a_large_client_under_quantity_skew_is_not_an_outlier(run_dir) -> None:
    root = run_dir("quantity-skew")
    sizes, ratios = [], []
    for path in sorted((root / layout.HEALTH_METRICS_DIR).glob("round-*.json")):
        clients = json.loads(path.read_text())["clients"]
        sizes = [c["n_train"] for c in clients]
        norms = [c["update_norm"] for c in clients]
        ratios.append(max(norms) / float(np.median(norms)))
    # the skew is real: the largest client has 50x the rows of the smallest, and
    # its raw update is beyond the outlier ratio (3x the median) in every round
    assert max(sizes) >= 50 * min(sizes)
    assert min(ratios) > 3.0
    found = [f.code for f in diagnose(root)]
    assert codes.CLIENT_UPDATE_OUTLIER not in found, found


def test_a_large_client_boosting_its_update_is_still_an_outlier(run_dir) -> None:
    findings = diagnose(run_dir("quantity-skew-scaled"))
    f = _one(findings, codes.CLIENT_UPDATE_OUTLIER)
    assert "client 0" in f.title and "far larger" in f.title
    assert "local steps" in f.evidence[0]  # judged per unit of its work


# ---------------------------------------------------------------- (e) proximal


def test_a_fedprox_blow_up_names_mu_beside_the_learning_rate(run_dir) -> None:
    findings = diagnose(run_dir("fedprox-mu-100"))
    f = findings[0]
    assert f.code == codes.LEARNING_RATE_TOO_HIGH
    assert f.severity == "error" and 1 in f.rounds
    assert "lr·μ = 5 > 2" in f.title
    assert "lr·μ = 5 > 2: lower train.lr or strategy.proximal_mu" in f.fix
    assert "strategy.proximal_mu 20" in f.fix and "train.lr 0.01" in f.fix


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"strategy": {"name": "fedavg"}}, None),
        ({"strategy": {"name": "fedprox", "proximal_mu": 0.5}},
         ("strategy.proximal_mu", 0.5)),
        ({"strategy": {"name": "fedprox"}}, ("strategy.proximal_mu", 0.01)),
        (
            {"strategy": {"name": "fedavg"},
             "client": {"algorithm": "fedprox", "options": {"proximal_mu": 2.0}}},
            ("client.options.proximal_mu", 2.0),
        ),
        ({"strategy": {"name": "scaffold"}}, None),
    ],
)  # fmt: skip
def test_the_proximal_knob_comes_from_the_client_class_trait(
    tmp_path: Path, params: dict, expected: tuple | None
) -> None:
    from fedpipe.observe.doctor.learning_rate import proximal_term
    from fedpipe.observe.runfiles import load_run

    _write_rounds(tmp_path, params, [_health(1, 0.5, 1.0, ratio=1.0, step=0.3)])
    assert proximal_term(load_run(tmp_path)) == expected
