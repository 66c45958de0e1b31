"""Under DP the clients' state is theirs (issue 36, item 2): a Ditto or FedPer
personal model, a SCAFFOLD control variate, trained on a client's records with
no clip and no noise, is kept under ``.fedpipe/clients/round-K`` and never in
``models/round-K/clients``, the round stage's DVC output that ``dvc push`` sends.
The next round still reads it, and refuses one that is missing or of another
run instead of training on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedpipe.config import layout
from fedpipe.core.weights import save_weights
from fedpipe.federation.clientstate import (
    PrivateStateError,
    load_round_client_states,
    merged,
    save_round_client_states,
)


def _ditto(value: float) -> dict:
    return {"ditto": {"personal/000": np.full(3, value, np.float32)}}


def _round(root: Path, k: int, states: dict, *, private: bool, seed: int = 0) -> None:
    """Round k's global weights, then the clients' state, as the round writes them."""
    weights = [np.random.default_rng(seed + k).normal(size=(2, 2)).astype(np.float32)]
    save_weights(root / layout.model_weights(k), weights)
    save_round_client_states(root, k, states, private=private)


def _published(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_under_dp_no_client_model_is_in_the_dvc_output(tmp_path: Path) -> None:
    _round(tmp_path, 1, {1: _ditto(1.0), 3: _ditto(3.0)}, private=True)
    public = tmp_path / layout.client_state(1)
    assert not list((tmp_path / layout.MODELS_DIR).rglob("client-*"))
    index = json.loads((public / "index.json").read_text())
    assert index["clients"] == [] and index["namespaces"] == []  # who trained: no one
    assert index["private"] == ".fedpipe/clients/round-1"
    hidden = tmp_path / layout.private_client_state(1)
    assert sorted(p.name for p in hidden.glob("client-*")) == [
        "client-0001.npz",
        "client-0003.npz",
    ]
    assert (hidden.parent.stat().st_mode & 0o077) == 0
    # the next round reads the clients' own models back
    back = load_round_client_states(tmp_path, 1)
    assert sorted(back) == [1, 3]
    assert float(back[3]["ditto"]["personal/000"][0]) == 3.0
    # ... and round 2 keeps them private too, the untouched client's as well
    _round(tmp_path, 2, merged(back, {1: _ditto(9.0)}), private=True)
    assert not list((tmp_path / layout.MODELS_DIR).rglob("client-*"))
    again = load_round_client_states(tmp_path, 2)
    assert float(again[1]["ditto"]["personal/000"][0]) == 9.0
    assert float(again[3]["ditto"]["personal/000"][0]) == 3.0


def test_without_dp_or_with_nothing_kept_the_folder_is_as_before(
    tmp_path: Path,
) -> None:
    _round(tmp_path, 1, {2: _ditto(2.0)}, private=False)
    public = tmp_path / layout.client_state(1)
    assert (public / "client-0002.npz").is_file()
    assert json.loads((public / "index.json").read_text()) == {
        "clients": [2],
        "namespaces": ["ditto"],
    }
    # FedAvg under DP: no client keeps anything, nothing to hide, nothing private
    _round(tmp_path, 2, {0: {}, 1: {}}, private=True)
    index = tmp_path / layout.client_state(2) / "index.json"
    assert json.loads(index.read_text()) == {"clients": [], "namespaces": []}
    assert not (tmp_path / layout.private_client_state(2)).exists()
    assert len(load_round_client_states(tmp_path, 2)) == 0


def test_a_missing_private_state_is_refused_with_the_command(tmp_path: Path) -> None:
    _round(tmp_path, 1, {1: _ditto(1.0)}, private=True)
    # a fresh clone: the DVC output is there, .fedpipe/ is not
    for path in (tmp_path / layout.private_client_state(1)).iterdir():
        path.unlink()
    (tmp_path / layout.private_client_state(1)).rmdir()
    with pytest.raises(PrivateStateError) as raised:
        load_round_client_states(tmp_path, 1)
    message = str(raised.value)
    assert "\n" not in message
    assert ".fedpipe/clients/round-1" in message and "fedpipe run --force" in message


def test_a_private_state_of_another_run_is_refused(tmp_path: Path) -> None:
    _round(tmp_path, 1, {1: _ditto(1.0)}, private=True)
    # dvc checkout of another run's global model: the private state is not its
    save_weights(tmp_path / layout.model_weights(1), [np.zeros((2, 2), np.float32)])
    with pytest.raises(PrivateStateError, match="another run"):
        load_round_client_states(tmp_path, 1)


def test_the_public_marker_is_the_same_bits_whatever_trained(tmp_path: Path) -> None:
    """dvc.lock's hash of models/round-K/clients must not depend on who trained
    (nor on what they trained): two runs that sampled differently publish the
    same folder."""
    a, b = tmp_path / "a", tmp_path / "b"
    _round(a, 1, {1: _ditto(1.0)}, private=True)
    _round(b, 1, {0: _ditto(5.0), 2: _ditto(7.0)}, private=True, seed=9)
    folder = layout.client_state(1)
    assert sorted(p.name for p in (a / folder).iterdir()) == ["index.json"]
    assert (a / folder / "index.json").read_bytes() == (
        b / folder / "index.json"
    ).read_bytes()
