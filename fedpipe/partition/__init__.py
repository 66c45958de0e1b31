"""Client partitioning of a labelled sample pool (numpy only).

Public API: the :class:`Partitioner` implementations, the ``PARTITIONERS``
registry with :func:`make_partitioner`, and the manifest helpers.
"""

from __future__ import annotations

from fedpipe.partition.base import Partitioner, PartitionError
from fedpipe.partition.dirichlet import DirichletPartitioner
from fedpipe.partition.iid import IidPartitioner
from fedpipe.partition.manifest import (
    build_manifest,
    check_partition,
    label_skew,
    split_heldout,
)

__all__ = [
    "PARTITIONERS",
    "DirichletPartitioner",
    "IidPartitioner",
    "PartitionError",
    "Partitioner",
    "build_manifest",
    "check_partition",
    "label_skew",
    "make_partitioner",
    "split_heldout",
]

PARTITIONERS: dict[str, type[Partitioner]] = {
    cls.name: cls for cls in (DirichletPartitioner, IidPartitioner)
}
"""Registry of partitioner classes keyed by their ``name`` (``partition.method``)."""


def make_partitioner(method: str, *, alpha: float, min_samples: int) -> Partitioner:
    """Instantiate the registered partitioner for ``partition.method``.

    Parameters
    ----------
    method : str
        Registry key (``partition.method``), e.g. ``"iid"`` or ``"dirichlet"``;
        matched exactly.
    alpha : float
        ``partition.alpha``; used by ``"dirichlet"``, ignored by ``"iid"``.
    min_samples : int
        ``partition.min_samples``; enforced by every partitioner.

    Returns
    -------
    Partitioner
        The configured partitioner.

    Raises
    ------
    PartitionError
        If ``method`` is not registered, or the parameters are invalid for it.
    """
    try:
        cls = PARTITIONERS[method]
    except (KeyError, TypeError):
        allowed = ", ".join(sorted(PARTITIONERS))
        raise PartitionError(
            f"partition.method: unknown {method!r}; allowed: {allowed}"
        ) from None
    return cls.from_params(alpha=alpha, min_samples=min_samples)
