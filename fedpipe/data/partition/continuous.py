"""Continuous partitioner: clients by a real-valued property blended with noise.

As flwr-datasets' ``ContinuousPartitioner``: each sample's property (an image's
mean intensity or contrast, or a table column) is standardised to ``z``, blended
with standard normal noise ``e`` by the strictness ``s`` in ``[0, 1]`` into
``b = s * z + (1 - s) * e``, and the samples sorted by ``b`` are cut into
``n_clients`` near-equal runs: client 0 holds the lowest scores. ``s = 0`` is an
IID partition, ``s = 1`` follows the property's ranking exactly (strong feature
skew: the darkest images on one client, the brightest on another).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np

from fedpipe.core.component import REQUIRED, Setting
from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
    PartitionError,
    check_min_samples_feasible,
    validate_inputs,
)

STRICTNESS = Setting(
    "strictness",
    float,
    default=REQUIRED,
    ge=0.0,
    le=1.0,
    params_default=0.5,
    help="how strictly clients follow the property (0 = iid, 1 = sorted)",
)
CONTINUOUS_BY = Setting(
    "continuous_by",
    str,
    default="mean_intensity",
    params_default="mean_intensity",
    help="images: mean_intensity | contrast; tables: a feature column",
)

IMAGE_PROPERTIES = ("mean_intensity", "contrast")
"""Image properties ``partition.continuous_by`` may name."""


class ContinuousPartitioner(Partitioner):
    """Sort by a blended, standardised property; cut into near-equal runs.

    Parameters
    ----------
    strictness : float
        ``partition.strictness`` in ``[0, 1]``. No default.
    continuous_by : str, optional
        ``partition.continuous_by``: ``mean_intensity`` (an image's mean value)
        or ``contrast`` (its standard deviation) for images, a feature column's
        name for tables. Default ``mean_intensity``.
    min_samples : int, optional
        ``partition.min_samples``. Default ``0``.

    Raises
    ------
    PartitionError
        A strictness outside ``[0, 1]`` or an empty ``continuous_by``.
    """

    name: ClassVar[str] = "continuous"
    settings: ClassVar[tuple[str, ...]] = (STRICTNESS, CONTINUOUS_BY, MIN_SAMPLES)
    reads_inputs: ClassVar[bool] = True

    def __init__(
        self,
        *,
        strictness: float,
        continuous_by: str = "mean_intensity",
        min_samples: int = 0,
    ) -> None:
        self.strictness = self.checked(STRICTNESS, strictness)
        if not isinstance(continuous_by, str) or not continuous_by:
            raise PartitionError(
                "partition.continuous_by must name mean_intensity, contrast or a "
                f"table column, got {continuous_by!r}"
            )
        self.continuous_by = continuous_by
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)

    def sample_values(
        self,
        chunks: Iterable[np.ndarray],
        *,
        input_shape: Sequence[int],
        feature_names: Sequence[str] | None = None,
    ) -> np.ndarray:
        """The property of every sample, from its scaled rows given in chunks.

        Raises
        ------
        PartitionError
            A property that does not fit the data (an image property of a table,
            an unknown column, a column with missing values), naming
            ``partition.continuous_by`` and what it accepts.
        """
        by = self.continuous_by
        if len(input_shape) == 3:
            if by not in IMAGE_PROPERTIES:
                raise PartitionError(
                    f"partition.continuous_by: {by!r} is not an image property; "
                    f"allowed: {', '.join(IMAGE_PROPERTIES)}"
                )
            reduce = np.mean if by == "mean_intensity" else np.std
            parts = [
                reduce(x.reshape(len(x), -1), axis=1, dtype=np.float64) for x in chunks
            ]
        else:
            names = [str(n) for n in (feature_names or [])]
            if by not in names:
                shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
                raise PartitionError(
                    f"partition.continuous_by: {by!r} is not a feature column of "
                    f"the table; allowed: {shown}"
                )
            column = names.index(by)
            parts = [x[:, column].astype(np.float64) for x in chunks]
        values = np.concatenate(parts) if parts else np.empty(0)
        if np.isnan(values).any():
            raise PartitionError(
                f"partition.continuous_by: column {by!r} has missing values; "
                "choose a complete column"
            )
        return values

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
        values: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Partition by the blended property; see :meth:`Partitioner.partition`.

        ``values`` (one real number per sample, :meth:`sample_values`) is
        required; ``groups`` is ignored.

        Raises
        ------
        PartitionError
            Missing or misaligned ``values``, a constant property with
            ``strictness > 0``, or ``min_samples`` that cannot be met.
        """
        labels = validate_inputs(labels, n_clients)
        n = labels.shape[0]
        if values is None or np.shape(values) != (n,):
            raise PartitionError(
                "partition.method=continuous needs one property value per sample "
                f"(partition.continuous_by), got {np.shape(values)} for {n} samples"
            )
        check_min_samples_feasible(n, n_clients, self.min_samples)
        values = np.asarray(values, dtype=np.float64)
        std = float(values.std())
        if std < 1e-9 and self.strictness > 0:
            raise PartitionError(
                f"partition.continuous_by={self.continuous_by}: every sample has "
                "the same value, so there is nothing to sort by; choose another "
                "property or set partition.strictness: 0"
            )
        z = (values - values.mean()) / std if std > 0 else np.zeros(n)
        noise = rng.standard_normal(n)
        blended = self.strictness * z + (1.0 - self.strictness) * noise
        order = np.argsort(blended, kind="stable").astype(np.int64)
        return [np.sort(part) for part in np.array_split(order, n_clients)]
