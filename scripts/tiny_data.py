"""Tiny own data and tiny params, shared by the scripts and the end-to-end tests.

An image folder of two learnable classes and a CSV table of three Gaussian blobs
with a natural-client column, both seeded; the built-in digits prepared as
arrays; the params that make a project train in seconds (``TINY``) and the merge
that lays overrides on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY = {
    "seed": 7,
    "federation": {"clients": 3, "rounds": 4, "fraction_fit": 0.6, "min_clients": 2},
    "partition": {"method": "iid", "min_samples": 50},
    "train": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "model": {"name": "mlp"},
}


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on top, section by section."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            merge(base.get(key) or {}, value) if isinstance(value, dict) else value
        )
    return out


def write_image_folder(root: Path, *, per_class: int = 60, seed: int = 0) -> Path:
    """Two learnable classes of small images, mixed sizes and formats.

    ``with_mask`` images have a bright lower half, ``without_mask`` a bright upper
    half; sizes vary from 24 to 40 pixels; PNG and JPEG alternate (``img_000`` is
    a PNG); a few are grayscale.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for label, name in enumerate(("with_mask", "without_mask")):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            h, w = (int(v) for v in rng.integers(24, 41, size=2))
            img = rng.integers(0, 60, size=(h, w, 3)).astype(np.uint8)
            half = slice(h // 2, h) if label == 0 else slice(0, h // 2)
            img[half] = rng.integers(180, 256, size=img[half].shape)
            pil = Image.fromarray(img)
            if i % 7 == 0:
                pil = pil.convert("L")
            suffix = "png" if i % 2 == 0 else "jpg"
            pil.save(folder / f"img_{i:03d}.{suffix}")
    return root


def write_table(path: Path, *, rows: int = 300, seed: int = 0) -> Path:
    """Three Gaussian blobs in 8 features (``f0``..``f7``), integer labels
    (``label``) and a hospital column (3 sites, ``site-0``..``site-2``)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, size=rows)
    centers = rng.normal(0, 3, size=(3, 8))
    x = centers[labels] + rng.normal(0, 1, size=(rows, 8))
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(8)])
    df["label"] = labels
    df["hospital"] = [f"site-{i % 3}" for i in range(rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def ingest_digits(
    out_dir: Path, *, source: str, n_samples: int | None = None
) -> tuple[Any, Any]:
    """The built-in 5,000 digits (the first ``n_samples``, or all) prepared
    under ``out_dir`` by ``ingest_arrays`` as 28x28x1 uint8 images of classes
    0..9 named ``source``; their samples table and ``DatasetSpec``."""
    import numpy as np

    from fedpipe.data.ingest import ingest_arrays, read_samples, read_schema
    from fedpipe.data.sources import DatasetSpec, load_mnist5k

    table = load_mnist5k().iloc[:n_samples]
    x = table.filter(like="px").to_numpy(dtype=np.uint8).reshape(-1, 28, 28, 1)
    y = table["label"].to_numpy(dtype=np.int64)
    ingest_arrays(
        x,
        y,
        out_dir=out_dir,
        source=source,
        class_names=[str(c) for c in range(10)],
        value_range=(0.0, 255.0),
        scale=255.0,
    )
    return read_samples(out_dir), DatasetSpec.from_schema(read_schema(out_dir))
