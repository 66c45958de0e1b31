"""Tests for NaturalIdPartitioner: one client per distinct group key."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.data.partition import NaturalIdPartitioner, PartitionError


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# writers of unequal size in a scrambled order: b 4, a 3, c 2 samples
GROUPS = np.array(["b", "a", "c", "b", "a", "b", "c", "a", "b"])
LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])


def test_clients_equal_the_groups_in_sorted_key_order() -> None:
    shares = NaturalIdPartitioner().partition(LABELS, 3, _rng(), groups=GROUPS)
    keys = NaturalIdPartitioner.client_keys(GROUPS)
    assert keys.tolist() == ["a", "b", "c"]
    for key, share in zip(keys, shares, strict=True):
        assert np.array_equal(share, np.flatnonzero(GROUPS == key))
        assert share.dtype == np.int64


def test_integer_groups_sort_numerically() -> None:
    groups = np.array([10, 2, 10, 33, 2])
    shares = NaturalIdPartitioner().partition(np.zeros(5), 3, _rng(), groups=groups)
    assert [s.tolist() for s in shares] == [[1, 4], [0, 2], [3]]


def test_uses_no_randomness() -> None:
    rng = _rng(5)
    NaturalIdPartitioner().partition(LABELS, 3, rng, groups=GROUPS)
    assert rng.random() == _rng(5).random()  # generator not advanced


def test_missing_groups_names_client_column() -> None:
    with pytest.raises(PartitionError) as info:
        NaturalIdPartitioner().partition(LABELS, 3, _rng())
    assert str(info.value).startswith(
        "partition.method=natural needs each sample's client: set data.client_column"
    )


def test_client_count_mismatch_says_how_many_groups_to_set() -> None:
    with pytest.raises(PartitionError) as info:
        NaturalIdPartitioner().partition(LABELS, 5, _rng(), groups=GROUPS)
    assert str(info.value) == (
        "federation.clients=5 does not match the 3 distinct groups in "
        "data.client_column; partition.method=natural makes one client per "
        "group: set federation.clients to 3"
    )


def test_misaligned_groups_rejected() -> None:
    with pytest.raises(PartitionError, match=r"one key per sample \(9\)"):
        NaturalIdPartitioner().partition(LABELS, 3, _rng(), groups=GROUPS[:-1])


@pytest.mark.parametrize(
    "groups",
    [
        np.array([1.0, np.nan, 2.0]),
        np.array(["a", None, "b"], dtype=object),
        np.array([1, np.nan, 2], dtype=object),
    ],
)
def test_missing_group_values_rejected(groups: np.ndarray) -> None:
    with pytest.raises(
        PartitionError, match=r"has 1 missing values \(first at position 1\)"
    ):
        NaturalIdPartitioner().partition(np.zeros(3), 2, _rng(), groups=groups)


def test_unsortable_group_keys_rejected() -> None:
    groups = np.array(["a", 1, "b"], dtype=object)
    with pytest.raises(PartitionError, match="cannot be sorted"):
        NaturalIdPartitioner().partition(np.zeros(3), 3, _rng(), groups=groups)


def test_group_below_min_samples_names_client_group_and_key() -> None:
    p = NaturalIdPartitioner(min_samples=3)  # 3 <= 9 // 3: feasible by count
    with pytest.raises(PartitionError) as info:
        p.partition(LABELS, 3, _rng(), groups=GROUPS)
    assert str(info.value) == (
        "partition.min_samples=3 cannot be met with partition.method=natural: "
        "client 2 (group 'c') has 2 samples; use partition.min_samples <= 2"
    )
