""" "Public means public" (issue 36): :func:`fedpipe.observe.leaks.public_leaks`
on runs written by the library's round, and on the leaks it must name; the
inventory of :data:`fedpipe.config.layout.RUN_FILES` is docs/privacy.md's table."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config import layout
from fedpipe.config.params import load_params
from fedpipe.federation.clientstate import save_client_states, save_round_client_states
from fedpipe.observe.leaks import public_leaks

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

KEY = bytes(range(32))
DP = {"mechanism": "central", "noise_multiplier": 1.0}
DOCS = Path(__file__).parents[1] / "docs" / "privacy.md"


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two rounds of central DP, 2 of 5 clients sampled a round, with the
    clients' Ditto models written as the round stage writes them."""
    root = tmp_path_factory.mktemp("dp")
    run_federation(
        root, n_samples=300, clients=5, rounds=2, fraction_fit=0.4, privacy=DP,
        dp_key=KEY, save_models=True,
    )  # fmt: skip
    for k in (1, 2):
        states = {c: {"ditto": {"personal/000": np.full(2, c + k)}} for c in (k, 4)}
        save_round_client_states(root, k, states, private=True)
    return root


def test_a_dp_run_keeps_its_public_files_public(dp_run: Path) -> None:
    params = load_params(dp_run / "params.yaml")
    assert params.privacy.mechanism == "central"
    assert public_leaks(dp_run, params) == []
    # the private side has it all: the test can fail
    assert list((dp_run / layout.private_client_state(2)).glob("client-*.npz"))
    assert (dp_run / layout.oracle_record(2)).is_file()


def _copy(root: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    return copy


def test_each_kind_of_leak_is_named(dp_run: Path, tmp_path: Path) -> None:
    copy = _copy(dp_run, tmp_path)
    params = load_params(copy / "params.yaml")
    # the sampled clients' rows (as the table was published before), a client's
    # model in the DVC output, an oracle key in a round record
    pd.DataFrame({"client": [1, 3]}).to_csv(
        copy / layout.client_metrics(1), index=False
    )
    save_client_states(
        copy / layout.client_state(2), {3: {"ditto": {"personal/000": np.ones(2)}}}
    )
    record = copy / layout.round_metrics(2)
    record.write_text(
        record.read_text().replace('"round"', '"clients_selected": [1, 3], "round"')
    )
    leaks = public_leaks(copy, params)
    assert any(
        line.startswith("metrics/clients/round-1.csv: lists 2 clients")
        for line in leaks
    ), leaks
    assert any(
        line.startswith("models/round-2/clients/client-0003.npz") for line in leaks
    )
    assert any(
        "models/round-2/clients/index.json: names the 1 clients" in x for x in leaks
    )
    assert any(
        line.startswith("metrics/rounds/round-2.json") and "clients_selected" in line
        for line in leaks
    )
    assert all("\n" not in line for line in leaks)


def test_without_dp_nothing_is_promised(dp_run: Path, tmp_path: Path) -> None:
    copy = _copy(dp_run, tmp_path)
    pd.DataFrame({"client": [1, 3]}).to_csv(
        copy / layout.client_metrics(1), index=False
    )
    params = load_params(copy / "params.yaml")
    assert (
        public_leaks(
            copy, params.model_copy(update={"privacy": type(params.privacy)()})
        )
        == []
    )


def test_publish_oracle_is_named_as_deliberate(tmp_path: Path) -> None:
    run_federation(
        tmp_path, n_samples=300, clients=5, rounds=1, fraction_fit=0.4,
        privacy={**DP, "publish_oracle": True}, dp_key=KEY,
    )  # fmt: skip
    leaks = public_leaks(tmp_path, load_params(tmp_path / "params.yaml"))
    assert leaks and all("publishes it deliberately" in line for line in leaks)


def test_the_inventory_classes_the_files_and_is_in_the_docs() -> None:
    assert layout.is_public("models/round-3/clients/client-0001.npz")
    assert layout.is_public("metrics/clients/round-12.csv")
    assert not layout.is_public(".fedpipe/clients/round-3/client-0001.npz")
    assert not layout.is_public(".fedpipe/oracle/round-3.json")
    assert not layout.is_public(layout.DP_KEY)
    assert layout.classify("somewhere/else.txt") is None
    assert layout.inventory_markdown() in DOCS.read_text()


def test_round_files_past_the_run_are_not_its_own(dp_run: Path, tmp_path: Path) -> None:
    """An earlier, longer run without DP left round 3's table: not this run's."""
    copy = _copy(dp_run, tmp_path)
    sampled = pd.DataFrame({"client": [1, 3], "local_accuracy": [0.5, 0.6]})
    sampled.to_csv(copy / layout.client_metrics(3), index=False)
    params = load_params(copy / "params.yaml")
    assert params.federation.rounds == 2
    assert public_leaks(copy, params) == []
    sampled.to_csv(copy / layout.client_metrics(2), index=False)
    assert len(public_leaks(copy, params)) == 2  # rows, and an unnoised column
