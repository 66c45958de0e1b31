"""Tests for PathologicalPartitioner: exactly ``classes_per_client`` classes each."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.data.partition import PartitionError, PathologicalPartitioner


def _labels(n: int = 2000, n_classes: int = 10) -> np.ndarray:
    """Balanced, interleaved labels 0, 1, ..., n_classes-1, 0, 1, ..."""
    return np.arange(n) % n_classes


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _classes_held(labels: np.ndarray, shares: list[np.ndarray]) -> list[int]:
    return [len(np.unique(labels[s])) for s in shares]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 10])
def test_every_client_holds_exactly_k_classes(k: int, seed: int) -> None:
    labels = _labels()
    shares = PathologicalPartitioner(classes_per_client=k).partition(
        labels, 10, _rng(seed)
    )
    assert _classes_held(labels, shares) == [k] * 10


@pytest.mark.parametrize("n_clients", [4, 7, 13, 30])
def test_exact_k_with_uneven_classes_and_client_counts(n_clients: int) -> None:
    # class c has 20 * (c + 1) samples, in a shuffled order
    labels = _rng(5).permutation(np.repeat(np.arange(6), 20 * np.arange(1, 7)))
    shares = PathologicalPartitioner(classes_per_client=3).partition(
        labels, n_clients, _rng(1)
    )
    assert _classes_held(labels, shares) == [3] * n_clients
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(len(labels)))


def test_every_class_is_used_and_split_evenly_among_holders() -> None:
    labels = _labels()
    shares = PathologicalPartitioner(classes_per_client=2).partition(
        labels, 10, _rng(0)
    )
    # 20 slots over 10 balanced classes: each class held by 2 clients, 100 each
    assert [len(s) for s in shares] == [200] * 10
    for c in range(10):
        per_client = [int((labels[s] == c).sum()) for s in shares]
        assert sorted(per_client, reverse=True)[:2] == [100, 100]
        assert sum(per_client) == 200


def test_class_sets_differ_between_seeds() -> None:
    labels = _labels()
    sets = [
        [
            tuple(np.unique(labels[s]))
            for s in PathologicalPartitioner(classes_per_client=2).partition(
                labels, 10, _rng(seed)
            )
        ]
        for seed in (0, 1)
    ]
    assert sets[0] != sets[1]


@pytest.mark.parametrize("k", [0, -1, True, 1.5, None])
def test_invalid_classes_per_client_names_key(k: object) -> None:
    with pytest.raises(
        PartitionError,
        match=r"^partition\.classes_per_client: .*; allowed: an integer",
    ):
        PathologicalPartitioner(classes_per_client=k)  # type: ignore[arg-type]


def test_more_classes_per_client_than_classes_names_key_and_bound() -> None:
    p = PathologicalPartitioner(classes_per_client=11)
    with pytest.raises(PartitionError) as info:
        p.partition(_labels(), 10, _rng())
    assert str(info.value) == (
        "partition.classes_per_client=11 exceeds the 10 classes in the data; "
        "use partition.classes_per_client <= 10"
    )


def test_too_few_slots_to_cover_every_class_names_key_and_bound() -> None:
    p = PathologicalPartitioner(classes_per_client=1)
    with pytest.raises(PartitionError) as info:
        p.partition(_labels(), 4, _rng())
    msg = str(info.value)
    assert msg.startswith("partition.classes_per_client=1 x federation.clients=4")
    assert "cannot cover all 10 classes" in msg
    assert "partition.classes_per_client >= 3" in msg


def test_class_smaller_than_its_holders_names_key() -> None:
    labels = np.array([0] * 50 + [1] * 50 + [2])  # class 2 has one sample
    p = PathologicalPartitioner(classes_per_client=2)  # 6 slots: 2 holders each
    with pytest.raises(PartitionError) as info:
        p.partition(labels, 3, _rng())
    assert str(info.value).startswith(
        "partition.classes_per_client=2 cannot be met: class 2 has 1 samples but "
        "2 clients must share it"
    )


def test_min_samples_unmet_by_small_class_names_key() -> None:
    labels = np.array([0] * 190 + [1] * 10)  # feasible by count (<= 100) ...
    p = PathologicalPartitioner(classes_per_client=1, min_samples=50)
    with pytest.raises(PartitionError) as info:  # ... but the class-1 client has 10
        p.partition(labels, 2, _rng())
    msg = str(info.value)
    assert msg.startswith(
        "partition.min_samples=50 cannot be met with partition.classes_per_client=1"
    )
    assert "gets 10 samples (classes [1])" in msg
    assert "partition.min_samples <= 10" in msg
