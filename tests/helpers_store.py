"""A small prepared directory and manifest for the tests of data by reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpipe.config.params import PartitionParams
from fedpipe.core.jsonio import write_json
from fedpipe.data.ingest import ingest_arrays, read_samples
from fedpipe.data.partition.deal import partition_table


class CountingStore:
    """An array that records the rows of every read (to see what is read when)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array, self.reads = array, []

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        self.reads.append(len(idx))
        return self.array[idx]


def prepared_store(root: Path, n: int, *, shape: tuple[int, ...] = (6, 6, 1)) -> Path:
    """A prepared directory of ``n`` random uint8 images and its manifest."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    y = np.arange(n) % 3
    prepared = root / "prepared"
    ingest_arrays(
        x,
        y,
        out_dir=prepared,
        source="random",
        class_names=["a", "b", "c"],
        value_range=(0.0, 255.0),
        scale=255.0,
    )
    settings = PartitionParams().model_dump(exclude={"method", "local_test_fraction"})
    settings["min_samples"] = 2
    manifest = partition_table(
        read_samples(prepared),
        classes=[0, 1, 2],
        seed=0,
        test_fraction=0.2,
        method="iid",
        n_clients=3,
        local_test_fraction=0.2,
        dedupe=False,
        settings=settings,
    )
    write_json(root / "manifest.json", manifest)
    return prepared
