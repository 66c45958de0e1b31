"""The corpus's data: a table of Gaussian blobs, one site per client, with the
data-side causes planted into it.

Why a generated table and not new ``faults.*`` params: a client with noisy
labels, wrongly scaled features or shifted inputs is a property of that client's
*data*, and a user meets it in the data they bring. Planting it in the project's
own table (one ``site`` column, ``partition.method: natural``) exercises the
doctor on exactly what a user's run would record, through the unchanged pipeline,
and leaves the library without fault switches that only the corpus would use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: features and classes of every corpus table
N_FEATURES = 10
N_CLASSES = 4


def site_name(k: int) -> str:
    """Site ``k``'s id; zero-padded so sorted order is client order."""
    return f"site-{k:02d}"


def blob_table(
    *, clients: int, rows_per_client: int, seed: int, spread: float = 1.6
) -> pd.DataFrame:
    """``N_CLASSES`` Gaussian blobs in ``N_FEATURES`` features, one site per client.

    Centers are drawn with std ``spread`` around 0 and samples with std 1 around
    them, so a small model needs a few rounds (not one batch) to separate them.
    Columns ``f0`` .. ``f9``, ``label`` (0..3) and ``site``.
    """
    rng = np.random.default_rng(seed)
    n = clients * rows_per_client
    labels = rng.integers(0, N_CLASSES, size=n)
    centers = rng.normal(0.0, spread, size=(N_CLASSES, N_FEATURES))
    x = centers[labels] + rng.normal(0.0, 1.0, size=(n, N_FEATURES))
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(N_FEATURES)])
    frame["label"] = labels
    frame["site"] = [site_name(i % clients) for i in range(n)]
    return frame


def plant(frame: pd.DataFrame, spec: Mapping[str, Any], seed: int) -> pd.DataFrame:
    """``frame`` with the planted data causes of ``spec`` applied.

    ``spec`` keys (all optional): ``noisy_labels`` (site indices whose labels are
    redrawn uniformly), ``scaled_features`` (``{sites: [...], factor: F}``: those
    sites' features times F, another unit), ``shifted_features`` (``{share: S,
    shift: D, scale: F}``: the first share S of the sites see ``F * x + D``,
    another preprocessing), ``labels_offset`` (added to every label: labels the
    loss cannot take).
    """
    out = frame.copy()
    rng = np.random.default_rng(seed + 1)
    features = [c for c in out.columns if c.startswith("f")]
    sites = sorted(out["site"].unique())
    for k in spec.get("noisy_labels", []):
        rows = out["site"] == site_name(k)
        out.loc[rows, "label"] = rng.integers(0, N_CLASSES, size=int(rows.sum()))
    scaled = spec.get("scaled_features")
    if scaled:
        rows = out["site"].isin([site_name(k) for k in scaled["sites"]])
        out.loc[rows, features] = out.loc[rows, features] * float(scaled["factor"])
    shifted = spec.get("shifted_features")
    if shifted:
        chosen = sites[: max(1, round(shifted["share"] * len(sites)))]
        rows = out["site"].isin(chosen)
        block = out.loc[rows, features] * float(shifted.get("scale", 1.0))
        out.loc[rows, features] = block + float(shifted.get("shift", 0.0))
    if spec.get("labels_offset"):
        out["label"] = out["label"] * int(spec["labels_offset"])
    return out


def write_blob_table(
    path: Path,
    *,
    clients: int,
    rows_per_client: int,
    seed: int,
    spread: float = 1.6,
    plants: Mapping[str, Any] | None = None,
) -> Path:
    """Write the corpus table (planted as ``plants`` says) to ``path`` as CSV."""
    frame = blob_table(
        clients=clients, rows_per_client=rows_per_client, seed=seed, spread=spread
    )
    frame = plant(frame, plants or {}, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path
