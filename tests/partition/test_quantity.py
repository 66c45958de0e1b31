"""Tests for QuantitySkewPartitioner: IID labels, log-normal client sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpipe.data.partition import PartitionError, QuantitySkewPartitioner
from fedpipe.data.partition.quantity import client_sizes


def _labels(n: int = 2000, n_classes: int = 10) -> np.ndarray:
    """Balanced, interleaved labels 0, 1, ..., n_classes-1, 0, 1, ..."""
    return np.arange(n) % n_classes


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _sizes(sigma: float, seed: int, *, min_samples: int = 0) -> np.ndarray:
    p = QuantitySkewPartitioner(quantity_sigma=sigma, min_samples=min_samples)
    return np.array([len(s) for s in p.partition(_labels(), 20, _rng(seed))])


def _cv(sizes: np.ndarray) -> float:
    return float(sizes.std() / sizes.mean())


@pytest.mark.parametrize("seed", range(5))
def test_size_cv_tracks_sigma(seed: int) -> None:
    # 2000 samples, 20 clients; measured over seeds 0..199: sigma 0 -> CV 0.000
    # always; sigma 0.5 -> 0.247..0.906 (median 0.465); sigma 1 -> 0.437..2.377
    # (median 0.940); seed 0 gives 0.000 / 0.405 / 0.802.
    cv0, cv_half, cv1 = (_cv(_sizes(sigma, seed)) for sigma in (0.0, 0.5, 1.0))
    assert cv0 < 0.05
    assert cv1 > 0.4
    assert cv0 < cv_half < cv1  # same seed, same normals: CV grows with sigma


def test_sigma_zero_gives_sizes_differing_by_at_most_one() -> None:
    p = QuantitySkewPartitioner(quantity_sigma=0.0)
    assert [len(s) for s in p.partition(_labels(2003), 10, _rng())] == (
        [201] * 3 + [200] * 7
    )


def test_min_samples_raises_small_clients_and_keeps_the_order() -> None:
    free = _sizes(2.0, 0)
    floored = _sizes(2.0, 0, min_samples=50)
    assert free.min() < 50  # sigma 2 leaves some client tiny ...
    assert floored.min() == 50  # ... min_samples lifts it exactly to the floor
    assert floored.sum() == 2000
    # the ranking by size survives (ties allowed where clients hit the floor)
    assert np.all(np.diff(floored[np.argsort(free, kind="stable")]) >= 0)


def test_labels_stay_iid() -> None:
    # total-variation distance of a client's labels from the balanced pool; over
    # seeds 0..199 the worst client with >= 150 samples stays <= 0.152
    labels = _labels()
    p = QuantitySkewPartitioner(quantity_sigma=1.0)
    large = [s for s in p.partition(labels, 20, _rng(0)) if len(s) >= 150]
    assert large
    for share in large:
        mix = np.bincount(labels[share], minlength=10) / len(share)
        assert 0.5 * np.abs(mix - 0.1).sum() < 0.2


def test_huge_sigma_does_not_overflow() -> None:
    p = QuantitySkewPartitioner(quantity_sigma=1000.0, min_samples=1)
    sizes = [len(s) for s in p.partition(_labels(100), 5, _rng())]
    assert sorted(sizes) == [1, 1, 1, 1, 96]


def test_client_sizes_water_fill() -> None:
    sizes = client_sizes(np.array([1.0, 1.0, 100.0]), 100, 10)
    assert sizes.tolist() == [10, 10, 80]
    sizes = client_sizes(np.array([1.0, 2.0, 3.0, 4.0]), 103, 0)
    assert sizes.sum() == 103 and sizes.tolist() == [10, 21, 31, 41]


@pytest.mark.parametrize("sigma", [-0.1, math.nan, math.inf, True, "1", None])
def test_invalid_sigma_names_key(sigma: object) -> None:
    with pytest.raises(
        PartitionError,
        match=r"^partition\.quantity_sigma: .*; allowed: quantity_sigma >= 0$",
    ):
        QuantitySkewPartitioner(quantity_sigma=sigma)  # type: ignore[arg-type]
