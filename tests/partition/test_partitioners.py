"""Registry, make_partitioner and the conformance suite over every partitioner.

Method-specific behaviour lives in ``test_<method>.py``; IID and Dirichlet
specifics stay here.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from fedpipe.data.partition import (
    PARTITIONERS,
    ContinuousPartitioner,
    DirichletPartitioner,
    IidPartitioner,
    NaturalIdPartitioner,
    PartitionError,
    PathologicalPartitioner,
    QuantitySkewPartitioner,
    ShardsPartitioner,
    build_manifest,
    check_partition,
    label_skew,
    make_partitioner,
)

# ---------------------------------------------------------------- helpers

SETTINGS: dict[str, dict[str, object]] = {
    "continuous": {"strictness": 0.5},
    "dirichlet": {"alpha": 1.0},
    "iid": {},
    "natural": {},
    "pathological": {"classes_per_client": 2},
    "quantity": {"quantity_sigma": 1.0},
    "shards": {"shards_per_client": 2},
}
"""Conformance settings per method; every registered method must appear here."""

EVERY_SETTING: dict[str, object] = {
    "alpha": 0.5,
    "min_samples": 1,
    "classes_per_client": 2,
    "shards_per_client": 2,
    "quantity_sigma": 0.5,
    "strictness": 0.5,
    "continuous_by": "mean_intensity",
    "natural_mapping": None,
    "natural_level": None,
    "min_classes": 1,
    "local_test_fraction": 0.2,
    "a_key_added_later": "ignored",
}
"""Every ``partition.*`` key at once, as partition_table passes them."""

ALL = sorted(PARTITIONERS)
SEEDED = [name for name in ALL if name != "natural"]  # natural uses no randomness


def _labels(n: int = 200, n_classes: int = 4) -> np.ndarray:
    """Balanced, interleaved labels 0, 1, ..., n_classes-1, 0, 1, ..."""
    return np.arange(n) % n_classes


def _groups(n: int, n_clients: int) -> np.ndarray:
    """String group keys ``g00 ..`` in contiguous equal blocks (natural clients)."""
    return np.array([f"g{k:02d}" for k in np.arange(n) * n_clients // n])


def _inputs(name: str, n: int, n_clients: int) -> dict[str, np.ndarray]:
    """What ``partition`` gets beside the labels: ``groups`` for every method,
    and ``values`` (one real property per sample) for those that read inputs."""
    out = {"groups": _groups(n, n_clients)}
    if PARTITIONERS[name].reads_inputs:
        out["values"] = np.sin(np.arange(n) * 1.3)
    return out


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _partition(
    name: str,
    labels: np.ndarray,
    n_clients: int,
    seed: int = 0,
    *,
    min_samples: int = 0,
    **overrides: object,
) -> list[np.ndarray]:
    """Partition with the conformance settings; every method gets ``groups``
    (and ``values``, if it reads inputs)."""
    settings = {**SETTINGS[name], **overrides}
    partitioner = make_partitioner(name, min_samples=min_samples, **settings)
    return partitioner.partition(
        labels, n_clients, _rng(seed), **_inputs(name, len(labels), n_clients)
    )


def _skew(method: str, alpha: float, seed: int = 0) -> float:
    labels = _labels(2000, 10)
    shares = make_partitioner(method, alpha=alpha, min_samples=0).partition(
        labels, 10, _rng(seed)
    )
    manifest = build_manifest(
        sample_ids=np.arange(len(labels)),
        labels=labels,
        client_indices=shares,
        heldout_ids=np.array([], dtype=np.int64),
        local_test_fraction=0.2,
        rng=_rng(seed),
        classes=list(range(10)),
        method=method,
        params={"alpha": alpha},
    )
    return label_skew(manifest)


# ---------------------------------------------------------------- registry


def test_registry_holds_every_method_keyed_by_name() -> None:
    assert PARTITIONERS == {
        "continuous": ContinuousPartitioner,
        "dirichlet": DirichletPartitioner,
        "iid": IidPartitioner,
        "natural": NaturalIdPartitioner,
        "pathological": PathologicalPartitioner,
        "quantity": QuantitySkewPartitioner,
        "shards": ShardsPartitioner,
    }
    assert all(cls.name == key for key, cls in PARTITIONERS.items())


def test_conformance_settings_cover_every_registered_method() -> None:
    # a newly registered partitioner must be added to SETTINGS to be checked
    assert sorted(SETTINGS) == ALL


@pytest.mark.parametrize("name", ALL)
def test_declared_settings_are_constructor_keywords(name: str) -> None:
    cls = PARTITIONERS[name]
    params = inspect.signature(cls).parameters
    assert "min_samples" in cls.settings
    for key in cls.settings:
        assert params[key].kind is inspect.Parameter.KEYWORD_ONLY


def test_make_partitioner_builds_configured_dirichlet() -> None:
    p = make_partitioner("dirichlet", alpha=0.5, min_samples=3)
    assert isinstance(p, DirichletPartitioner)
    assert (p.alpha, p.min_samples, p.max_tries) == (0.5, 3, 100)


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        ("iid", {"min_samples": 1}),
        ("dirichlet", {"alpha": 0.5, "min_samples": 1}),
        ("pathological", {"classes_per_client": 2, "min_samples": 1}),
        ("shards", {"shards_per_client": 2, "min_samples": 1}),
        ("quantity", {"quantity_sigma": 0.5, "min_samples": 1}),
        (
            "natural",
            {"min_samples": 1, "natural_mapping": None, "natural_level": None},
        ),
        (
            "continuous",
            {"strictness": 0.5, "continuous_by": "mean_intensity", "min_samples": 1},
        ),
    ],
)
def test_make_partitioner_takes_its_keys_and_ignores_the_rest(
    name: str, attrs: dict[str, object]
) -> None:
    p = make_partitioner(name, **EVERY_SETTING)
    assert type(p) is PARTITIONERS[name]
    assert {key: getattr(p, key) for key in attrs} == attrs
    assert set(type(p).settings) == set(attrs)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("dirichlet", "alpha"),
        ("pathological", "classes_per_client"),
        ("shards", "shards_per_client"),
        ("quantity", "quantity_sigma"),
    ],
)
def test_missing_required_setting_names_key_and_method(name: str, key: str) -> None:
    settings = {k: v for k, v in EVERY_SETTING.items() if k != key}
    with pytest.raises(PartitionError) as info:
        make_partitioner(name, **settings)
    assert str(info.value) == f"partition.{key} must be set for partition.method={name}"


@pytest.mark.parametrize(
    ("name", "key"),
    [("pathological", "classes_per_client"), ("quantity", "quantity_sigma")],
)
def test_setting_left_none_counts_as_unset(name: str, key: str) -> None:
    with pytest.raises(PartitionError, match=rf"^partition\.{key} must be set for"):
        make_partitioner(name, **{**EVERY_SETTING, key: None})
    assert make_partitioner("iid", min_samples=None).min_samples == 0


@pytest.mark.parametrize("name", ["iid", "pathological", "shards", "quantity"])
def test_min_samples_defaults_to_zero(name: str) -> None:
    settings = {k: v for k, v in EVERY_SETTING.items() if k != "min_samples"}
    assert make_partitioner(name, **settings).min_samples == 0


def test_unknown_method_names_key_and_allowed_values() -> None:
    with pytest.raises(PartitionError) as info:
        make_partitioner("x", alpha=1.0, min_samples=0)
    assert str(info.value) == (
        "partition.method: unknown 'x'; allowed: continuous, dirichlet, iid, natural, "
        "pathological, quantity, shards"
    )


def test_unhashable_method_is_unknown_not_type_error() -> None:
    with pytest.raises(
        PartitionError,
        match=r"^partition\.method: unknown",
    ):
        make_partitioner(["iid"])  # type: ignore[arg-type]


@pytest.mark.parametrize("alpha", [0, 0.0, -1.0])
def test_nonpositive_alpha_names_key(alpha: float) -> None:
    with pytest.raises(
        PartitionError,
        match=r"^partition\.alpha: .* allowed: alpha > 0$",
    ):
        make_partitioner("dirichlet", alpha=alpha, min_samples=0)


@pytest.mark.parametrize("name", ALL)
def test_negative_min_samples_names_key(name: str) -> None:
    with pytest.raises(
        PartitionError,
        match=r"^partition\.min_samples: .*; allowed: an integer min_samples >= 0$",
    ):
        make_partitioner(name, **{**SETTINGS[name], "min_samples": -1})


# ------------------------------------------------- conformance (every partitioner)


@pytest.mark.parametrize("name", ALL)
def test_every_sample_assigned_exactly_once(name: str) -> None:
    labels = _labels()
    shares = _partition(name, labels, 5)
    assert len(shares) == 5
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(200))
    check_partition(shares, 200, min_samples=0, labels=labels, min_classes=1)


@pytest.mark.parametrize("name", ALL)
def test_shares_are_sorted_int64(name: str) -> None:
    shares = _partition(name, _labels(), 5)
    assert all(s.dtype == np.int64 for s in shares)
    assert all(np.array_equal(s, np.sort(s)) for s in shares)


@pytest.mark.parametrize("name", ALL)
def test_same_seed_gives_identical_partition(name: str) -> None:
    a = _partition(name, _labels(), 5, seed=7)
    b = _partition(name, _labels(), 5, seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", SEEDED)
def test_different_seed_gives_different_partition(name: str) -> None:
    a = _partition(name, _labels(), 5, seed=7)
    b = _partition(name, _labels(), 5, seed=8)
    assert not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_natural_is_deterministic_whatever_the_seed() -> None:
    # the counterpart of the different-seed test: natural must NOT depend on rng
    a = _partition("natural", _labels(), 5, seed=7)
    b = _partition("natural", _labels(), 5, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", ALL)
def test_min_samples_respected(name: str) -> None:
    labels = _labels(2000, 10)
    shares = _partition(name, labels, 10, min_samples=100)
    assert min(len(s) for s in shares) >= 100
    check_partition(shares, 2000, min_samples=100, labels=labels)


@pytest.mark.parametrize("name", ALL)
def test_impossible_min_samples_names_key_and_bound(name: str) -> None:
    with pytest.raises(PartitionError) as info:
        _partition(name, _labels(), 5, min_samples=41)
    msg = str(info.value)
    assert msg.startswith("partition.min_samples=41 cannot be met")
    assert "partition.min_samples <= 40" in msg


@pytest.mark.parametrize("name", ALL)
def test_single_client_gets_everything(name: str) -> None:
    # one client holding everything needs all 4 classes for pathological
    overrides = {"classes_per_client": 4} if name == "pathological" else {}
    (only,) = _partition(name, _labels(), 1, **overrides)
    assert np.array_equal(only, np.arange(200))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n_clients", [0, -2])
def test_nonpositive_n_clients_rejected(name: str, n_clients: int) -> None:
    p = make_partitioner(name, min_samples=0, **SETTINGS[name])
    with pytest.raises(PartitionError, match="federation.clients"):
        p.partition(_labels(), n_clients, _rng(), **_inputs(name, 200, 5))


@pytest.mark.parametrize("name", ALL)
def test_two_dimensional_labels_rejected(name: str) -> None:
    p = make_partitioner(name, min_samples=0, **SETTINGS[name])
    with pytest.raises(PartitionError, match="1-D"):
        p.partition(np.zeros((10, 2)), 2, _rng(), **_inputs(name, 10, 2))


@pytest.mark.parametrize("name", ALL)
def test_checked_labels_refuses_what_no_partition_could_meet(name: str) -> None:
    # the shared start of partition(): 1-D labels, clients >= 1, min_samples feasible
    p = make_partitioner(name, min_samples=3, **SETTINGS[name])
    assert p.checked_labels([2, 0, 1, 0, 1, 2], 2).tolist() == [2, 0, 1, 0, 1, 2]
    with pytest.raises(PartitionError, match=r"partition.min_samples <= 2"):
        p.checked_labels(np.zeros(5), 2)
    with pytest.raises(PartitionError, match="1-D"):
        p.checked_labels(np.zeros((6, 2)), 1)
    with pytest.raises(PartitionError, match="federation.clients"):
        p.checked_labels(np.zeros(6), 0)


@pytest.mark.parametrize("name", ALL)
def test_repr_names_the_class_and_every_setting(name: str) -> None:
    p = make_partitioner(name, min_samples=2, **SETTINGS[name])
    text = repr(p)
    assert text.startswith(f"{type(p).__name__}(")
    for key in type(p).settings:
        assert f"{key}={getattr(p, key)!r}" in text


@pytest.mark.parametrize("name", ALL)
def test_partition_does_not_touch_global_random_state(name: str) -> None:
    before = np.random.get_state()
    _partition(name, _labels(), 5)
    after = np.random.get_state()
    assert np.array_equal(before[1], after[1]) and before[2:] == after[2:]


@pytest.mark.parametrize("name", SEEDED)
def test_seeded_methods_ignore_groups(name: str) -> None:
    p = make_partitioner(name, min_samples=0, **SETTINGS[name])
    inputs = _inputs(name, 200, 5)
    with_groups = p.partition(_labels(), 5, _rng(3), **inputs)
    del inputs["groups"]
    without = p.partition(_labels(), 5, _rng(3), **inputs)
    assert all(np.array_equal(x, y) for x, y in zip(with_groups, without, strict=True))


@pytest.mark.parametrize("name", ALL)
def test_works_on_string_labels(name: str) -> None:
    labels = np.array(["cat", "dog", "eel", "fox"])[_labels()]
    shares = _partition(name, labels, 5)
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(200))


# ---------------------------------------------------------------- IID


def test_iid_sizes_differ_by_at_most_one() -> None:
    shares = IidPartitioner().partition(_labels(103), 10, _rng())
    assert [len(s) for s in shares] == [11, 11, 11] + [10] * 7


# ---------------------------------------------------------------- Dirichlet


def test_dirichlet_redraws_until_min_samples_met() -> None:
    labels = _labels(2000, 10)
    # With this seed the first draw leaves a client with 81 samples ...
    first = DirichletPartitioner(alpha=1.0, min_samples=0).partition(
        labels, 10, _rng(0)
    )
    assert min(len(s) for s in first) == 81
    # ... so min_samples=100 forces a redraw that satisfies it.
    redrawn = DirichletPartitioner(alpha=1.0, min_samples=100).partition(
        labels, 10, _rng(0)
    )
    assert min(len(s) for s in redrawn) >= 100


def test_dirichlet_exhausted_tries_names_alpha_and_min_samples() -> None:
    # 150 <= 2000 // 10, so feasible by count, but alpha=0.1 never balances it.
    p = DirichletPartitioner(alpha=0.1, min_samples=150, max_tries=20)
    with pytest.raises(PartitionError) as info:
        p.partition(_labels(2000, 10), 10, _rng(0))
    msg = str(info.value)
    assert msg.startswith("partition.min_samples=150 cannot be met with ")
    assert "partition.alpha=0.1" in msg
    assert "after 20 Dirichlet draws" in msg
    assert "raise partition.alpha" in msg


def test_dirichlet_small_alpha_skews_more_than_iid() -> None:
    # Measured over seeds 0..199 (local_test_fraction=0.2): iid 0.072..0.110,
    # dirichlet(0.1) 0.580..0.768; seed 0 gives 0.095 and 0.656.
    iid, dirichlet = _skew("iid", 1.0), _skew("dirichlet", 0.1)
    assert iid < 0.15
    assert dirichlet > 0.45
    assert dirichlet > 4 * iid
