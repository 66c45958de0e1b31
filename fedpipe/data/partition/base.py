"""Partitioner contract and shared validation for splitting a label array.

A partitioner assigns every sample of a (training) pool to exactly one of
``n_clients`` federated clients. It works on a 1-D label array (plus, for the
``"natural"`` partitioner, a 1-D array of per-sample group keys); the returned
positions index into that array. All randomness comes from the
``np.random.Generator`` passed in, so the same generator state always yields
the same partition.

Settings arrive as ``partition.*`` keyword values through
:meth:`Partitioner.from_params`; each class declares the keys it reads in
``Partitioner.settings`` and ignores the rest.
"""

from __future__ import annotations

import abc
import inspect
import numbers
from typing import Any, ClassVar, Self

import numpy as np

from fedpipe.core.component import Component, Setting
from fedpipe.core.errors import FedpipeError

MIN_SAMPLES = Setting(
    "min_samples",
    int,
    default=0,
    ge=0,
    help="every client gets at least this many samples",
)
"""``partition.min_samples``, read by every partitioner (``params.yaml`` holds
it as a key of its own: at least 1, default 10)."""


class PartitionError(FedpipeError, ValueError):
    """A partitioning request that cannot be satisfied.

    The message names the configuration key at fault (for example
    ``partition.min_samples``) and, where possible, a value that would work.
    """


class Partitioner(Component, abc.ABC):
    """Base class for label-array partitioners.

    Subclasses set the class attributes ``name`` (their line in
    :data:`fedpipe.core.registry.PARTITIONERS`, used by
    :func:`fedpipe.data.partition.make_partitioner`) and ``settings`` (the
    ``partition.*`` keys their constructor takes, declared as
    :class:`~fedpipe.core.component.Setting` s), and implement
    :meth:`partition`. Constructors are keyword-only and their keyword names
    equal the ``partition.*`` keys, so :meth:`from_params` needs no override.

    Attributes
    ----------
    name : ClassVar[str]
        Registry key, e.g. ``"iid"`` or ``"dirichlet"``.
    settings : ClassVar[tuple[str, ...]]
        The ``partition.*`` keys this partitioner reads, e.g.
        ``(ALPHA, MIN_SAMPLES)``. A key is required when the constructor
        gives it no default (its declared default is ``REQUIRED``).
    """

    name: ClassVar[str]
    section: ClassVar[str] = "partition"
    settings: ClassVar[tuple[str, ...]] = ()
    error: ClassVar[type[ValueError]] = PartitionError
    min_samples: int
    """``partition.min_samples``, which every partitioner reads."""
    reads_inputs: ClassVar[bool] = False
    """True when :meth:`partition` needs ``values=``, one real number per sample
    computed from the inputs by the class's ``sample_values(chunks, *,
    input_shape, feature_names)`` (the ``"continuous"`` partitioner)."""

    @classmethod
    def from_params(cls, **settings: Any) -> Self:
        """Build the partitioner from ``partition.*`` values given as keywords.

        Used by :func:`fedpipe.data.partition.make_partitioner`. Only the keys in
        :attr:`settings` are passed to the constructor; every other key (for
        example ``alpha`` for ``"iid"``, or keys added later) is ignored. Keys
        this class reads that are absent or ``None`` (unset in the config) fall
        back to the constructor's defaults.

        Parameters
        ----------
        **settings : object
            ``partition.*`` values by key, e.g. ``alpha=0.5, min_samples=10``.

        Returns
        -------
        Partitioner
            A configured instance of ``cls``.

        Raises
        ------
        PartitionError
            If a key without a constructor default is missing or ``None`` (the
            message names ``partition.<key>`` and the method), or a value is
            invalid.
        """
        given = {
            key: settings[key] for key in cls.settings if settings.get(key) is not None
        }
        params = inspect.signature(cls).parameters
        missing = [
            key
            for key in cls.settings
            if key not in given and params[key].default is inspect.Parameter.empty
        ]
        if missing:
            keys = ", ".join(f"partition.{key}" for key in missing)
            raise PartitionError(f"{keys} must be set for partition.method={cls.name}")
        return cls(**given)

    def sample_groups(self, samples: Any) -> np.ndarray | None:
        """Each sample's natural client key, for :meth:`partition`'s ``groups``.

        Parameters
        ----------
        samples : DataFrame
            The prepared ``samples.parquet`` (``sample_id``, ``label``, ...).

        Returns
        -------
        np.ndarray or None
            One key per row of ``samples``; ``None`` (the default: every
            partitioner but ``"natural"``) when the partition needs none.
        """
        return None

    def provenance(self) -> dict[str, Any]:
        """What the manifest's ``params`` record beyond the settings (the
        ``"natural"`` partitioner: its mapping file's SHA-256). Default none."""
        return {}

    def checked_labels(self, labels: np.ndarray, n_clients: int) -> np.ndarray:
        """``labels`` as a 1-D array, once :func:`validate_inputs` and
        :func:`check_min_samples_feasible` (with ``self.min_samples``) pass:
        how a :meth:`partition` that checks nothing else first begins."""
        arr = validate_inputs(labels, n_clients)
        check_min_samples_feasible(arr.shape[0], n_clients, self.min_samples)
        return arr

    @abc.abstractmethod
    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Return one sorted int64 index array per client; every index exactly once.

        The arrays hold positions into ``labels``.

        Parameters
        ----------
        labels : np.ndarray
            1-D array of class labels, one per sample of the pool to split.
        n_clients : int
            Number of clients, ``>= 1``.
        rng : np.random.Generator
            Source of all randomness; no global random state is used.
        groups : np.ndarray or None, optional
            1-D natural client key per sample (e.g. a writer or hospital id),
            aligned with ``labels``. Default ``None``. Only the ``"natural"``
            partitioner uses it; every other partitioner ignores it. A
            partitioner with :attr:`reads_inputs` also takes ``values=``, one
            real number per sample (only it is passed them).

        Returns
        -------
        list of np.ndarray
            Exactly ``n_clients`` arrays. Array ``k`` holds, in ascending
            order and with dtype ``int64``, the positions in ``labels`` assigned
            to client ``k``. Together the arrays contain every position
            ``0 .. len(labels) - 1`` exactly once.

        Raises
        ------
        PartitionError
            If the inputs are invalid or the partitioner's constraints (for
            example ``partition.min_samples``) cannot be met.
        """


def validate_inputs(labels: np.ndarray, n_clients: int) -> np.ndarray:
    """Check the common ``partition`` arguments and return labels as a 1-D array.

    Parameters
    ----------
    labels : np.ndarray
        Candidate label array; must be 1-D.
    n_clients : int
        Candidate number of clients; must be an integer ``>= 1``.

    Returns
    -------
    np.ndarray
        ``labels`` as a numpy array (no copy if already one).

    Raises
    ------
    PartitionError
        If ``labels`` is not 1-D or ``n_clients`` is not a positive integer.
    """
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise PartitionError(f"labels must be a 1-D array, got shape {arr.shape}")
    if (
        isinstance(n_clients, bool)
        or not isinstance(n_clients, numbers.Integral)
        or n_clients < 1
    ):
        raise PartitionError(
            f"federation.clients must be an integer >= 1, got {n_clients!r}"
        )
    return arr


def check_min_samples_feasible(
    n_samples: int, n_clients: int, min_samples: int
) -> None:
    """Raise if ``min_samples`` per client exceeds what ``n_samples`` can supply.

    Parameters
    ----------
    n_samples : int
        Size of the pool being partitioned.
    n_clients : int
        Number of clients.
    min_samples : int
        Required minimum per client.

    Raises
    ------
    PartitionError
        If ``min_samples * n_clients > n_samples``; the message gives the
        largest value of ``partition.min_samples`` that could work.
    """
    if min_samples * n_clients > n_samples:
        best = n_samples // n_clients
        raise PartitionError(
            f"partition.min_samples={min_samples} cannot be met: {n_samples} "
            f"samples over {n_clients} clients give at most {best} per client; "
            f"use partition.min_samples <= {best} or fewer clients"
        )


def as_shares(pieces: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Concatenate each client's pieces into one sorted ``int64`` array.

    Parameters
    ----------
    pieces : list of list of np.ndarray
        Per client, the position arrays it was dealt (possibly none).

    Returns
    -------
    list of np.ndarray
        One sorted ``int64`` array per client (empty if it got no pieces).
    """
    return [
        np.sort(np.concatenate(p)).astype(np.int64, copy=False)
        if p
        else np.empty(0, dtype=np.int64)
        for p in pieces
    ]


def as_python(value: object) -> object:
    """A numpy scalar as the Python value it holds, for readable messages.

    Parameters
    ----------
    value : object
        Any value, e.g. an element of a numpy array.

    Returns
    -------
    object
        ``value.item()`` for numpy scalars, else ``value`` unchanged.
    """
    return value.item() if isinstance(value, np.generic) else value
