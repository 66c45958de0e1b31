"""Each attack changes exactly the malicious clients' updates, as specified."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedpipe.data.splits import ClientData
from fedpipe.federation.attacks import (
    ATTACKS,
    AttackPlan,
    FlippedLabels,
    alie_z,
    choose_malicious,
    make_attack,
    malicious_count,
)
from fedpipe.strategy import ClientUpdate

SHAPES = [(3, 2), (4,)]
MALICIOUS = (1, 3)


def _global() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def _updates(start: list[np.ndarray]) -> list[ClientUpdate]:
    rng = np.random.default_rng(1)
    return [
        ClientUpdate(c, [(w + rng.normal(0, 0.1, w.shape)).astype(w.dtype)
                         for w in start], 10)
        for c in range(5)
    ]  # fmt: skip


def _tampered(name: str, round_: int = 1, **settings) -> tuple:
    start = _global()
    honest = _updates(start)
    plan = AttackPlan(make_attack(name, **settings), MALICIOUS, from_round=1, seed=7)
    return start, honest, plan.tampered(round_, start, honest)


def _delta(u: ClientUpdate, start: list[np.ndarray]) -> list[np.ndarray]:
    return [
        np.asarray(w, np.float64) - s for w, s in zip(u.weights, start, strict=True)
    ]


def _benign(honest: list[ClientUpdate], start) -> list[list[np.ndarray]]:
    return [_delta(u, start) for u in honest if u.client not in MALICIOUS]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_benign_updates_are_passed_through_untouched(name: str) -> None:
    _, honest, sent = _tampered(name)
    for before, after in zip(honest, sent, strict=True):
        if before.client not in MALICIOUS:
            assert after is before
        else:
            assert after.n_samples == before.n_samples
            assert [w.dtype for w in after.weights] == [np.float32] * 2


@pytest.mark.parametrize(
    "name", sorted(set(ATTACKS) - {"label_flip_all", "label_flip_targeted"})
)
def test_model_attacks_change_every_malicious_update(name: str) -> None:
    _, honest, sent = _tampered(name)
    for before, after in zip(honest, sent, strict=True):
        if before.client in MALICIOUS:
            assert not np.allclose(before.weights[0], after.weights[0])


def test_nothing_changes_before_from_round() -> None:
    start = _global()
    honest = _updates(start)
    plan = AttackPlan(make_attack("sign_flip"), MALICIOUS, from_round=3)
    assert all(
        a is b for a, b in zip(plan.tampered(2, start, honest), honest, strict=True)
    )
    assert plan.attackers(2, range(5)) == [] and plan.attackers(3, range(5)) == [1, 3]


def test_sign_flip_sends_minus_scale_times_the_update() -> None:
    start, honest, sent = _tampered("sign_flip", scale=2.0)
    for c in MALICIOUS:
        for d, s in zip(_delta(sent[c], start), _delta(honest[c], start), strict=True):
            np.testing.assert_allclose(d, -2.0 * s, rtol=1e-5, atol=1e-6)


def test_scaling_boosts_by_the_number_of_updates_by_default() -> None:
    start, honest, sent = _tampered("scaling")
    for c in MALICIOUS:
        for d, s in zip(_delta(sent[c], start), _delta(honest[c], start), strict=True):
            np.testing.assert_allclose(d, 5.0 * s, rtol=1e-5, atol=1e-6)
    start, honest, sent = _tampered("scaling", scale=3.0)
    np.testing.assert_allclose(
        _delta(sent[1], start)[1], 3.0 * _delta(honest[1], start)[1], rtol=1e-5
    )


def test_gaussian_is_seeded_noise_independent_of_training() -> None:
    start, honest, sent = _tampered("gaussian", noise_std=0.5)
    again = AttackPlan(make_attack("gaussian", noise_std=0.5), MALICIOUS, seed=7)
    same = again.tampered(1, start, _updates(start))
    noise = np.concatenate([d.ravel() for d in _delta(sent[1], start)])
    assert 0.2 < noise.std() < 0.9
    assert all(
        np.array_equal(a, b)
        for a, b in zip(sent[1].weights, same[1].weights, strict=True)
    )
    assert not np.allclose(sent[1].weights[0], sent[3].weights[0])  # per client
    other_round = again.tampered(2, start, _updates(start))
    assert not np.allclose(sent[1].weights[0], other_round[1].weights[0])


def test_alie_sends_mean_minus_z_std_of_the_benign_updates() -> None:
    start, honest, sent = _tampered("alie")
    benign = _benign(honest, start)
    z = alie_z(5, 2)
    for layer in range(2):
        stacked = np.stack([b[layer] for b in benign])
        want = stacked.mean(axis=0) - z * stacked.std(axis=0)
        for c in MALICIOUS:
            np.testing.assert_allclose(_delta(sent[c], start)[layer], want, atol=1e-6)
    _, _, given = _tampered("alie", z=1.5)
    assert not np.allclose(given[1].weights[0], sent[1].weights[0])


def test_alie_z_as_the_paper() -> None:
    # n = 10, f = 2: s = floor(6) - 2 = 4; z = Phi^-1(6 / 10) = 0.2533
    assert alie_z(10, 2) == pytest.approx(0.253347, abs=1e-6)
    # n = 50, f = 10: s = 16; Phi^-1(34 / 50) = 0.4677
    assert alie_z(50, 10) == pytest.approx(0.467699, abs=1e-6)
    assert alie_z(10, 1) == 0.0  # s = 5: Phi^-1(0.5)


def test_ipm_sends_minus_epsilon_times_the_benign_mean() -> None:
    start, honest, sent = _tampered("ipm", epsilon=0.1)
    benign = _benign(honest, start)
    for layer in range(2):
        want = -0.1 * np.mean([b[layer] for b in benign], axis=0)
        for c in MALICIOUS:
            np.testing.assert_allclose(_delta(sent[c], start)[layer], want, atol=1e-6)


def test_label_flip_poisons_only_the_malicious_training_labels() -> None:
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 2, 3, 9, 5], dtype=np.int32)
    data = ClientData(1, x, y, x[:2], y[:2])
    plan = AttackPlan(make_attack("label_flip_all"), MALICIOUS, from_round=2)
    assert plan.poisoned(1, data, 10) is data  # before from_round
    assert plan.poisoned(2, ClientData(0, x, y, x, y), 10).y_train is y  # benign
    flipped = plan.poisoned(2, data, 10)
    assert flipped.y_train.tolist() == [9, 8, 7, 6, 0, 4]
    assert flipped.y_train.dtype == np.int32
    assert flipped.y_test is data.y_test
    again = pickle.loads(pickle.dumps(flipped))
    assert isinstance(again, FlippedLabels)
    assert again.y_train.tolist() == [9, 8, 7, 6, 0, 4]
    assert again.x_train.tolist() == x.tolist()


def test_malicious_clients_are_seeded_and_fixed() -> None:
    a = choose_malicious(n_clients=20, seed=3, share=0.2)
    assert len(a) == 4 and list(a) == sorted(a)
    assert a == choose_malicious(n_clients=20, seed=3, share=0.2)
    assert a != choose_malicious(n_clients=20, seed=4, share=0.2)
    assert choose_malicious(n_clients=20, seed=3, clients=[7, 2, 7]) == (2, 7)
    assert [malicious_count(s, 10) for s in (0.0, 0.01, 0.25, 0.5, 1.0)] == [
        0,
        1,
        3,
        5,
        10,
    ]


@pytest.mark.parametrize(
    ("name", "settings", "key"),
    [("nope", {}, "attack.name"), ("sign_flip", {"scale": 0.0}, "attack.scale"),
     ("scaling", {"scale": -2.0}, "attack.scale"),
     ("gaussian", {"noise_std": 0.0}, "attack.noise_std"),
     ("ipm", {"epsilon": -1.0}, "attack.epsilon")],
)  # fmt: skip
def test_bad_settings_name_the_key(name: str, settings: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        make_attack(name, **settings)


def test_arrival_order_does_not_change_what_is_forged() -> None:
    start = _global()
    honest = _updates(start)
    plan = AttackPlan(make_attack("gaussian"), MALICIOUS, seed=7)
    straight = {u.client: u for u in plan.tampered(1, start, honest)}
    reversed_ = {u.client: u for u in plan.tampered(1, start, honest[::-1])}
    for c in MALICIOUS:
        assert all(
            np.array_equal(a, b)
            for a, b in zip(straight[c].weights, reversed_[c].weights, strict=True)
        )
