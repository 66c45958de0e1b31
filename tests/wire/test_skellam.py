"""Skellam noise, the client's side of distributed DP (fedpipe.wire.skellam):
Sk(mu) = Poisson(mu) - Poisson(mu), variance 2 mu per coordinate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpipe.core.seeds import rng_for
from fedpipe.wire.skellam import (
    client_mu,
    integer_sensitivity,
    skellam_mu,
    skellam_noise,
)

DRAWS = 200_000


def _noise(mu: float, seed: int = 0, size: int = DRAWS) -> np.ndarray:
    return skellam_noise(rng_for(seed, "skellam", 1, 0), size, mu)


@pytest.mark.parametrize("mu", [0.5, 5.0, 80.0])
def test_noise_mean_is_zero(mu: float) -> None:
    noise = _noise(mu)
    # 5 standard errors of the mean, std sqrt(2 mu)
    assert abs(noise.mean()) < 5.0 * math.sqrt(2.0 * mu / DRAWS)


@pytest.mark.parametrize("mu", [0.5, 5.0, 80.0])
def test_noise_variance_is_two_mu(mu: float) -> None:
    noise = _noise(mu)
    # Var(sample var) ~ (2 sigma^4 + kappa_4) / n; Sk's 4th cumulant is 2 mu
    var = 2.0 * mu
    se = math.sqrt((2.0 * var**2 + var) / DRAWS)
    assert abs(noise.var() - var) < 5.0 * se


def test_noise_is_int64_of_the_shape_asked() -> None:
    noise = skellam_noise(np.random.default_rng(3), (4, 5), 2.5)
    assert noise.dtype == np.int64
    assert noise.shape == (4, 5)


def test_noise_is_reproducible_with_a_seeded_rng() -> None:
    assert np.array_equal(_noise(3.0, seed=7, size=50), _noise(3.0, seed=7, size=50))
    assert not np.array_equal(
        _noise(3.0, seed=7, size=50), _noise(3.0, seed=8, size=50)
    )


def test_zero_mu_draws_zeros() -> None:
    assert not _noise(0.0, size=20).any()


def test_sum_of_client_shares_has_the_sums_variance() -> None:
    mu, clients, draws = 12.0, 8, 50_000
    share = client_mu(mu, clients)
    total = sum(
        skellam_noise(rng_for(0, "skellam", 1, c), draws, share) for c in range(clients)
    )
    var = 2.0 * mu
    se = math.sqrt((2.0 * var**2 + var) / draws)
    assert abs(total.var() - var) < 5.0 * se


def test_negative_mu_is_refused() -> None:
    with pytest.raises(ValueError, match="mu"):
        skellam_noise(np.random.default_rng(0), 3, -1.0)


def test_integer_sensitivity_bounds_a_rounded_update() -> None:
    clip, scale, dim = 1.0, 20.0, 64
    l1, l2 = integer_sensitivity(clip, scale, dim)
    rng = np.random.default_rng(0)
    for _ in range(200):
        u = rng.normal(size=dim)
        u *= clip / np.linalg.norm(u)  # at the clip
        x = scale * u
        low = np.floor(x)
        q = low + (rng.random(dim) < x - low)  # stochastic rounding
        assert np.linalg.norm(q) <= l2
        assert np.abs(q).sum() <= l1


def test_integer_sensitivity_values() -> None:
    # l2 = s C + sqrt(d); l1 = min(sqrt(d) l2, l2^2)
    assert integer_sensitivity(1.0, 6.0, 4) == (16.0, 8.0)
    assert integer_sensitivity(0.0, 1.0, 100) == (100.0, 10.0)
    assert integer_sensitivity(0.0, 1.0, 1) == (1.0, 1.0)


@pytest.mark.parametrize("z", [0.3, 1.0, 2.7])
def test_skellam_mu_round_trips_the_multiplier(z: float) -> None:
    _, l2 = integer_sensitivity(1.0, 2.0**10, 10_000)
    assert math.sqrt(2.0 * skellam_mu(z, l2)) == pytest.approx(z * l2, rel=1e-12)


def test_client_mu_splits_the_sums_mu() -> None:
    assert client_mu(30.0, 4) == 7.5
    with pytest.raises(ValueError, match="clients"):
        client_mu(30.0, 0)
