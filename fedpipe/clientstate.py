"""What clients keep between rounds: one file per client, one namespace per algorithm.

A round's client state is a folder (``models/round-K/clients/``) holding
``client-CCCC.npz`` for every client that keeps anything, with arrays named
``<algorithm>/<name>`` (``scaffold/c_i/003``, ``fedper/layer/005``), plus
``index.json`` (the clients and namespaces present). Files are written with
deterministic bytes (:func:`fedpipe.weights.save_state`), so a client that did not
take part in a round has a byte-identical file and DVC, which stores each file of
a directory output by its content, adds no bytes to its cache for it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fedpipe.client.base import ClientState
from fedpipe.weights import load_state, save_state

INDEX = "index.json"
_FILE = re.compile(r"client-(\d+)\.npz$")

ClientStates = Mapping[int, ClientState]
"""Client id -> what it keeps (:data:`fedpipe.client.base.ClientState`)."""


def client_file(folder: Path, client: int) -> Path:
    """Where client ``client``'s state lives in a round's folder."""
    return folder / f"client-{client:04d}.npz"


def _flatten(state: ClientState) -> dict[str, np.ndarray]:
    return {
        f"{namespace}/{name}": np.asarray(array)
        for namespace, arrays in state.items()
        for name, array in arrays.items()
    }


def _nest(flat: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, array in flat.items():
        namespace, _, name = key.partition("/")
        out.setdefault(namespace, {})[name] = array
    return out


def load_client_states(folder: Path) -> dict[int, ClientState]:
    """Every client's kept state from a round's folder (clients without a file
    keep nothing)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: client state not found")
    out: dict[int, ClientState] = {}
    for path in sorted(folder.iterdir()):
        match = _FILE.match(path.name)
        if match:
            out[int(match.group(1))] = _nest(load_state(path))
    return out


def merged(states: ClientStates, updates: ClientStates) -> dict[int, ClientState]:
    """``states`` with each updated client's namespaces replaced by the update's
    (namespaces not in an update are kept)."""
    out = {c: dict(s) for c, s in states.items()}
    for client, update in updates.items():
        out[client] = {**out.get(client, {}), **update}
    return out


def save_client_states(folder: Path, states: ClientStates) -> None:
    """Write a round's client state folder, replacing whatever was there."""
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    namespaces: set[str] = set()
    for client in sorted(states):
        flat = _flatten(states[client])
        if flat:
            save_state(client_file(tmp, client), flat)
            namespaces.update(states[client])
    index = {
        "clients": sorted(c for c in states if _flatten(states[c])),
        "namespaces": sorted(namespaces),
    }
    (tmp / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    tmp.replace(folder)
