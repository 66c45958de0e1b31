"""Diagnostics of a partition manifest: class-count table, heatmap, skew summary.

All three read the manifest returned by
:func:`fedpipe.data.partition.manifest.build_manifest` (or its JSON round trip) and
nothing else. pandas and matplotlib are imported inside the functions that need
them, so importing :mod:`fedpipe.data.partition` stays numpy-only.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpipe.data.partition.base import PartitionError
from fedpipe.data.partition.manifest import label_skew

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["class_count_table", "label_heatmap", "skew_summary"]

_ANNOTATE_MAX_CELLS = 400  # write counts into the heatmap cells up to this many
_TICK_EVERY_CLIENT_MAX = 60  # label every client row up to this many clients


def _count_matrix(manifest: dict, which: str) -> np.ndarray:
    """``(n_clients, n_classes)`` int64 matrix of ``{which}_class_counts``."""
    n_classes = len(manifest["classes"])
    rows = [c[f"{which}_class_counts"] for c in manifest["clients"]]
    for client, row in zip(manifest["clients"], rows, strict=True):
        if len(row) != n_classes:
            raise PartitionError(
                f"manifest client {client['client']}: {which}_class_counts has "
                f"{len(row)} entries but there are {n_classes} classes"
            )
    return np.array(rows, dtype=np.int64).reshape(len(rows), n_classes)


def class_count_table(
    manifest: dict, class_names: Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per client with its split sizes and per-class train counts.

    Parameters
    ----------
    manifest : dict
        Output of :func:`~fedpipe.data.partition.manifest.build_manifest`.
    class_names : sequence of str, optional
        Name of each class index (``schema.json`` ``class_names``, e.g. ``cat``,
        ``dog``): the per-class columns are named by these. Default: by the class
        value itself.

    Returns
    -------
    pandas.DataFrame
        Columns ``client``, ``n_train``, ``n_test`` (lengths of the client's
        local train and test id lists), then one ``int64`` column per class
        in ``manifest["classes"]`` order, named by its class name (or by the
        class value itself, e.g. ``0`` .. ``9``), holding the client's train
        count of that class.
        Rows are in manifest client order.

    Raises
    ------
    PartitionError
        If a client's ``train_class_counts`` does not match ``classes``.
    """
    import pandas as pd

    classes: list[Any] = list(manifest["classes"])
    if class_names is not None:
        classes = [_name_of(int(c), class_names) for c in classes]
    counts = _count_matrix(manifest, "train")
    table = pd.DataFrame(
        {
            "client": [int(c["client"]) for c in manifest["clients"]],
            "n_train": [len(c["train"]) for c in manifest["clients"]],
            "n_test": [len(c["test"]) for c in manifest["clients"]],
        },
        dtype=np.int64,
    )
    per_class = pd.DataFrame(counts, columns=classes, dtype=np.int64)
    return pd.concat([table, per_class], axis=1)


def _name_of(label: int, class_names: Sequence[str]) -> str:
    """The name of class index ``label`` (its number as text if it has none)."""
    return str(class_names[label]) if 0 <= label < len(class_names) else str(label)


def _describe(manifest: dict) -> str:
    params = manifest.get("params") or {}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"{manifest.get('method', '?')}" + (f" ({shown})" if shown else "")


def label_heatmap(manifest: dict, path: Path) -> None:
    """Write a PNG heatmap of each client's train label distribution.

    Rows are clients (labelled ``"k (n=<train size>)"`` when there are at most
    60), columns are classes; a cell's colour is the class's share of the
    client's train samples (0..1, shared colour scale), and with at most 400
    cells it is annotated with the raw count. The title names the method and
    its recorded params. Uses matplotlib's object API with the Agg canvas, so
    no global backend is changed. The output is not byte-for-byte
    reproducible across matplotlib versions; the ``Software`` metadata entry
    is omitted.

    Parameters
    ----------
    manifest : dict
        Output of :func:`~fedpipe.data.partition.manifest.build_manifest`.
    path : Path
        Where to write the PNG; parent directories are created.

    Raises
    ------
    PartitionError
        If the manifest has no clients or no classes, or its counts do not
        match its classes.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    classes = list(manifest["classes"])
    counts = _count_matrix(manifest, "train")
    n_clients, n_classes = counts.shape
    if n_clients == 0 or n_classes == 0:
        raise PartitionError(
            f"label_heatmap needs at least one client and one class, got "
            f"{n_clients} clients and {n_classes} classes"
        )
    sizes = counts.sum(axis=1)
    share = np.divide(
        counts,
        sizes[:, None],
        out=np.zeros(counts.shape, dtype=float),
        where=sizes[:, None] > 0,
    )

    width = min(max(6.0, 0.5 * n_classes + 3.0), 24.0)
    height = min(max(3.5, 0.32 * n_clients + 2.0), 24.0)
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(
        share,
        aspect="auto",
        cmap="viridis",
        vmin=0.0,
        vmax=1.0,
        interpolation="nearest",
    )
    fig.colorbar(
        image,
        ax=ax,
        label="share of the client's train samples",
        shrink=min(1.0, 8.0 / height),
    )

    ax.set_xticks(np.arange(n_classes), labels=[str(c) for c in classes])
    ax.set_xlabel("class")
    if n_clients <= _TICK_EVERY_CLIENT_MAX:
        clients = [int(c["client"]) for c in manifest["clients"]]
        ax.set_yticks(
            np.arange(n_clients),
            labels=[f"{k} (n={n})" for k, n in zip(clients, sizes, strict=True)],
        )
        ax.set_ylabel("client (train samples)")
    else:
        ax.set_ylabel("client")
    if n_clients * n_classes <= _ANNOTATE_MAX_CELLS:
        for (row, col), value in np.ndenumerate(counts):
            ax.text(
                col,
                row,
                str(value),
                ha="center",
                va="center",
                fontsize=8,
                color="black" if share[row, col] > 0.6 else "white",
            )
    title = "Label distribution per client: " + _describe(manifest)
    ax.set_title("\n".join(textwrap.wrap(title, width=int(width * 11))), fontsize=10)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})


def skew_summary(manifest: dict) -> dict[str, Any]:
    """Headline heterogeneity figures of a partition.

    Sizes and classes count each client's whole share (local train plus local
    test); ``label_skew`` uses train samples only, as
    :func:`~fedpipe.data.partition.manifest.label_skew` does.

    Parameters
    ----------
    manifest : dict
        Output of :func:`~fedpipe.data.partition.manifest.build_manifest`.

    Returns
    -------
    dict
        Plain-JSON values:

        ``n_clients`` : int
        ``label_skew`` : float
            Mean total-variation distance of client train labels from the pool.
        ``size_cv`` : float
            Coefficient of variation of client sizes, ``std / mean`` with the
            population std (``ddof=0``); ``0.0`` if there are no samples.
        ``min_client_size``, ``max_client_size`` : int
        ``min_classes_per_client`` : int
            Fewest distinct classes any client holds.

        The size and class entries are ``0`` when there are no clients.
    """
    counts = _count_matrix(manifest, "train") + _count_matrix(manifest, "test")
    sizes = counts.sum(axis=1)
    mean = float(sizes.mean()) if sizes.size else 0.0
    return {
        "n_clients": int(sizes.size),
        "label_skew": label_skew(manifest),
        "size_cv": float(sizes.std() / mean) if mean > 0 else 0.0,
        "min_client_size": int(sizes.min()) if sizes.size else 0,
        "max_client_size": int(sizes.max()) if sizes.size else 0,
        "min_classes_per_client": (
            int((counts > 0).sum(axis=1).min()) if sizes.size else 0
        ),
    }
