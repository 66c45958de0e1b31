"""Client partitioning of a labelled sample pool (numpy only at import time).

Public API:

- the :class:`Partitioner` implementations, one per file: ``iid``
  (:class:`IidPartitioner`), ``dirichlet`` (:class:`DirichletPartitioner`),
  ``pathological`` (:class:`PathologicalPartitioner`), ``shards``
  (:class:`ShardsPartitioner`), ``quantity`` (:class:`QuantitySkewPartitioner`)
  ``natural`` (:class:`NaturalIdPartitioner`) and ``continuous``
  (:class:`ContinuousPartitioner`);
- feature skew on top of any of them (:mod:`.featureskew`:
  :func:`client_feature_transforms`, :func:`apply_feature_transform`);
- ``PARTITIONERS`` (the registry's built-ins, resolved) and
  :func:`make_partitioner`, which reads :mod:`fedpipe.core.registry`;
- the manifest helpers (:func:`split_heldout`, :func:`check_partition`,
  :func:`build_manifest`, :func:`label_skew`);
- the partition stage's work on a prepared data set,
  :func:`fedpipe.data.partition.deal.partition_table` (imported from its module:
  it reads pandas frames and the prepared features);
- the diagnostics (:func:`class_count_table`, :func:`label_heatmap`,
  :func:`skew_summary`, :func:`feature_stats`, :func:`feature_skew_plot`),
  which import pandas / matplotlib when called.
"""

from __future__ import annotations

from fedpipe.core import registry
from fedpipe.data.partition.base import Partitioner, PartitionError
from fedpipe.data.partition.continuous import ContinuousPartitioner
from fedpipe.data.partition.diagnostics import (
    class_count_table,
    feature_skew_plot,
    feature_stats,
    label_heatmap,
    skew_summary,
)
from fedpipe.data.partition.dirichlet import DirichletPartitioner
from fedpipe.data.partition.featureskew import (
    apply_feature_transform,
    client_feature_transforms,
)
from fedpipe.data.partition.iid import IidPartitioner
from fedpipe.data.partition.manifest import (
    build_manifest,
    check_partition,
    label_skew,
    split_heldout,
)
from fedpipe.data.partition.natural import NaturalIdPartitioner
from fedpipe.data.partition.pathological import PathologicalPartitioner
from fedpipe.data.partition.quantity import QuantitySkewPartitioner
from fedpipe.data.partition.shards import ShardsPartitioner

__all__ = [
    "PARTITIONERS",
    "ContinuousPartitioner",
    "DirichletPartitioner",
    "IidPartitioner",
    "NaturalIdPartitioner",
    "PartitionError",
    "Partitioner",
    "apply_feature_transform",
    "PathologicalPartitioner",
    "QuantitySkewPartitioner",
    "ShardsPartitioner",
    "build_manifest",
    "check_partition",
    "class_count_table",
    "client_feature_transforms",
    "feature_skew_plot",
    "feature_stats",
    "label_heatmap",
    "label_skew",
    "make_partitioner",
    "skew_summary",
    "split_heldout",
]

PARTITIONERS: dict[str, type[Partitioner]] = registry.classes("partitioner")
"""The built-in partitioners by ``partition.method`` (the registry's table,
:data:`fedpipe.core.registry.PARTITIONERS`, resolved)."""


def make_partitioner(method: str, **settings: object) -> Partitioner:
    """Instantiate the registered partitioner for ``partition.method``.

    Parameters
    ----------
    method : str
        A name in the registry (``partition.method``), e.g. ``"iid"`` or
        ``"shards"``; matched exactly.
    **settings : object
        The ``partition.*`` values as keywords: ``alpha``, ``min_samples``,
        ``classes_per_client``, ``shards_per_client``, ``quantity_sigma``,
        ``min_classes`` and any added later. Each partitioner takes the keys
        in its ``settings`` attribute and ignores the rest (see
        :meth:`Partitioner.from_params`).

    Returns
    -------
    Partitioner
        The configured partitioner.

    Raises
    ------
    PartitionError
        If ``method`` is not registered (names ``partition.method`` and lists
        the allowed names), a setting the method requires is missing, or a
        setting is invalid for it.
    """
    if not registry.is_builtin("partitioner", method):
        raise PartitionError(registry.unknown("partitioner", method))
    cls: type[Partitioner] = registry.get("partitioner", method)
    return cls.from_params(**settings)
