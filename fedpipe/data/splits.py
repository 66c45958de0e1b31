"""Each client's data: the held-out split and every client's arrays.

:func:`federated_data` turns a partition manifest (the ``partition`` stage's, made
by :func:`fedpipe.data.partition.deal.partition_table`) into each client's data.

Client data is held by reference: a :class:`FederatedData` keeps the prepared
``features.npy`` memory-mapped as it is on disk (uint8 pixels, float32 tables), the
labels and each split's row positions. ``x_train``, ``x_test`` convert one split to
float32 when read (and keep nothing), so memory holds one client's arrays at a
time however large the data set; a :class:`Features` view converts a few rows at a
time (evaluation streams through it). Data opened from files by
:func:`open_federated` pickles as a reference to them: a client's data sent to
another process (a Dask worker) is a path and the files' identity, and that
process opens the files itself, once (:func:`open_federated` caches per process).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.core.errors import FedpipeError
from fedpipe.core.jsonio import read_json
from fedpipe.data.ingest import (
    FEATURES_FILE,
    SAMPLES_FILE,
    SCHEMA_FILE,
    open_features,
    read_samples,
)
from fedpipe.data.partition.featureskew import feature_transformer
from fedpipe.data.preprocess.apply import RowTransform, read_transform, row_transform
from fedpipe.data.preprocess.fit import Transform
from fedpipe.data.sources import DatasetSpec, prepared_spec, to_features

# ---------------------------------------------------------------- the data


class Features:
    """Some samples' float32 features, converted from the store when indexed.

    A lazy, read-only stand-in for the ``(n, *input_shape)`` float32 array
    :func:`fedpipe.data.sources.to_arrays` would build: ``len(view)``, ``view.shape``,
    ``view[a:b]`` (or ``view[index_array]``) converts just those rows, and
    ``np.asarray(view)`` all of them; nothing converted is kept. Rows convert
    elementwise, so any chunking gives the same bits. Pickles as the converted
    array.

    Parameters
    ----------
    store : numpy.ndarray
        Every sample's raw features (the memory-mapped ``features.npy``).
    positions : numpy.ndarray
        Rows of ``store`` in this view, in order.
    spec : DatasetSpec
        Its ``scale`` and ``input_shape``.
    transform : RowTransform, optional
        Applied to the converted rows (the ``preprocess`` stage's fit for this
        split); None: the rows as converted.
    skew : callable, optional
        ``(rows, positions) -> rows``: the client's feature skew
        (:func:`fedpipe.data.partition.featureskew.feature_transformer`), applied
        to the converted rows before ``transform``; None: none.
    """

    __slots__ = ("_positions", "_skew", "_spec", "_store", "_transform")

    dtype = np.dtype(np.float32)

    def __init__(
        self,
        store: np.ndarray,
        positions: np.ndarray,
        spec: DatasetSpec,
        transform: RowTransform | None = None,
        skew: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self._store = store
        self._positions = np.asarray(positions, dtype=np.int64)
        self._spec = spec
        self._transform = transform
        self._skew = skew

    def __len__(self) -> int:
        return len(self._positions)

    @property
    def shape(self) -> tuple[int, ...]:
        """``(n, *input_shape)``, as the converted array's."""
        shape = self._spec.input_shape
        if self._transform is not None:
            shape = (self._transform.output_width(self._spec.n_features),)
        return (len(self._positions), *shape)

    def __getitem__(self, key: slice | np.ndarray | Sequence[int]) -> np.ndarray:
        if isinstance(key, int | np.integer):
            raise TypeError("index a Features view with a slice or an index array")
        positions = self._positions[key]
        x = to_features(self._store, positions, self._spec)
        if self._skew is not None:
            x = self._skew(x, positions)
        return x if self._transform is None else self._transform(x)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        x = self[:]
        return x if dtype is None else x.astype(dtype, copy=False)

    def __reduce__(self) -> tuple[Any, ...]:
        return (np.asarray, (self[:],))

    def __repr__(self) -> str:
        return f"Features(shape={self.shape}, stored as {self._store.dtype})"


XLike = np.ndarray | Features

HELD_OUT_KEPT_BYTES = 32 * 2**20
"""The held-out set is kept in memory, converted, up to this many float32 bytes
(a table of 8 million cells; 20,000 images of 100x100 RGB hold out 480 MB and
stay a lazy view, read a batch at a time)."""


def _materialized(x: XLike) -> np.ndarray:
    return x[:] if isinstance(x, Features) else x


@dataclass(frozen=True)
class StoreRef:
    """Which files a :class:`FederatedData` was opened from, and their identity.

    Attributes
    ----------
    prepared, manifest : str
        Absolute paths of the prepared directory and of the partition manifest.
    identity : tuple
        ``(mtime_ns, size)`` of ``features.npy``, ``samples.parquet``,
        ``schema.json``, the manifest and the transform (if any), in that order.
    transform : str or None
        Absolute path of the ``preprocess`` stage's ``transform.json`` (None:
        the rows as converted).
    """

    prepared: str
    manifest: str
    identity: tuple[tuple[int, int], ...]
    transform: str | None = None

    def files(self) -> list[Path]:
        """The files :attr:`identity` describes, in its order."""
        return _store_files(
            Path(self.prepared),
            Path(self.manifest),
            None if self.transform is None else Path(self.transform),
        )


class _TestSplit:
    """The test split's accessors, shared by :class:`ClientData` (its local test
    split) and :class:`FederatedData` (the held-out set)."""

    __slots__ = ()
    _x_test: XLike
    _y_test: np.ndarray

    @property
    def x_test(self) -> np.ndarray:
        """Test features, float32 (converted now when held by a store)."""
        return _materialized(self._x_test)

    @property
    def y_test(self) -> np.ndarray:
        """Test labels, int32."""
        return self._y_test

    @property
    def x_test_lazy(self) -> XLike:
        """Test features as held: a :class:`Features` view or the array."""
        return self._x_test


class ClientData(_TestSplit):
    """One client's local train and local test split.

    ``x_train`` and ``x_test`` are float32 arrays (features divided by the data's
    ``scale``); held by a store, each read converts the split again, and nothing
    is cached, so keep the array while you use it rather than reading the
    attribute in a loop. ``y_train`` and ``y_test`` (int32) are held.

    Built from arrays (``ClientData(3, x_tr, y_tr, x_te, y_te)``), it holds them
    and pickles by value; built by :func:`open_federated`, it pickles as a
    reference to the files (see the module docstring).
    """

    __slots__ = ("_client", "_ref", "_x_test", "_x_train", "_y_test", "_y_train")

    def __init__(
        self,
        client: int,
        x_train: XLike,
        y_train: np.ndarray,
        x_test: XLike,
        y_test: np.ndarray,
    ) -> None:
        self._client = int(client)
        self._x_train, self._y_train = x_train, y_train
        self._x_test, self._y_test = x_test, y_test
        self._ref: tuple[StoreRef, int] | None = None

    @property
    def client(self) -> int:
        """The client's id (its index in the manifest)."""
        return self._client

    @property
    def x_train(self) -> np.ndarray:
        """Training features, float32 (converted now when held by a store)."""
        return _materialized(self._x_train)

    @property
    def y_train(self) -> np.ndarray:
        """Training labels, int32."""
        return self._y_train

    @property
    def x_train_lazy(self) -> XLike:
        """Training features as held: a :class:`Features` view or the array."""
        return self._x_train

    @property
    def ref(self) -> StoreRef | None:
        """The files this client's data is read from (None: held arrays)."""
        return None if self._ref is None else self._ref[0]

    def __reduce__(self) -> tuple[Any, ...]:
        if self._ref is not None:
            return (_client_by_ref, self._ref)
        return (
            ClientData,
            (self.client, self.x_train, self.y_train, self.x_test, self.y_test),
        )

    def __repr__(self) -> str:
        where = "arrays" if self._ref is None else self._ref[0].prepared
        return (
            f"ClientData(client={self.client}, n_train={len(self._y_train)}, "
            f"n_test={len(self._y_test)}, from {where})"
        )


class FederatedData(_TestSplit):
    """The held-out global test set and every client's data, in client order.

    ``x_test`` converts the held-out features when read, like
    :attr:`ClientData.x_test`; :meth:`evaluation_splits` gives every test split as
    lazy views, for a pass over all of them that holds one batch at a time.
    """

    __slots__ = ("_clients", "_held_out", "_ref", "_spec", "_x_test", "_y_test")

    def __init__(
        self,
        spec: DatasetSpec,
        x_test: XLike,
        y_test: np.ndarray,
        clients: Sequence[ClientData],
        *,
        ref: StoreRef | None = None,
    ) -> None:
        self._spec = spec
        self._x_test, self._y_test = x_test, y_test
        self._clients = tuple(clients)
        self._ref = ref
        self._held_out: np.ndarray | None = None

    @property
    def spec(self) -> DatasetSpec:
        """What the data set promises (shape, classes, scale)."""
        return self._spec

    @property
    def clients(self) -> tuple[ClientData, ...]:
        """Every client's data, in client order."""
        return self._clients

    @property
    def ref(self) -> StoreRef | None:
        """The files this data is read from (None: held arrays)."""
        return self._ref

    def evaluation_splits(
        self, clients: Sequence[int] | None = None
    ) -> list[tuple[XLike, np.ndarray]]:
        """``(features, labels)`` of the held-out set, then of each client's local
        test split (of ``clients``, by id; default every client), features as lazy
        views (for :meth:`fedpipe.model.training.ModelRunner.predict_splits`)."""
        chosen = (
            self._clients if clients is None else [self._clients[c] for c in clients]
        )
        return [(self._held_out_rows(), self._y_test)] + [
            (c.x_test_lazy, c.y_test) for c in chosen
        ]

    def _held_out_rows(self) -> XLike:
        """The held-out features every round scores: converted once and kept
        when they take at most :data:`HELD_OUT_KEPT_BYTES` (a 1,000-client
        table's 8,000 rows were read and standardized again every round, 3.3
        ms of a 70 ms round), else the lazy view, read a batch at a time. The
        conversion is row by row, so kept rows have the bits of rows read.
        Only the evaluation's pass reads them; ``x_test`` still converts anew
        and ``x_test_lazy`` is the view."""
        x = self._x_test
        if not isinstance(x, Features):
            return x
        if self._held_out is None and math.prod(x.shape) * 4 <= HELD_OUT_KEPT_BYTES:
            kept = x[:]
            kept.setflags(write=False)  # shared by every round's evaluation
            self._held_out = kept
        return x if self._held_out is None else self._held_out

    def __reduce__(self) -> tuple[Any, ...]:
        if self._ref is not None:
            return (_federated_by_ref, (self._ref,))
        return (FederatedData, (self.spec, self.x_test, self.y_test, self.clients))

    def __repr__(self) -> str:
        where = "arrays" if self._ref is None else self._ref.prepared
        return (
            f"FederatedData({self.spec.name}, {len(self._clients)} clients, "
            f"{len(self._y_test)} held out, from {where})"
        )


def transformed_spec(spec: DatasetSpec, transform: Transform) -> DatasetSpec:
    """``spec`` with the input shape the model sees after ``transform`` (the
    features, then one indicator column per imputed column)."""
    if transform.is_identity:
        return spec
    return dataclasses.replace(spec, input_shape=(transform.n_outputs,))


def input_spec(prepared: Path | str, transform: Path | str) -> DatasetSpec:
    """The :class:`DatasetSpec` a model is built for: the prepared data's, with
    the input shape after the ``preprocess`` stage's transform."""
    return transformed_spec(prepared_spec(Path(prepared)), read_transform(transform))


def federated_data(
    features: np.ndarray,
    samples: pd.DataFrame,
    manifest: Mapping[str, Any],
    spec: DatasetSpec,
    *,
    ref: StoreRef | None = None,
    transform: Transform | None = None,
) -> FederatedData:
    """The held-out test set and each client's splits, as the manifest assigns.

    Features stay in ``features`` (e.g. the memory-mapped ``features.npy``) and
    are converted per split when read (:class:`Features`); labels and positions
    are held. ``transform`` (the ``preprocess`` stage's) is applied as they are
    read: the held-out set's by its federated fit, client ``i``'s splits by
    client ``i``'s. A client's ``feature_transform`` in the manifest (its
    feature skew, :mod:`fedpipe.data.partition.featureskew`) is applied to its
    splits first; the held-out set is never skewed. ``ref`` names the files
    they came from (:func:`open_federated` passes it): with it, the data
    pickles as a reference to them.
    """
    position = {sid: i for i, sid in enumerate(samples["sample_id"].astype(str))}
    labels = samples["label"].to_numpy(dtype=np.int64)
    if transform is None:
        transform = Transform(kind="identity")

    def split(
        ids: Sequence[str], client: int | None, skew: Any = None
    ) -> tuple[Features, np.ndarray]:
        idx = np.fromiter((position[i] for i in ids), dtype=np.int64, count=len(ids))
        rows = row_transform(transform, client)
        x = Features(features, idx, spec, rows, feature_transformer(skew))
        return x, labels[idx].astype(np.int32)

    x_test, y_test = split(manifest["heldout"], None)
    clients = []
    for index, entry in enumerate(manifest["clients"]):
        skew = entry.get("feature_transform")
        x_tr, y_tr = split(entry["train"], index, skew)
        x_te, y_te = split(entry["test"], index, skew)
        client = ClientData(entry["client"], x_tr, y_tr, x_te, y_te)
        if ref is not None:
            client._ref = (ref, index)
        clients.append(client)
    out_spec = transformed_spec(spec, transform)
    return FederatedData(out_spec, x_test, y_test, tuple(clients), ref=ref)


# ---------------------------------------------------------------- by reference

_OPEN_LIMIT = 4  # distinct (prepared, manifest) pairs a process keeps open
_opened: OrderedDict[tuple[str, str], FederatedData] = OrderedDict()
_opened_lock = threading.Lock()


def _store_files(
    prepared: Path, manifest: Path, transform: Path | None = None
) -> list[Path]:
    files = [
        prepared / FEATURES_FILE,
        prepared / SAMPLES_FILE,
        prepared / SCHEMA_FILE,
        manifest,
    ]
    return files if transform is None else [*files, transform]


def _absolute(path: Path | str) -> Path:
    # not resolve(): keep the user's path (symlinks included), which is what
    # another machine mounting the same storage at the same path sees
    return Path(os.path.abspath(path))


def _identity(files: Sequence[Path]) -> tuple[tuple[int, int], ...]:
    out = []
    for path in files:
        st = path.stat()
        out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


def _local_identity(files: Sequence[Path]) -> tuple[tuple[int, int], ...]:
    return tuple((st.st_ino, st.st_ctime_ns) for st in (p.stat() for p in files))


def open_federated(
    prepared: Path | str,
    manifest: Path | str,
    transform: Path | str | None = None,
) -> FederatedData:
    """The federated data of a prepared directory and a partition manifest.

    Opened once per process and kept (the last few pairs of paths), re-opened
    when any file's size or modification time changes, so a change on disk is
    never served stale. Features stay memory-mapped; the result and its clients
    pickle as references to these files (:class:`StoreRef`).

    Parameters
    ----------
    prepared : Path
        A prepared directory (``features.npy``, ``samples.parquet``,
        ``schema.json``).
    manifest : Path
        The partition stage's ``manifest.json``.
    transform : Path, optional
        The ``preprocess`` stage's ``transform.json``, applied as the rows are
        read (default: none, the rows as converted).
    """
    prepared, manifest = _absolute(prepared), _absolute(manifest)
    fitted = None if transform is None else _absolute(transform)
    files = _store_files(prepared, manifest, fitted)
    with _opened_lock:
        identity = _identity(files)
        # inode and ctime too, for this process's cache only: a long-lived process
        # (the warm worker of `dvc repro`) outlives checkouts, and DVC may put a
        # file back with its recorded mtime and size
        key = (str(prepared), str(manifest), str(fitted), _local_identity(files))
        cached = _opened.get(key)
        if cached is not None and cached.ref is not None:
            if cached.ref.identity == identity:
                _opened.move_to_end(key)
                return cached
        ref = StoreRef(
            str(prepared),
            str(manifest),
            identity,
            None if fitted is None else str(fitted),
        )
        data = federated_data(
            open_features(prepared),
            read_samples(prepared),
            read_json(manifest),
            prepared_spec(prepared),
            ref=ref,
            transform=None if fitted is None else read_transform(fitted),
        )
        _opened[key] = data
        _opened.move_to_end(key)
        while len(_opened) > _OPEN_LIMIT:
            _opened.popitem(last=False)
        return data


def forget_opened() -> None:
    """Drop every data set :func:`open_federated` keeps (as a new process would
    start); later calls open the files again."""
    with _opened_lock:
        _opened.clear()


class StoreChanged(FedpipeError, RuntimeError):
    """A data reference names files this process cannot open as they were."""


def _federated_by_ref(ref: StoreRef) -> FederatedData:
    """Unpickle a :class:`FederatedData`: open the files it names, here."""
    missing = [f for f in ref.files() if not f.is_file()]
    if missing:
        raise StoreChanged(
            f"{missing[0]}: not found in this process ({os.uname().nodename}): "
            "client data travels by reference, so every Dask worker opens the "
            "run's prepared data itself and needs the project directory at the "
            "same path (shared storage); see docs/scaling.md"
        )
    data = open_federated(ref.prepared, ref.manifest, ref.transform)
    if data.ref != ref:
        assert data.ref is not None
        changed = next(
            f
            for f, a, b in zip(
                ref.files(), ref.identity, data.ref.identity, strict=True
            )
            if a != b
        )
        raise StoreChanged(
            f"{changed}: not the file the run opened (size or modification time "
            f"differs on {os.uname().nodename}): it changed during the run, or "
            "this worker sees a copy; workers need the run's project on shared "
            "storage at the same path"
        )
    return data


def _client_by_ref(ref: StoreRef, index: int) -> ClientData:
    """Unpickle a :class:`ClientData`: client ``index`` of the files ``ref``
    names, opened in this process (once: :func:`open_federated` keeps them)."""
    return _federated_by_ref(ref).clients[index]
