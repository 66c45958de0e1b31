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

Under differential privacy (any ``privacy.mechanism``) a client's state is the
client's: trained on its records with no clip and no noise (a Ditto or FedPer
personal model, a SCAFFOLD control variate), it would give away what the noised
global model hides. :func:`save_round_client_states` then keeps the folder under
``.fedpipe/clients/round-K`` (:func:`fedpipe.config.layout.private_client_state`:
git- and dvc-ignored, no stage's output, never pushed) and the public
``models/round-K/clients`` (the DVC output) holds only ``index.json`` naming no
client and the private folder. The private index records the SHA-256 of the
round's published global weights, which :func:`load_round_client_states` checks:
a private folder of another run (params changed back, ``dvc checkout``) is
refused, not trained on, and so is a missing one (a fresh clone, ``fedpipe run
--exp``'s temporary copy), with the command that recomputes it. A round after
which no client keeps anything (FedAvg, round 0) has nothing to hide: its
public folder is the empty index, as without DP.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from fedpipe.client.base import ClientState
from fedpipe.config import layout
from fedpipe.core.errors import FedpipeError
from fedpipe.core.weights import load_state, save_state

INDEX = "index.json"
#: the public index's key naming the private folder (under DP)
PRIVATE = "private"
#: the private index's key: SHA-256 of the round's published global weights
BOUND_TO = "weights_sha256"
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


def save_client_states(
    folder: Path, states: ClientStates, *, note: Mapping[str, str] | None = None
) -> list[int]:
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

    ``note``: further entries of ``index.json``. Returns the clients that keep
    something (those with a file).
    """
    tmp = folder.with_name(folder.name + ".tmp")
    old = folder.with_name(folder.name + ".old")
    for leftover in (tmp, old):  # of a write that was killed
        if leftover.exists():
            shutil.rmtree(leftover)
    tmp.mkdir(parents=True)
    try:
        kept = _write_folder(tmp, states, note or {})
    except BaseException:  # a full disk, Ctrl-C: the half-written copy goes
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():
        folder.replace(old)
    tmp.replace(folder)
    if old.exists():
        shutil.rmtree(old)
    return kept


def _write_folder(
    tmp: Path, states: ClientStates, note: Mapping[str, str]
) -> list[int]:
    """Write the client state folder's files and index into ``tmp``; the clients
    that keep something."""
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
    index = {**note, "clients": kept, "namespaces": sorted(namespaces)}
    (tmp / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return kept


def _namespaces_of(states: ClientStates) -> set[str]:
    """Namespaces recorded by the stored folders under ``states``."""
    if isinstance(states, MergedStates):
        return _namespaces_of(states.base)
    if isinstance(states, StoredStates):
        index = states.folder / INDEX
        if index.is_file():
            return set(json.loads(index.read_text())["namespaces"])
    return set()


class PrivateStateError(FedpipeError, RuntimeError):
    """Under DP, a round's private client state is missing or of another run."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_round_client_states(
    root: Path, round_: int, states: ClientStates, *, private: bool
) -> None:
    """Write what the clients keep after ``round_`` under project ``root``.

    Without DP (``private`` False) it is ``models/round-K/clients``, the round
    stage's DVC output. Under DP, when any client keeps anything, it goes to
    ``.fedpipe/clients/round-K`` (mode 0700, bound to the round's global
    weights, written first: ``models/round-K/weights.npz`` must exist) and the
    public folder holds an index naming no client and that folder.
    """
    public = root / layout.client_state(round_)
    hidden = root / layout.private_client_state(round_)
    if private:
        hidden.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        bound = {BOUND_TO: _sha256(root / layout.model_weights(round_))}
        if save_client_states(hidden, states, note=bound):
            note = {PRIVATE: layout.private_client_state(round_).as_posix()}
            save_client_states(public, {}, note=note)
            return
    if hidden.exists():  # nothing to hide, or no DP: no stale copy stays beside
        shutil.rmtree(hidden)
    save_client_states(public, states)


def load_round_client_states(root: Path, round_: int) -> StoredStates:
    """What the clients keep after ``round_`` (:func:`save_round_client_states`):
    the public folder, or the private one its index names.

    Raises
    ------
    FileNotFoundError
        The public folder is missing.
    PrivateStateError
        The private folder is missing, or was written beside other global
        weights than ``models/round-K/weights.npz`` holds now.
    """
    public = root / layout.client_state(round_)
    index = public / INDEX
    named = json.loads(index.read_text()).get(PRIVATE) if index.is_file() else None
    if named is None:
        return StoredStates(public)
    hidden = root / named
    rerun = (
        "rerun every round from round 1 to recompute it (fedpipe run --force); "
        "under privacy.mechanism the clients' state is never in a DVC output, "
        "so neither DVC nor git brings it"
    )
    if not (hidden / INDEX).is_file():
        raise PrivateStateError(
            f"{public}: the clients' state after round {round_} is kept private in "
            f"{named}/, which is not here (a fresh clone, a temporary copy, or "
            f".fedpipe/ removed); {rerun}"
        )
    recorded = json.loads((hidden / INDEX).read_text()).get(BOUND_TO)
    if recorded != _sha256(root / layout.model_weights(round_)):
        raise PrivateStateError(
            f"{named}/: the clients' private state after round {round_} was written "
            f"by another run than {layout.model_weights(round_)} (params changed, "
            f"or dvc checkout); {rerun}"
        )
    return StoredStates(hidden)
