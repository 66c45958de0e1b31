"""Tests for fedpipe.data.partition.manifest: checks, held-out split, manifest, skew."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedpipe.data.partition import (
    DirichletPartitioner,
    PartitionError,
    build_manifest,
    check_partition,
    label_skew,
    split_heldout,
)

# ---------------------------------------------------------------- helpers


def _labels(n: int = 200, n_classes: int = 4) -> np.ndarray:
    """Balanced, interleaved labels 0, 1, ..., n_classes-1, 0, 1, ..."""
    return np.arange(n) % n_classes


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _manifest(
    labels: np.ndarray,
    shares: list[np.ndarray],
    *,
    seed: int = 0,
    local_test_fraction: float = 0.25,
    heldout_ids: np.ndarray | None = None,
    n_classes: int | None = None,
) -> dict:
    n_classes = int(labels.max()) + 1 if n_classes is None else n_classes
    return build_manifest(
        sample_ids=np.arange(len(labels)),
        labels=labels,
        client_indices=shares,
        heldout_ids=(
            np.array([], dtype=np.int64) if heldout_ids is None else heldout_ids
        ),
        local_test_fraction=local_test_fraction,
        rng=_rng(seed),
        classes=list(range(n_classes)),
        method="test",
        params={"alpha": 1.0},
    )


# ---------------------------------------------------------------- check_partition


def test_check_partition_accepts_valid_partition() -> None:
    check_partition([np.array([0, 2]), np.array([1, 3])], 4, min_samples=2)


def test_check_partition_catches_duplicate() -> None:
    with pytest.raises(PartitionError, match=r"more than once: 2 .*clients \[0, 1\]"):
        check_partition([np.array([0, 2]), np.array([1, 2, 3])], 4, min_samples=0)


def test_check_partition_catches_missing() -> None:
    with pytest.raises(PartitionError, match=r"assigned to no client: 3 "):
        check_partition([np.array([0, 2]), np.array([1])], 4, min_samples=0)


def test_check_partition_catches_out_of_range() -> None:
    with pytest.raises(PartitionError, match=r"out of range \[0, 4\): 4 "):
        check_partition([np.array([0, 1, 2]), np.array([3, 4])], 4, min_samples=0)


def test_check_partition_names_small_client() -> None:
    with pytest.raises(PartitionError) as info:
        check_partition([np.array([0, 1, 2]), np.array([3])], 4, min_samples=2)
    assert str(info.value) == (
        "partition.min_samples=2 violated: client 1 has 1 samples"
    )


# ---------------------------------------------------------------- split_heldout


def test_split_heldout_is_stratified() -> None:
    labels = np.array([0] * 100 + [1] * 50 + [2] * 30)
    train, test = split_heldout(180, test_fraction=0.2, rng=_rng(), labels=labels)
    assert np.bincount(labels[test]).tolist() == [20, 10, 6]
    assert np.bincount(labels[train]).tolist() == [80, 40, 24]


def test_split_heldout_partitions_positions_sorted() -> None:
    train, test = split_heldout(100, test_fraction=0.25, rng=_rng())
    assert (len(train), len(test)) == (75, 25)
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(100))
    assert np.array_equal(train, np.sort(train))
    assert np.array_equal(test, np.sort(test))


def test_split_heldout_same_seed_identical() -> None:
    labels = _labels(180, 3)
    a = split_heldout(180, test_fraction=0.2, rng=_rng(3), labels=labels)
    b = split_heldout(180, test_fraction=0.2, rng=_rng(3), labels=labels)
    assert np.array_equal(a[1], b[1])


def test_split_heldout_different_seed_differs() -> None:
    labels = _labels(180, 3)
    a = split_heldout(180, test_fraction=0.2, rng=_rng(3), labels=labels)
    b = split_heldout(180, test_fraction=0.2, rng=_rng(4), labels=labels)
    assert not np.array_equal(a[1], b[1])


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_split_heldout_rejects_fraction_outside_open_interval(fraction: float) -> None:
    with pytest.raises(PartitionError, match=r"^data\.test_fraction must be in"):
        split_heldout(10, test_fraction=fraction, rng=_rng())


# ---------------------------------------------------------------- build_manifest


def _example_manifest(seed: int = 0) -> tuple[np.ndarray, list[np.ndarray], dict]:
    labels = _labels(60, 3)
    shares = DirichletPartitioner(alpha=1.0, min_samples=2).partition(
        labels, 4, _rng(seed)
    )
    return labels, shares, _manifest(labels, shares, seed=seed)


def test_manifest_has_exact_shape() -> None:
    _, shares, m = _example_manifest()
    assert list(m) == ["method", "params", "classes", "n_clients", "heldout", "clients"]
    assert m["method"] == "test"
    assert m["params"] == {"alpha": 1.0}
    assert m["classes"] == [0, 1, 2]
    assert m["n_clients"] == 4
    assert [c["client"] for c in m["clients"]] == [0, 1, 2, 3]
    keys = ["client", "train", "test", "train_class_counts", "test_class_counts"]
    assert all(list(c) == keys for c in m["clients"])


def test_manifest_train_test_disjoint_and_cover_share() -> None:
    _, shares, m = _example_manifest()
    for share, client in zip(shares, m["clients"], strict=True):
        train, test = set(client["train"]), set(client["test"])
        assert not train & test
        assert train | test == {str(i) for i in share}
        assert len(test) >= 1 and len(train) >= 1


def test_manifest_local_test_size_is_rounded_fraction() -> None:
    labels = _labels(40, 2)
    shares = [np.arange(0, 20), np.arange(20, 40)]
    m = _manifest(labels, shares, local_test_fraction=0.25)
    assert [len(c["test"]) for c in m["clients"]] == [5, 5]
    assert [len(c["train"]) for c in m["clients"]] == [15, 15]


def test_manifest_class_counts_add_up() -> None:
    labels, shares, m = _example_manifest()
    for share, client in zip(shares, m["clients"], strict=True):
        total = np.add(client["train_class_counts"], client["test_class_counts"])
        assert total.tolist() == np.bincount(labels[share], minlength=3).tolist()
        assert sum(client["train_class_counts"]) == len(client["train"])
        assert sum(client["test_class_counts"]) == len(client["test"])


def test_manifest_ids_are_sorted_strings() -> None:
    _, _, m = _example_manifest()
    for client in m["clients"]:
        assert all(isinstance(i, str) for i in client["train"] + client["test"])
        assert client["train"] == sorted(client["train"])
        assert client["test"] == sorted(client["test"])


def test_manifest_round_trips_through_json() -> None:
    _, _, m = _example_manifest()
    assert json.loads(json.dumps(m)) == m


def test_manifest_is_deterministic() -> None:
    assert _example_manifest(5)[2] == _example_manifest(5)[2]


def test_manifest_zero_local_fraction_means_no_local_test() -> None:
    labels = _labels(20, 2)
    shares = [np.arange(0, 10), np.arange(10, 20)]
    m = _manifest(labels, shares, local_test_fraction=0.0)
    assert [c["test"] for c in m["clients"]] == [[], []]
    assert [c["train_class_counts"] for c in m["clients"]] == [[5, 5], [5, 5]]


def test_manifest_two_sample_client_gets_one_train_one_test() -> None:
    labels = _labels(12, 2)
    shares = [np.arange(0, 2), np.arange(2, 12)]
    m = _manifest(labels, shares, local_test_fraction=0.1)
    assert (len(m["clients"][0]["train"]), len(m["clients"][0]["test"])) == (1, 1)


def test_manifest_records_heldout_and_rejects_overlap() -> None:
    labels = _labels(10, 2)
    shares = [np.arange(0, 5), np.arange(5, 10)]
    m = _manifest(labels, shares, heldout_ids=np.array([12, 10, 11]))
    assert m["heldout"] == ["10", "11", "12"]
    with pytest.raises(PartitionError, match="overlap"):
        _manifest(labels, shares, heldout_ids=np.array([3]))


def test_manifest_rejects_incomplete_partition() -> None:
    labels = _labels(10, 2)
    with pytest.raises(PartitionError, match="assigned to no client: 9"):
        _manifest(labels, [np.arange(0, 5), np.arange(5, 9)])


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_manifest_rejects_bad_local_test_fraction(fraction: float) -> None:
    labels = _labels(10, 2)
    with pytest.raises(PartitionError, match="local_test_fraction"):
        _manifest(labels, [np.arange(10)], local_test_fraction=fraction)


def test_manifest_params_numpy_values_become_plain_json() -> None:
    labels = _labels(4, 2)
    m = build_manifest(
        sample_ids=np.arange(4),
        labels=labels,
        client_indices=[np.arange(4)],
        heldout_ids=np.array([], dtype=np.int64),
        local_test_fraction=0.0,
        rng=_rng(),
        classes=[0, 1],
        method="iid",
        params={"min_samples": np.int64(2), "alpha": np.float64(0.5), "t": (1, 2)},
    )
    assert m["params"] == {"alpha": 0.5, "min_samples": 2, "t": [1, 2]}
    assert json.loads(json.dumps(m)) == m


# ---------------------------------------------------------------- label_skew


def _counts_manifest(*train_counts: list[int]) -> dict:
    return {
        "clients": [
            {"train_class_counts": counts, "test_class_counts": [0] * len(counts)}
            for counts in train_counts
        ]
    }


def test_label_skew_zero_when_clients_match_pool() -> None:
    assert label_skew(_counts_manifest([5, 5], [10, 10])) == 0.0


def test_label_skew_of_disjoint_halves_is_half() -> None:
    # pool is (0.5, 0.5); each client is one-hot -> TV 0.5 each.
    assert label_skew(_counts_manifest([10, 0], [0, 10])) == pytest.approx(0.5)


def test_label_skew_skips_empty_clients() -> None:
    m = _counts_manifest([3, 1], [0, 0])
    assert label_skew(m) == 0.0


# ------------------------------------------------- check_partition: min_classes


def test_check_partition_min_classes_names_client_classes_and_key() -> None:
    labels = np.array([0, 1, 0, 0, 2, 1])
    shares = [np.array([0, 1, 4]), np.array([2, 3]), np.array([5])]
    with pytest.raises(PartitionError) as info:
        check_partition(shares, 6, min_samples=1, labels=labels, min_classes=2)
    assert str(info.value) == (
        "partition.min_classes=2 violated: client 1 has 1 distinct classes [0] "
        "in 2 samples"
    )


def test_check_partition_min_classes_met() -> None:
    labels = np.array([0, 1, 0, 1, 2, 2])
    shares = [np.array([0, 1, 4]), np.array([2, 3, 5])]
    check_partition(shares, 6, min_samples=3, labels=labels, min_classes=2)


def test_check_partition_default_min_classes_rejects_empty_client() -> None:
    labels = np.array([0, 1, 1])
    shares = [np.array([0, 1, 2]), np.array([], dtype=np.int64)]
    with pytest.raises(PartitionError, match=r"^partition\.min_classes=1 violated"):
        check_partition(shares, 3, min_samples=0, labels=labels)


def test_check_partition_skips_class_check_without_labels() -> None:
    shares = [np.array([0, 1, 2]), np.array([], dtype=np.int64)]
    check_partition(shares, 3, min_samples=0, min_classes=5)


def test_check_partition_min_classes_zero_accepts_empty_client() -> None:
    labels = np.array([0, 1, 1])
    shares = [np.array([0, 1, 2]), np.array([], dtype=np.int64)]
    check_partition(shares, 3, min_samples=0, labels=labels, min_classes=0)


@pytest.mark.parametrize("min_classes", [-1, True, 1.5])
def test_check_partition_rejects_bad_min_classes(min_classes: object) -> None:
    with pytest.raises(PartitionError, match=r"^partition\.min_classes must be"):
        check_partition(
            [np.arange(3)],
            3,
            min_samples=0,
            labels=np.zeros(3),
            min_classes=min_classes,  # type: ignore[arg-type]
        )


def test_check_partition_rejects_misaligned_labels() -> None:
    with pytest.raises(PartitionError, match=r"length n_samples=3"):
        check_partition([np.arange(3)], 3, min_samples=0, labels=np.zeros(4))


def test_label_skew_of_no_clients_is_zero() -> None:
    assert label_skew({"clients": []}) == 0.0
