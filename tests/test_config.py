"""Tests for fedpipe.config.params: parsing, loading, round_chain sync, and
preflight."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedpipe.config.params import (
    ROUND_CHAIN_MARKER,
    DataParams,
    FederationParams,
    ModelParams,
    Params,
    ParamsError,
    PartitionParams,
    StrategyParams,
    TrainParams,
    ValidationParams,
    load_params,
    parse_params,
    round_chain,
    sync_round_chain,
)
from fedpipe.data.partition.manifest import split_heldout
from fedpipe.data.preflight import preflight

REPO_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"

# ---------------------------------------------------------------- helpers


def _chain(rounds: int) -> dict[str, int]:
    """round_chain as it appears in YAML: string keys."""
    return {str(k): k - 1 for k in range(1, rounds + 1)}


def _raw(**sections: dict[str, Any]) -> dict[str, Any]:
    """A minimal valid params mapping, with ``sections`` merged in."""
    raw: dict[str, Any] = {"round_chain": _chain(10)}
    raw.update(sections)
    return raw


def _params_with(**sections: dict[str, Any]) -> Params:
    return parse_params(_raw(**sections))


def _error(raw: Any) -> str:
    with pytest.raises(ParamsError) as info:
        parse_params(raw)
    return str(info.value)


def _repo_params(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    shutil.copyfile(REPO_PARAMS, path)
    return path


def _set_rounds(path: Path, rounds: int) -> None:
    text = path.read_text()
    assert "  rounds: 10\n" in text
    path.write_text(text.replace("  rounds: 10\n", f"  rounds: {rounds}\n", 1))


# ---------------------------------------------------------------- parse_params


def test_defaults_are_valid_and_documented() -> None:
    params = parse_params(_raw())
    assert params.seed == 42
    assert params.data == DataParams(source="mnist5k", test_fraction=0.2)
    assert params.partition == PartitionParams(
        method="iid", alpha=0.5, min_samples=10, local_test_fraction=0.2
    )
    assert params.federation == FederationParams(
        clients=10, rounds=10, fraction_fit=1.0, min_clients=1
    )
    assert params.train == TrainParams(
        epochs=1, batch_size=32, lr=0.05, optimizer="sgd"
    )
    assert params.model == ModelParams(name="small_cnn")
    assert params.strategy == StrategyParams(name="fedavg")
    assert params.validation == ValidationParams(min_rows=100)
    assert params.round_chain == {k: k - 1 for k in range(1, 11)}


def test_repo_params_file_loads() -> None:
    params = load_params(REPO_PARAMS)
    assert params.federation.rounds == len(params.round_chain)
    assert params.federation.min_clients == 2


def test_params_are_frozen() -> None:
    params = parse_params(_raw())
    with pytest.raises(ValueError):
        params.seed = 1  # type: ignore[misc]


def test_typo_key_is_named_with_allowed_keys() -> None:
    msg = _error(_raw(federation={"clinets": 5}))
    assert "federation.clinets" in msg
    assert "unknown key" in msg
    assert "clients, dropout, fraction_fit, min_clients, round_deadline_steps" in msg


def test_unknown_top_level_key_is_named() -> None:
    msg = _error(_raw(sed=1))
    assert "sed: unknown key" in msg
    assert "federation" in msg and "seed" in msg


def test_unknown_partition_method_names_key_and_allowed_values() -> None:
    msg = _error(_raw(partition={"method": "random"}))
    assert "partition.method" in msg
    for allowed in (
        "iid",
        "dirichlet",
        "pathological",
        "shards",
        "quantity",
        "natural",
    ):
        assert f"'{allowed}'" in msg
    assert "'random'" in msg


def test_natural_partition_needs_a_client_column() -> None:
    msg = _error(_raw(partition={"method": "natural"}))
    assert "data.client_column" in msg


def test_mnist5k_source_fixes_the_path() -> None:
    msg = _error(_raw(data={"path": "elsewhere.csv"}))
    assert "data.path" in msg and "data/raw/mnist5k.parquet" in msg


def _table(**data: Any) -> dict[str, Any]:
    return _raw(data={"source": "table", "path": "t.csv", **data})


def test_data_classes_are_names_in_order() -> None:
    params = parse_params(_table(classes=["dog", "cat"]))
    assert params.data.classes == ["dog", "cat"]


def test_data_classes_read_as_numbers_become_names() -> None:
    assert parse_params(_table(classes=[1, 0])).data.classes == ["1", "0"]


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        (["cat"], "at least 2 class names"),
        (["cat", "cat"], "'cat' listed more than once"),
        (["cat", " "], "must not be empty"),
        ([False, True], "quote the names"),
    ],
)
def test_bad_data_classes_are_named(classes: list[Any], expected: str) -> None:
    msg = _error(_table(classes=classes))
    assert "data.classes" in msg and expected in msg


def test_data_classes_and_num_classes_must_agree() -> None:
    msg = _error(_table(classes=["cat", "dog"], num_classes=3))
    assert "data.num_classes=3 but data.classes lists 2 names" in msg


@pytest.mark.parametrize("alpha", [0, -0.5])
def test_partition_alpha_must_be_positive(alpha: float) -> None:
    msg = _error(_raw(partition={"alpha": alpha}))
    assert "partition.alpha" in msg
    assert "greater than 0" in msg


@pytest.mark.parametrize("rounds", [0, -3])
def test_federation_rounds_must_be_at_least_one(rounds: int) -> None:
    msg = _error(_raw(federation={"rounds": rounds}))
    assert "federation.rounds" in msg
    assert "greater than or equal to 1" in msg


def test_min_clients_above_clients_is_rejected() -> None:
    msg = _error(_raw(federation={"clients": 4, "min_clients": 5}))
    assert "federation.min_clients=5" in msg
    assert "federation.clients=4" in msg
    assert "1..4" in msg


@pytest.mark.parametrize("lr", [0, -0.01])
def test_train_lr_must_be_positive(lr: float) -> None:
    msg = _error(_raw(train={"lr": lr}))
    assert "train.lr" in msg
    assert "greater than 0" in msg


def test_round_chain_mismatch_says_run_sync() -> None:
    msg = _error({"federation": {"rounds": 3}, "round_chain": _chain(5)})
    assert "federation.rounds=3" in msg
    assert "rounds 1..5" in msg
    assert "`fedpipe sync`" in msg


def test_missing_round_chain_says_run_sync() -> None:
    msg = _error({"federation": {"rounds": 2}})
    assert "no rounds" in msg
    assert "`fedpipe sync`" in msg


def test_round_chain_with_wrong_predecessor_is_rejected() -> None:
    chain = _chain(3)
    chain["3"] = 1
    msg = _error({"federation": {"rounds": 3}, "round_chain": chain})
    assert "`fedpipe sync`" in msg


@pytest.mark.parametrize("raw", [[1, 2], "rounds: 3", 7])
def test_non_mapping_is_rejected(raw: Any) -> None:
    msg = _error(raw)
    assert "expected a mapping of settings" in msg


def test_every_problem_gets_its_own_line() -> None:
    msg = _error(_raw(train={"lr": 0, "epochs": 0}))
    lines = msg.splitlines()
    assert len(lines) == 2
    assert any("train.lr" in line for line in lines)
    assert any("train.epochs" in line for line in lines)


# ---------------------------------------------------------------- load_params


def test_load_params_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ParamsError, match="params file not found") as info:
        load_params(path)
    assert str(path) in str(info.value)


def test_load_params_non_mapping_yaml(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("- seed\n- 42\n")
    with pytest.raises(ParamsError, match="expected a mapping of settings") as info:
        load_params(path)
    assert str(info.value).startswith(str(path))


def test_load_params_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("federation: {clients: 3\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(path)


def test_load_params_names_the_file_in_errors(tmp_path: Path) -> None:
    path = _repo_params(tmp_path)
    path.write_text(path.read_text().replace("lr: 0.05", "lr: 0"))
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert (
        str(info.value) == f"{path}: train.lr: Input should be greater than 0 (got 0)"
    )


# ---------------------------------------------------------------- sync_round_chain


def test_round_chain_maps_round_to_predecessor() -> None:
    assert round_chain(3) == {1: 0, 2: 1, 3: 2}


def test_sync_rewrites_block_to_match_rounds(tmp_path: Path) -> None:
    path = _repo_params(tmp_path)
    _set_rounds(path, 3)
    assert sync_round_chain(path) is True
    raw = yaml.safe_load(path.read_text())
    assert raw["round_chain"] == {"1": 0, "2": 1, "3": 2}


def test_sync_writes_string_keys(tmp_path: Path) -> None:
    # DVC's foreach needs string keys; int keys silently produce no stages.
    path = _repo_params(tmp_path)
    _set_rounds(path, 2)
    sync_round_chain(path)
    text = path.read_text()
    assert text.endswith(f'{ROUND_CHAIN_MARKER}\nround_chain:\n  "1": 0\n  "2": 1\n')
    keys = list(yaml.safe_load(text)["round_chain"])
    assert keys == ["1", "2"]
    assert all(isinstance(k, str) for k in keys)


def test_sync_keeps_everything_above_the_block(tmp_path: Path) -> None:
    path = _repo_params(tmp_path)
    original = path.read_text()
    _set_rounds(path, 4)
    expected_head = path.read_text().split(ROUND_CHAIN_MARKER)[0]
    sync_round_chain(path)
    text = path.read_text()
    assert text.split(ROUND_CHAIN_MARKER)[0] == expected_head
    assert "# every random choice derives from this" in text
    assert "# dirichlet: concentration (lower = more label skew)" in text
    before = yaml.safe_load(original)
    after = yaml.safe_load(text)
    before.pop("round_chain")
    after.pop("round_chain")
    before["federation"]["rounds"] = 4
    assert after == before


def test_sync_is_idempotent(tmp_path: Path) -> None:
    path = _repo_params(tmp_path)
    _set_rounds(path, 5)
    assert sync_round_chain(path) is True
    once = path.read_bytes()
    assert sync_round_chain(path) is False
    assert path.read_bytes() == once


def test_sync_of_repo_params_changes_nothing(tmp_path: Path) -> None:
    path = _repo_params(tmp_path)
    assert sync_round_chain(path) is False
    assert path.read_bytes() == REPO_PARAMS.read_bytes()


def test_synced_file_loads(tmp_path: Path) -> None:
    path = _repo_params(tmp_path)
    _set_rounds(path, 7)
    with pytest.raises(ParamsError, match="fedpipe sync"):
        load_params(path)
    sync_round_chain(path)
    params = load_params(path)
    assert params.federation.rounds == 7
    assert params.round_chain == {k: k - 1 for k in range(1, 8)}


def test_sync_appends_block_when_absent(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("# mine\nfederation:\n  rounds: 2\n")
    assert sync_round_chain(path) is True
    text = path.read_text()
    assert text.startswith("# mine\nfederation:\n  rounds: 2\n\n" + ROUND_CHAIN_MARKER)
    assert load_params(path).round_chain == {1: 0, 2: 1}


def test_sync_regenerates_a_chain_whose_marker_an_editor_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "params.yaml"
    path.write_text('federation:\n  rounds: 2\nround_chain:\n  "1": 0\nseed: 3\n')
    assert sync_round_chain(path) is True
    params = load_params(path)
    assert params.round_chain == {1: 0, 2: 1} and params.seed == 3
    assert ROUND_CHAIN_MARKER in path.read_text()


def test_a_params_file_rewritten_by_safe_dump_syncs_and_loads(tmp_path: Path) -> None:
    """The repository's params.yaml through yaml.safe_dump (comments and the
    marker gone, keys as ints), as scripts and formatters write it."""
    path = _repo_params(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["federation"]["rounds"] = 3
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert ROUND_CHAIN_MARKER not in path.read_text()
    sync_round_chain(path)
    params = load_params(path)
    assert params.federation.rounds == 3 and params.round_chain == {1: 0, 2: 1, 3: 2}
    again = path.read_text()
    assert sync_round_chain(path) is False and path.read_text() == again


@pytest.mark.parametrize(
    "text",
    ["- a\n- b\n", "federation: {rounds: 3\n", "federation:\n", "federation: 3\n"],
    ids=["list", "bad-yaml", "empty-section", "scalar-section"],
)
def test_sync_leaves_malformed_files_to_load_params(tmp_path: Path, text: str) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    assert sync_round_chain(path) is False
    assert path.read_text() == text
    with pytest.raises(ParamsError):
        load_params(path)


# ---------------------------------------------------------------- clients_per_round


@pytest.mark.parametrize(
    ("clients", "fraction_fit", "min_clients", "expected"),
    [
        (10, 1.0, 1, 10),
        (10, 0.5, 1, 5),
        (10, 0.25, 1, 3),  # ceil(2.5)
        (10, 0.1, 3, 3),  # min_clients wins
        (10, 0.5, 10, 10),
        (3, 0.1, 1, 1),
        (100, 0.07, 1, 7),  # 0.07 * 100 == 7.000000000000001 in floats
        (25, 0.28, 1, 7),  # 0.28 * 25 == 7.000000000000001
    ],
)
def test_clients_per_round(
    clients: int, fraction_fit: float, min_clients: int, expected: int
) -> None:
    federation = FederationParams(
        clients=clients, fraction_fit=fraction_fit, min_clients=min_clients
    )
    assert federation.clients_per_round() == expected


# ---------------------------------------------------------------- preflight


def test_preflight_accepts_repo_params() -> None:
    params = load_params(REPO_PARAMS)
    preflight(params.data, params.federation, params.partition)


def test_preflight_rejects_more_clients_than_training_samples() -> None:
    # 5000 samples, 20% held out -> 4000 training samples
    params = _params_with(federation={"clients": 4001}, partition={"min_samples": 1})
    with pytest.raises(ParamsError) as info:
        preflight(params.data, params.federation, params.partition)
    msg = str(info.value)
    assert "federation.clients=4001" in msg
    assert "4000 training samples" in msg
    assert "1..4000" in msg


def test_preflight_accepts_one_sample_per_client() -> None:
    params = _params_with(federation={"clients": 4000}, partition={"min_samples": 1})
    preflight(params.data, params.federation, params.partition)


def test_preflight_rejects_min_samples_times_clients_above_training_samples() -> None:
    params = _params_with(federation={"clients": 10}, partition={"min_samples": 401})
    with pytest.raises(ParamsError) as info:
        preflight(params.data, params.federation, params.partition)
    msg = str(info.value)
    assert "partition.min_samples=401" in msg
    assert "federation.clients=10" in msg
    assert "4010" in msg
    assert "partition.min_samples <= 400" in msg


@pytest.mark.parametrize("test_fraction", [0.2, 0.2001, 0.3005, 0.0001])
def test_preflight_counts_training_samples_like_split_heldout(
    test_fraction: float,
) -> None:
    # preflight must agree with the split the partition stage makes, or it lets
    # through settings that then fail after ingest and validation
    rng = np.random.default_rng(0)
    train, _ = split_heldout(5000, test_fraction=test_fraction, rng=rng)
    n_train = len(train)
    data = {"test_fraction": test_fraction}
    partition = {"min_samples": 1}
    enough = _params_with(
        data=data, partition=partition, federation={"clients": n_train}
    )
    preflight(enough.data, enough.federation, enough.partition)
    too_many = _params_with(
        data=data, partition=partition, federation={"clients": n_train + 1}
    )
    with pytest.raises(ParamsError, match=f"the {n_train} training samples"):
        preflight(too_many.data, too_many.federation, too_many.partition)


def test_config_names_match_the_registries() -> None:
    import typing

    from fedpipe.client import CLIENT_ALGORITHMS
    from fedpipe.config.params import (
        CLIENT_ALGORITHM_NAMES,
        MODEL_NAMES,
        STRATEGY_NAMES,
    )
    from fedpipe.data.partition import PARTITIONERS
    from fedpipe.model.zoo import MODELS
    from fedpipe.strategy import STRATEGIES

    assert set(STRATEGY_NAMES) == set(STRATEGIES)
    assert set(MODEL_NAMES) == set(MODELS)
    assert set(CLIENT_ALGORITHM_NAMES) == set(CLIENT_ALGORITHMS)
    method = PartitionParams.model_fields["method"].annotation
    assert set(typing.get_args(method)) == set(PARTITIONERS)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("model", "name", "tiny_vit"),
        ("strategy", "name", "fedbuff"),
        ("client", "algorithm", "moon"),
        ("model", "name", "model.py:"),
    ],
)
def test_unknown_names_list_builtins_and_the_reference_form(
    section: str, key: str, value: str
) -> None:
    raw = {"federation": {"rounds": 1}, "round_chain": {1: 0}, section: {key: value}}
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    message = str(err.value)
    assert f"{section}.{key}: unknown {value!r}" in message
    assert "path/to/file.py:Name" in message


def test_references_to_user_code_are_accepted() -> None:
    raw = {
        "federation": {"rounds": 1},
        "round_chain": {1: 0},
        "model": {"name": "my/model.py:create", "options": {"units": 8}},
        "strategy": {"name": "pkg.mod:MyStrategy", "options": {"alpha": 0.1}},
        "client": {"algorithm": "my/client.py:MyClient"},
    }
    params = parse_params(raw)
    assert params.model.settings() == {"units": 8}
    assert params.strategy.settings() == {"alpha": 0.1}


def test_model_options_are_for_user_builders_only() -> None:
    raw = {
        "federation": {"rounds": 1},
        "round_chain": {1: 0},
        "model": {"name": "mlp", "options": {"units": 8}},
    }
    with pytest.raises(ParamsError, match="model.options"):
        parse_params(raw)


def test_dpsgd_with_a_batch_norm_model_is_refused_before_any_stage() -> None:
    """Found by the matrix: DP-SGD on the CNN with batch norm failed every
    client's job in round 1 (BatchStatisticsRefused) instead of being refused."""
    from fedpipe.config.params import ParamsError, parse_params

    raw = {
        "federation": {"rounds": 1},
        "round_chain": {1: 0},
        "model": {"name": "cnn", "batch_norm": True},
        "privacy": {"mechanism": "dpsgd", "noise_multiplier": 1.0},
    }
    with pytest.raises(ParamsError, match="privacy.mechanism=dpsgd does not fit"):
        parse_params(raw)
    raw["model"]["batch_norm"] = False
    parse_params(raw)


def test_a_section_builds_the_library_dataclass_from_the_keys_it_shares() -> None:
    from fedpipe.config.privacy import Privacy
    from fedpipe.federation.build import privacy_for

    params = _params_with(
        privacy={"mechanism": "central", "clip_lr": 0.3, "target_epsilon": 2.0},
        federation={"clients": 10, "fraction_fit": 0.5, "sampling": "poisson"},
    )
    privacy = privacy_for(params)
    assert isinstance(privacy, Privacy)
    shared = {f.name for f in dataclasses.fields(Privacy)} & set(
        type(params.privacy).model_fields
    )
    assert len(shared) == 10  # a key of both is passed on with no edit in build.py
    for key in shared:
        assert getattr(privacy, key) == getattr(params.privacy, key), key
    assert (privacy.n_clients, privacy.per_round) == (10, 5)
    assert (privacy.sampling, privacy.sampling_rate) == ("poisson", 0.5)


def test_into_takes_what_the_section_lacks_from_its_caller() -> None:
    @dataclasses.dataclass(frozen=True)
    class Rounds:
        rounds: int
        clients: int
        total: int

    federation = _params_with(federation={"clients": 4}).federation
    assert federation.into(Rounds, total=7) == Rounds(10, 4, 7)
    assert federation.into(Rounds, total=7, clients=2).clients == 2
    with pytest.raises(TypeError):
        federation.into(Rounds)  # total: in neither
