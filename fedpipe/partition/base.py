"""Partitioner contract and shared validation for splitting a label array.

A partitioner assigns every sample of a (training) pool to exactly one of
``n_clients`` federated clients. It works on a 1-D label array only; the
returned positions index into that array. All randomness comes from the
``np.random.Generator`` passed in, so the same generator state always yields
the same partition.
"""

from __future__ import annotations

import abc
import numbers
from typing import ClassVar

import numpy as np


class PartitionError(ValueError):
    """A partitioning request that cannot be satisfied.

    The message names the configuration key at fault (for example
    ``partition.min_samples``) and, where possible, a value that would work.
    """


class Partitioner(abc.ABC):
    """Base class for label-array partitioners.

    Subclasses set the class attribute ``name`` (the registry key used by
    :func:`fedpipe.partition.make_partitioner`) and implement :meth:`partition`.
    Constructors are keyword-only.

    Attributes
    ----------
    name : ClassVar[str]
        Registry key, e.g. ``"iid"`` or ``"dirichlet"``.
    """

    name: ClassVar[str]

    @classmethod
    def from_params(cls, *, alpha: float, min_samples: int) -> Partitioner:
        """Build the partitioner from the shared ``partition.*`` parameters.

        Used by :func:`fedpipe.partition.make_partitioner`. Each subclass takes
        the parameters it understands and ignores the rest.

        Parameters
        ----------
        alpha : float
            Value of ``partition.alpha`` (only meaningful to some methods).
        min_samples : int
            Value of ``partition.min_samples``.

        Returns
        -------
        Partitioner
            A configured instance of ``cls``.
        """
        raise NotImplementedError(f"{cls.__name__} does not implement from_params")

    @abc.abstractmethod
    def partition(
        self, labels: np.ndarray, n_clients: int, rng: np.random.Generator
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


def validate_min_samples(min_samples: int) -> int:
    """Check ``partition.min_samples`` and return it as a Python ``int``.

    Parameters
    ----------
    min_samples : int
        Candidate minimum number of samples per client; must be ``>= 0``.

    Returns
    -------
    int
        The validated value.

    Raises
    ------
    PartitionError
        If it is not an integer ``>= 0``.
    """
    if (
        isinstance(min_samples, bool)
        or not isinstance(min_samples, numbers.Integral)
        or min_samples < 0
    ):
        raise PartitionError(
            f"partition.min_samples must be an integer >= 0, got {min_samples!r}"
        )
    return int(min_samples)


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
