"""Every attack and defense end to end through fedpipe.federation.round.run_round (tiny
MLP, 2 rounds), label flipping through a real Keras client, and the doctor naming the
sign-flip attackers of a planted run from its health records alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_fl import run_federation, runner_for

from fedpipe.client import make_client
from fedpipe.client.base import LocalTraining
from fedpipe.config import layout
from fedpipe.core.jsonio import read_json
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.attacks import ATTACKS, AttackPlan, flipped, make_attack
from fedpipe.federation.build import round_steps
from fedpipe.federation.round import RoundInputs, client_jobs
from fedpipe.model.trainer import run_client
from fedpipe.model.training import ModelSpec, initial_weights
from fedpipe.observe.doctor import codes, diagnose
from fedpipe.strategy import make_strategy

TINY = {"n_samples": 400, "clients": 8, "rounds": 2, "lr": 0.1, "seed": 0}
MALICIOUS = (2, 5)
DEFENSES = ["fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan", "clipping"]


def _plan(name: str, **settings: Any) -> AttackPlan:
    return AttackPlan(make_attack(name, **settings), MALICIOUS, seed=0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A tiny run's directory, made on first use per (attack, strategy)."""
    made: dict[tuple, Path] = {}

    def get(attack: str | None, strategy: str = "fedavg", **more: Any) -> Path:
        key = (attack, strategy, tuple(sorted(more.items())))
        if key not in made:
            root = tmp_path_factory.mktemp(f"{attack}-{strategy}")
            settings = {"num_byzantine": 1} if strategy in DEFENSES[2:5] else {}
            run_federation(
                root,
                **{**TINY, **more},
                strategy=strategy,
                strategy_settings=settings,
                attack=None if attack is None else _plan(attack),
            )
            made[key] = root
        return made[key]

    return get


def _round(root: Path, k: int) -> dict[str, Any]:
    return read_json(root / layout.round_metrics(k))


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_every_attack_runs_and_is_recorded(run, attack: str) -> None:
    clean, attacked = run(None), run(attack)
    for k in (1, 2):
        summary = _round(attacked, k)
        assert summary["malicious"] == list(MALICIOUS)
        health = read_json(attacked / layout.health_metrics(k))
        assert health["malicious"] == list(MALICIOUS)
        assert "malicious" not in _round(clean, k)
        assert "malicious" not in read_json(clean / layout.health_metrics(k))
    # the attack changed the global model
    assert _round(attacked, 2)["global"] != _round(clean, 2)["global"]


@pytest.mark.parametrize("strategy", DEFENSES)
def test_every_defense_runs_under_attack(run, strategy: str) -> None:
    root = run("scaling", strategy)
    summary = _round(root, 2)
    assert summary["malicious"] == list(MALICIOUS)
    assert np.isfinite(summary["global"]["loss"])


def _weight_norm(root: Path, k: int) -> float:
    layers = read_json(root / layout.health_metrics(k))["layers"]
    return float(np.sqrt(sum(layer["weight_norm"] ** 2 for layer in layers)))


def test_clipping_holds_back_a_boosted_update(run) -> None:
    clean = _weight_norm(run(None), 1)
    fedavg = _weight_norm(run("scaling"), 1) - clean
    clipping = _weight_norm(run("scaling", "clipping"), 1) - clean
    assert fedavg > 5 * abs(clipping)


# ---------------------------------------------------------------- label flip


def test_label_flip_trains_a_real_keras_client_on_flipped_labels() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((64, 4, 4, 1), dtype=np.float32)
    y = rng.integers(0, 3, 64).astype(np.int32)
    data = ClientData(0, x[:48], y[:48], x[48:], y[48:])
    by_hand = ClientData(0, x[:48], flipped(y[:48], 3), x[48:], y[48:])
    spec = ModelSpec(
        name="mlp", input_shape=(4, 4, 1), n_classes=3, optimizer="sgd", lr=0.1
    )
    runner = runner_for(spec)

    def trained(client: ClientData, attack: AttackPlan | None) -> list[np.ndarray]:
        weights = initial_weights(spec, 0)
        strategy = make_strategy("fedavg")
        inputs = RoundInputs(
            round=1,
            seed=0,
            spec=spec,
            data=FederatedData(None, x[48:], y[48:], (client,)),  # type: ignore[arg-type]
            global_weights=weights,
            server_state={},
            client_states={},
            strategy=strategy,
            algorithm=make_client("sgd"),
            training=LocalTraining(1, 16, 0.1),
            clients_per_round=1,
            steps=round_steps(attack=attack),
        )
        (job,) = client_jobs(inputs, [0])
        return run_client(job, runner).update.weights

    plan = AttackPlan(make_attack("label_flip_all"), (0,))
    poisoned = trained(data, plan)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(poisoned, trained(by_hand, None), strict=True)
    )
    honest = trained(data, None)
    assert not np.array_equal(poisoned[-1], honest[-1])


# ---------------------------------------------------------------- the doctor


def test_doctor_names_the_sign_flip_attackers(run) -> None:
    root = run("sign_flip")
    findings = diagnose(root)
    assert findings, "no findings"
    f = findings[0]
    assert f.code == codes.CLIENTS_AGAINST_FEDERATION
    assert "clients 2, 5 " in f.title
    assert f.rounds == [1, 2]
    assert "strategy.num_byzantine: 2" in f.fix


def test_doctor_names_no_attacker_in_the_clean_run(run) -> None:
    found = [f.code for f in diagnose(run(None))]
    assert codes.CLIENTS_AGAINST_FEDERATION not in found


# ---------------------------------------------------------------- lineage


def test_lineage_names_the_malicious_clients_of_a_round(run) -> None:
    from fedpipe.observe.lineage.formats import _info_lines
    from fedpipe.observe.lineage.records import stage_info

    info = stage_info(run("sign_flip"), "round@2", lambda path: None)
    assert info["malicious"] == list(MALICIOUS)
    assert "  malicious (planted by attack.*): 2, 5" in _info_lines(info)
    assert "malicious" not in stage_info(run(None), "round@2", lambda path: None)
