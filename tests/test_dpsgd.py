"""Record-level DP-SGD (``privacy.mechanism: dpsgd``): the per-record clipping and
the noise of the Keras train step, Poisson batches, keyed bits, the accountant
against published DP-SGD settings reproduced with dp_accounting directly, and
each client's epsilon and budget stop in a round."""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from fedpipe.client.base import RecordDP
from fedpipe.config.params import ParamsError, parse_params, round_chain
from fedpipe.federation.privacy.accountant import NeighborRel, dpsgd_epsilon
from fedpipe.model.training import (
    ModelRunner,
    ModelSpec,
    batch_indices,
    initial_weights,
    poisson_batches,
)
from fedpipe.observe.history import final_table, progress_line

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

SPEC = ModelSpec("mlp", (16,), 3, "sgd", 0.1)
KEY = bytes(range(32))


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner(SPEC)


_compiled: dict[int, object] = {}


@functools.cache
def _start() -> tuple[np.ndarray, ...]:
    return tuple(initial_weights(SPEC, 0))


def _private_gradients(runner: ModelRunner) -> object:
    """The runner's DP-SGD gradient, compiled once (eager, vectorized_map
    traces anew at every call)."""
    if id(runner) not in _compiled:
        _compiled[id(runner)] = tf.function(
            runner.private_gradients, reduce_retracing=True
        )
    return _compiled[id(runner)]


def _batch(n: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 16)).astype(np.float32), rng.integers(0, 3, n)


def _grads(
    runner: ModelRunner,
    x: np.ndarray,
    y: np.ndarray,
    *,
    clip: float,
    expected: float,
    noise: list[tf.Tensor] | None = None,
) -> np.ndarray:
    """DP-SGD's gradient of one batch at the initial weights, flattened."""
    runner.model.set_weights(list(_start()))
    zeros = [tf.zeros_like(v) for v in runner.model.trainable_variables]
    grads, _ = _private_gradients(runner)(
        tf.constant(x),
        tf.constant(y),
        zeros if noise is None else noise,
        tf.constant(expected, tf.float32),
        tf.constant(clip, tf.float32),
    )
    return np.concatenate([g.numpy().ravel() for g in grads])


# ---------------------------------------------------------------- the step


def test_each_records_gradient_is_clipped_to_c(runner: ModelRunner) -> None:
    x, y = _batch(8)
    clip = 0.05
    for i in range(8):  # one record alone, expected batch 1: its clipped gradient
        alone = _grads(runner, x[i : i + 1], y[i : i + 1], clip=clip, expected=1.0)
        assert np.linalg.norm(alone) <= clip * (1 + 1e-5)
    unclipped = _grads(runner, x[:1], y[:1], clip=math.inf, expected=1.0)
    assert np.linalg.norm(unclipped) > clip  # so the bound above did something


def test_one_huge_record_moves_the_update_at_most_c_over_b(
    runner: ModelRunner,
) -> None:
    x, y = _batch(8)
    huge, y = x.copy(), y.copy()
    huge[3] *= 1e4
    # a confidently wrong label: the record's own gradient is huge
    runner.model.set_weights(initial_weights(SPEC, 0))
    y[3] = (int(np.argmax(runner.model(huge[3:4]).numpy())) + 1) % 3
    clip, b = 0.5, 8.0
    with_huge = _grads(runner, huge, y, clip=clip, expected=b)
    without = _grads(runner, np.delete(x, 3, 0), np.delete(y, 3), clip=clip, expected=b)
    moved = np.linalg.norm(with_huge - without)
    assert moved <= clip / b * (1 + 1e-5)
    assert moved == pytest.approx(clip / b, rel=1e-4)  # it was clipped, not dropped
    # without clipping the same record moves it by far more
    raw = _grads(runner, huge, y, clip=math.inf, expected=b)
    raw_without = _grads(
        runner, np.delete(x, 3, 0), np.delete(y, 3), clip=math.inf, expected=b
    )
    assert np.linalg.norm(raw - raw_without) > 100 * clip / b


def test_noise_std_is_sigma_c_over_b(runner: ModelRunner) -> None:
    x, y = _batch(8)
    sigma, clip, b = 1.3, 0.7, 8.0
    clean = _grads(runner, x, y, clip=clip, expected=b)
    rng = np.random.default_rng(5)
    std = sigma * clip
    draws = np.stack(
        [
            _grads(runner, x, y, clip=clip, expected=b, noise=runner.noise(rng, std))
            - clean
            for _ in range(300)
        ]
    )
    # 300 draws x ~650 coordinates: the std is known to well under 1%
    assert draws.std() == pytest.approx(sigma * clip / b, rel=0.01)
    assert abs(draws.mean()) < 0.01 * sigma * clip / b


def test_no_noise_and_no_clip_is_plain_sgd_on_the_same_batch(
    runner: ModelRunner,
) -> None:
    """sigma 0 and C = inf: the same step as plain SGD on the same batch, to
    1e-6 (not bitwise: the per-record gradients are summed in another order
    than the batched gradient's reduction)."""
    x, y = _batch(16, seed=3)
    start = initial_weights(SPEC, 0)
    runner._reset(start, 0)
    runner._step(prox=False, offset=False)(tf.constant(x), tf.constant(y))
    plain = [np.array(w) for w in runner.model.get_weights()]
    runner._reset(start, 0)
    zeros = [tf.zeros_like(v) for v in runner.model.trainable_variables]
    runner._dp_step(prox=False, offset=False)(
        tf.constant(x), tf.constant(y), zeros,
        tf.constant(16.0), tf.constant(math.inf),
    )  # fmt: skip
    private = [np.array(w) for w in runner.model.get_weights()]
    moved = max(float(np.abs(p - s).max()) for p, s in zip(plain, start, strict=True))
    assert moved > 1e-3  # the step did something
    for p, q in zip(plain, private, strict=True):
        np.testing.assert_allclose(p, q, rtol=0, atol=1e-6)


def test_poisson_batches_sample_each_record_with_rate_b_over_n() -> None:
    rng = np.random.default_rng(0)
    plan = poisson_batches(400, epochs=3, batch_size=32, rng=rng)
    assert len(plan) == len(batch_indices(400, epochs=3, batch_size=32, seed=0))
    sizes = np.array([len(rows) for rows in plan])
    assert sizes.mean() == pytest.approx(32, rel=0.1) and sizes.std() > 0
    capped = poisson_batches(400, epochs=3, batch_size=32, rng=rng, max_steps=5)
    assert len(capped) == 5


def test_same_key_same_bits_other_key_other_noise(runner: ModelRunner) -> None:
    x, y = _batch(64, seed=1)
    start = initial_weights(SPEC, 0)

    def fit(key: bytes | None, client: int = 0) -> list[np.ndarray]:
        dp = RecordDP(clip_norm=1.0, noise_multiplier=1.0, key=key)
        return runner.fit(
            start, x, y, epochs=1, batch_size=16, seed=7, dp=dp, client=client
        )

    a, again = fit(KEY), fit(KEY)
    assert all(np.array_equal(p, q) for p, q in zip(a, again, strict=True))
    other = fit(bytes(32))
    assert not all(np.array_equal(p, q) for p, q in zip(a, other, strict=True))
    # the client's id is in the derivation: another client draws other noise
    assert not all(np.array_equal(p, q) for p, q in zip(a, fit(KEY, 1), strict=True))
    # the debug mode draws from the seed alone
    debug, debug_again = fit(None), fit(None)
    assert all(np.array_equal(p, q) for p, q in zip(debug, debug_again, strict=True))


# ---------------------------------------------------------------- the accountant


def test_epsilon_reproduces_tf_privacy_mnist_tutorial_settings() -> None:
    """TensorFlow Privacy's MNIST DP-SGD tutorial (tutorials/README.md): N =
    60000, batch 256, sigma 1.1, 60 epochs, delta 1e-5 -> epsilon 3.01 (RDP,
    the classic conversion). fedpipe charges a client epochs x ceil(N / batch)
    steps of PoissonSampled(q = 256/60000, Gaussian(1.1)); the same event
    composed by dp_accounting's PLD accountant, called here directly, gives the
    same number, below dp_accounting's RDP bound and the published 3.01."""
    n, batch, sigma, delta = 60000, 256, 1.1, 1e-5
    steps = 60 * math.ceil(n / batch)
    event = dp_event.PoissonSampledDpEvent(batch / n, dp_event.GaussianDpEvent(sigma))
    pld = PLDAccountant(neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE)
    pld.compose(event, steps)
    direct = pld.get_epsilon(delta)
    rdp = RdpAccountant(neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE)
    rdp.compose(event, steps)
    assert dpsgd_epsilon(batch / n, sigma, steps, delta) == pytest.approx(
        direct, abs=1e-6
    )
    assert direct < rdp.get_epsilon(delta) <= 3.01
    assert 2.3 < direct < 2.45


def test_no_steps_no_loss_no_noise_no_bound() -> None:
    assert dpsgd_epsilon(0.1, 1.0, 0, 1e-5) == 0.0
    assert dpsgd_epsilon(0.1, 0.0, 3, 1e-5) == math.inf


# ---------------------------------------------------------------- the round


def _client_epsilon(n: int, batch: int, sigma: float, steps: int) -> float:
    event = dp_event.PoissonSampledDpEvent(
        min(1.0, batch / n), dp_event.GaussianDpEvent(sigma)
    )
    pld = PLDAccountant(neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE)
    pld.compose(event, steps)
    return pld.get_epsilon(1e-5)


@pytest.mark.parametrize("personalization", [None, {"method": "fedper"}])
def test_every_client_reports_its_own_epsilon(
    tmp_path: Path, personalization: dict | None
) -> None:
    summaries = run_federation(
        tmp_path,
        n_samples=400,
        clients=3,
        rounds=2,
        partition="quantity",
        privacy={"mechanism": "dpsgd", "noise_multiplier": 1.2, "clip_norm": 1.0},
        personalization=personalization,
    )
    last = summaries[-1]["privacy"]
    assert last["level"] == "record" and last["accountant"] == "pld-poisson-records"
    eps = {int(c): e for c, e in last["epsilon_clients"].items()}
    steps = {int(c): s for c, s in last["steps_clients"].items()}
    assert sorted(eps) == [0, 1, 2]
    for c, s in steps.items():
        first = summaries[0]["privacy"]["steps_clients"][str(c)]
        assert s == 2 * first  # the same steps each round, kept in its books
        n = _n_train(tmp_path, c)
        assert first == math.ceil(n / 32)
        assert eps[c] == pytest.approx(_client_epsilon(n, 32, 1.2, s), abs=1e-5)
    assert last["epsilon"] == max(eps.values())
    assert progress_line(summaries[-1], 2, 1.0).endswith(
        f"ε {last['epsilon']:.3g} (records, worst client)"
    )
    assert "DP-SGD, record level" in final_table(summaries[-1])


def _n_train(root: Path, client: int) -> int:
    manifest = json.loads((root / "data/partition/manifest.json").read_text())
    entry = manifest["clients"][client]
    return len(entry["train"])


def test_target_epsilon_stops_the_clients_over_budget(tmp_path: Path) -> None:
    """Clients of different sizes spend at different rates; a target between
    them stops the faster spender (it trains no more, recorded) while the
    others go on."""
    privacy = {"mechanism": "dpsgd", "noise_multiplier": 1.2, "clip_norm": 1.0}
    (tmp_path / "free").mkdir()
    (tmp_path / "capped").mkdir()
    free = run_federation(
        tmp_path / "free", n_samples=400, clients=3, rounds=2,
        partition="quantity", privacy=privacy,
    )  # fmt: skip
    eps = free[-1]["privacy"]["epsilon_clients"]
    low, high = sorted(eps.values())[0], sorted(eps.values())[-1]
    assert low < high
    target = (low + high) / 2
    capped = run_federation(
        tmp_path / "capped", n_samples=400, clients=3, rounds=2,
        partition="quantity", privacy={**privacy, "target_epsilon": target},
    )  # fmt: skip
    assert len(capped) == 2
    stopped = capped[-1]["privacy"]["stopped"]
    assert stopped and all(eps[str(c)] > target for c in stopped)
    assert all(
        e <= target + 1e-9 for e in capped[-1]["privacy"]["epsilon_clients"].values()
    )
    assert "privacy budget" in capped[-1]["clients_excluded"][str(stopped[0])]


# ---------------------------------------------------------------- bad settings


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"privacy": {"adaptive_clip": True}}, "privacy.adaptive_clip"),
        ({"train": {"cohort_size": 4}}, "train.cohort_size"),
        ({"personalization": {"method": "finetune"}}, "personalization.method"),
        (
            {"personalization": {"method": "fedbn"},
             "model": {"name": "cnn", "batch_norm": True}},
            "BatchNormalization",
        ),  # fmt: skip
    ],
)
def test_combinations_dpsgd_refuses_name_the_keys(extra: dict, named: str) -> None:
    raw: dict = {"round_chain": round_chain(10)}
    for section, values in extra.items():
        raw[section] = dict(values)
    raw.setdefault("privacy", {})["mechanism"] = "dpsgd"
    with pytest.raises(ParamsError) as refused:
        parse_params(raw)
    assert named in str(refused.value) and "dpsgd" in str(refused.value)


def test_a_target_every_client_would_pass_stops_the_run(tmp_path: Path) -> None:
    privacy = {
        "mechanism": "dpsgd",
        "noise_multiplier": 1.2,
        "clip_norm": 1.0,
        "target_epsilon": 0.01,
    }
    summaries = run_federation(
        tmp_path, n_samples=300, clients=3, rounds=2, privacy=privacy
    )
    assert summaries == []  # round 1 stopped before any client trained
    oracle = (tmp_path / ".fedpipe/oracle/round-1.json").read_text()
    stopped = json.loads(oracle)["health"]["stopped"]
    assert "round 1 stopped: 0 usable update(s)" in stopped
    assert stopped.count("privacy budget") == 3
    assert "privacy.target_epsilon=0.01" in stopped


def test_an_empty_poisson_batch_steps_by_the_noise_alone(runner: ModelRunner) -> None:
    step = runner._dp_step(prox=False, offset=False)
    rng = np.random.default_rng(0)
    runner._reset(list(_start()), 0)
    for n in (5, 0, 3, 0):  # the compiled step generalizes over batch sizes
        x, y = _batch(n, seed=n) if n else (np.zeros((0, 16), np.float32), [])
        noise = runner.noise(rng, 1.0)
        before = [np.array(w) for w in runner.model.get_weights()]
        loss = step(
            tf.constant(x), tf.constant(np.asarray(y, np.int64)), noise,
            tf.constant(4.0), tf.constant(1.0),
        )  # fmt: skip
        if n:
            continue
        assert math.isnan(float(loss))
        after = runner.model.get_weights()
        for a, b, z in zip(after, before, noise, strict=True):  # SGD, lr 0.1
            np.testing.assert_allclose(a - b, -0.1 * z.numpy() / 4.0, atol=1e-6)


def test_ditto_personal_fit_is_dp_sgd_and_charged(tmp_path: Path) -> None:
    summaries = run_federation(
        tmp_path,
        n_samples=300,
        clients=3,
        rounds=1,
        privacy={"mechanism": "dpsgd", "noise_multiplier": 1.2, "clip_norm": 1.0},
        personalization={"method": "ditto"},
    )
    privacy = summaries[-1]["privacy"]
    for c, steps in privacy["steps_clients"].items():
        n = _n_train(tmp_path, int(c))
        assert steps == 2 * math.ceil(n / 32)  # the global fit and the personal one
        assert privacy["epsilon_clients"][c] == pytest.approx(
            _client_epsilon(n, 32, 1.2, steps), abs=1e-5
        )
