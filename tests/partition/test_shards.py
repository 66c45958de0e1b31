"""Tests for ShardsPartitioner: label-sorted shards dealt to clients (FedAvg)."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.data.partition import IidPartitioner, PartitionError, ShardsPartitioner


def _labels(n: int = 2000, n_classes: int = 10) -> np.ndarray:
    """Balanced, interleaved labels 0, 1, ..., n_classes-1, 0, 1, ..."""
    return np.arange(n) % n_classes


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _classes_held(labels: np.ndarray, shares: list[np.ndarray]) -> list[int]:
    return [len(np.unique(labels[s])) for s in shares]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    ("n", "n_clients", "shards_per_client"),
    [(2000, 10, 2), (1990, 10, 2), (2000, 7, 3), (2000, 13, 1), (2000, 20, 2)],
)
def test_client_holds_at_most_two_classes_per_shard(
    n: int, n_clients: int, shards_per_client: int, seed: int
) -> None:
    labels = _labels(n)
    shares = ShardsPartitioner(shards_per_client=shards_per_client).partition(
        labels, n_clients, _rng(seed)
    )
    assert max(_classes_held(labels, shares)) <= 2 * shards_per_client


@pytest.mark.parametrize("seed", range(5))
def test_two_shards_on_ten_balanced_classes_give_far_fewer_than_ten(
    seed: int,
) -> None:
    # 1990 samples: shards of 99/100 straddle class borders, so up to 4 classes
    labels = _labels(1990)
    shards = ShardsPartitioner(shards_per_client=2).partition(labels, 10, _rng(seed))
    iid = IidPartitioner().partition(labels, 10, _rng(seed))
    assert max(_classes_held(labels, shards)) <= 4
    assert _classes_held(labels, iid) == [10] * 10


@pytest.mark.parametrize("n", [2000, 2003, 2009])
def test_client_sizes_differ_by_at_most_one(n: int) -> None:
    shares = ShardsPartitioner(shards_per_client=3).partition(_labels(n), 7, _rng(0))
    sizes = [len(s) for s in shares]
    base = n // 7
    assert sizes == [base + 1] * (n % 7) + [base] * (7 - n % 7)


def test_min_samples_up_to_pool_over_clients_is_always_met() -> None:
    # 10 samples, 2 clients, 3 shards each: shards of 2,2,2,2,1,1 -- a plain
    # random deal can give 6 / 4; the balanced deal always gives 5 / 5
    labels = np.arange(10) % 2
    p = ShardsPartitioner(shards_per_client=3, min_samples=5)
    for seed in range(20):
        assert [len(s) for s in p.partition(labels, 2, _rng(seed))] == [5, 5]


@pytest.mark.parametrize("s", [0, -1, True, 2.0, None])
def test_invalid_shards_per_client_names_key(s: object) -> None:
    with pytest.raises(
        PartitionError,
        match=r"^partition\.shards_per_client: .*; allowed: an integer",
    ):
        ShardsPartitioner(shards_per_client=s)  # type: ignore[arg-type]


def test_more_shards_than_samples_names_key_and_bound() -> None:
    p = ShardsPartitioner(shards_per_client=3)
    with pytest.raises(PartitionError) as info:
        p.partition(_labels(20), 10, _rng())
    assert str(info.value) == (
        "partition.shards_per_client=3 x federation.clients=10 = 30 shards exceeds "
        "the 20 samples (every shard needs one); use partition.shards_per_client <= 2"
    )


def test_more_clients_than_samples_says_fewer_clients() -> None:
    with pytest.raises(PartitionError, match=r"use at most 5 clients$"):
        ShardsPartitioner(shards_per_client=1).partition(_labels(5), 6, _rng())
