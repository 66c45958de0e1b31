"""What clients keep between rounds: one file per client, one namespace per algorithm.

A round's client state is a folder (``models/round-K/clients/``) holding
``client-CCCC.npz`` for every client that keeps anything, with arrays named
``<algorithm>/<name>`` (``scaffold/c_i/003``, ``fedper/layer/005``), plus
``index.json`` (the clients and namespaces present). Files are written with
deterministic bytes (:func:`fedpipe.core.weights.save_state`), so a client that did not
take part in a round has a byte-identical file and DVC, which stores each file of
a directory output by its content, adds no bytes to its cache for it.

A round touches only its participants: :func:`load_client_states` reads a client's
file when that client is looked up (:class:`StoredStates`), :func:`merged` lays the
round's updates over it without copying (:class:`MergedStates`), and
:func:`save_client_states` links the files of clients that did not change from the
previous round's folder instead of rewriting them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from fedpipe.client.base import ClientState
from fedpipe.core.weights import load_state, save_state

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


class StoredStates(Mapping[int, ClientState]):
    """A round's client-state folder, read one client at a time on lookup."""

    def __init__(self, folder: Path) -> None:
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: client state not found")
        self.folder = folder
        index = folder / INDEX
        if index.is_file():
            clients = json.loads(index.read_text())["clients"]
        else:  # a folder written before index.json existed
            clients = [
                int(m.group(1)) for p in folder.iterdir() if (m := _FILE.match(p.name))
            ]
        self._clients = sorted(int(c) for c in clients)
        self._known = set(self._clients)
        self._cache: dict[int, ClientState] = {}

    def __getitem__(self, client: int) -> ClientState:
        if client not in self._known:
            raise KeyError(client)
        if client not in self._cache:
            self._cache[client] = _nest(load_state(client_file(self.folder, client)))
        return self._cache[client]

    def __iter__(self) -> Iterator[int]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, client: object) -> bool:
        return client in self._known


class MergedStates(Mapping[int, ClientState]):
    """``base`` with each updated client's namespaces replaced by its update's
    (namespaces not in an update are kept); nothing is copied."""

    def __init__(self, base: ClientStates, updates: ClientStates) -> None:
        self.base = base
        self.updates = {c: u for c, u in updates.items()}
        self._clients = sorted(set(base) | set(self.updates))

    def __getitem__(self, client: int) -> ClientState:
        if client in self.updates:
            return {**self.base.get(client, {}), **self.updates[client]}
        return self.base[client]

    def __iter__(self) -> Iterator[int]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)


def load_client_states(folder: Path) -> StoredStates:
    """A round's client state (clients without a file keep nothing); each client's
    file is read when it is first looked up."""
    return StoredStates(folder)


def merged(states: ClientStates, updates: ClientStates) -> MergedStates:
    """``states`` with each updated client's namespaces replaced by the update's
    (namespaces not in an update are kept)."""
    return MergedStates(states, updates)


def _unchanged_source(states: ClientStates, client: int) -> Path | None:
    """The previous round's file of a client this round did not change."""
    if isinstance(states, MergedStates) and client not in states.updates:
        return _unchanged_source(states.base, client)
    if isinstance(states, StoredStates) and client in states:
        return client_file(states.folder, client)
    return None


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copyfile(source, target)


def save_client_states(folder: Path, states: ClientStates) -> None:
    """Write a round's client state folder, replacing whatever was there.

    Clients the round did not change keep the previous round's file (a hard link,
    the same bytes); only the updated clients' files are written.

    The folder is written whole beside its place (``clients.tmp``) and swapped in
    by renames: a kill leaves the old folder, the new one, or (between two
    renames) the old one under ``clients.old`` and the new one complete under
    ``clients.tmp``; the round that writes it reruns in every case. Its files are
    not flushed to disk one by one (a round writes them by the hundred): a power
    loss may lose some, which DVC's hashes in ``dvc.lock`` catch (the round
    reruns).
    """
    tmp = folder.with_name(folder.name + ".tmp")
    old = folder.with_name(folder.name + ".old")
    for leftover in (tmp, old):  # of a write that was killed
        if leftover.exists():
            shutil.rmtree(leftover)
    tmp.mkdir(parents=True)
    try:
        _write_folder(tmp, states)
    except BaseException:  # a full disk, Ctrl-C: the half-written copy goes
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():
        folder.replace(old)
    tmp.replace(folder)
    if old.exists():
        shutil.rmtree(old)


def _write_folder(tmp: Path, states: ClientStates) -> None:
    """Write the client state folder's files and index into ``tmp``."""
    namespaces: set[str] = set()
    kept: list[int] = []
    for client in sorted(states):
        source = _unchanged_source(states, client)
        if source is not None:
            _link_or_copy(source, client_file(tmp, client))
            kept.append(client)
            continue
        flat = _flatten(states[client])
        if flat:
            save_state(client_file(tmp, client), flat, durable=False)
            namespaces.update(states[client])
            kept.append(client)
    namespaces.update(_namespaces_of(states))
    index = {"clients": kept, "namespaces": sorted(namespaces)}
    (tmp / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _namespaces_of(states: ClientStates) -> set[str]:
    """Namespaces recorded by the stored folders under ``states``."""
    if isinstance(states, MergedStates):
        return _namespaces_of(states.base)
    if isinstance(states, StoredStates):
        index = states.folder / INDEX
        if index.is_file():
            return set(json.loads(index.read_text())["namespaces"])
    return set()
