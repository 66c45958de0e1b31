"""Diagnostics of a partition: class-count table, heatmap, skew summary, and
how far each client's inputs sit from the federation's.

The first three read the manifest returned by
:func:`fedpipe.data.partition.manifest.build_manifest` (or its JSON round trip) and
nothing else; :func:`feature_stats` reads the clients' training inputs (as
:func:`fedpipe.data.splits.federated_data` gives them, feature skew applied) and
:func:`feature_skew_plot` draws its table. pandas and matplotlib are imported
inside the functions that need them, so importing :mod:`fedpipe.data.partition`
stays numpy-only.
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

__all__ = [
    "class_count_table",
    "feature_skew",
    "feature_skew_plot",
    "feature_stats",
    "label_heatmap",
    "skew_summary",
]

_ANNOTATE_MAX_CELLS = 400  # write counts into the heatmap cells up to this many
_TICK_EVERY_CLIENT_MAX = 60  # label every client row up to this many clients
_CHUNK_ROWS = 1024  # rows converted at a time by feature_stats


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


def shown_counts(table: pd.DataFrame, min_count: int) -> pd.DataFrame:
    """:func:`class_count_table` as published (``reports/partition/class_counts.csv``,
    the report): a count of 1 to ``min_count - 1`` reads ``"<k"``, and where a
    row's one hidden class count would follow from ``n_train`` and the others,
    one more is hidden as ``">=k"`` (:func:`fedpipe.core.smallcells.suppress_rows`).
    """
    import pandas as pd

    from fedpipe.core.smallcells import suppress_rows

    parts = [str(c) for c in table.columns[3:]]
    records = [
        {str(k): int(v) for k, v in row.items()}
        for row in table.rename(columns=str).to_dict("records")
    ]
    rows = suppress_rows(records, total="n_train", parts=parts, k=int(min_count))
    for row, record in zip(rows, records, strict=True):
        row["client"] = record["client"]  # an index, not a count
    return pd.DataFrame(rows, columns=[str(c) for c in table.columns])


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


# ---------------------------------------------------------------- feature skew


def _chunks(x: Any, dtype: Any = np.float64) -> Any:
    """``x`` (an array or a lazy view with ``len`` and slicing) a few rows at a
    time, 2-D ``(rows, values)`` of ``dtype``."""
    for start in range(0, len(x), _CHUNK_ROWS):
        rows = np.asarray(x[start : start + _CHUNK_ROWS], dtype=dtype)
        yield rows.reshape(len(rows), -1)


def feature_stats(
    clients: Sequence[tuple[int, Any]],
    *,
    image: bool,
    columns: Sequence[int] | None = None,
) -> pd.DataFrame:
    """How far each client's training inputs sit from the federation's.

    The federation is every client's training rows pooled. Images: each image's
    mean intensity ``m`` and contrast ``c`` (the standard deviation of its
    values); a client's ``location`` is its mean ``m`` minus the pooled mean, in
    pooled standard deviations of ``m``, its ``spread`` the same for ``c``.
    Tables (see :func:`_table_stats`): per column, the client's mean minus the
    pooled mean, and its mean absolute deviation (about its own mean) minus the
    pooled one, both in pooled standard deviations (missing values left out,
    constant columns skipped); ``location`` and ``spread`` are their root mean
    squares over the columns, less what sampling alone gives a client of that
    size drawn at random from the pool (so an IID client sits near 0 however
    few rows it holds, and a near-constant column, zero on most clients, adds
    next to nothing). ``distance`` is ``sqrt(location ** 2 + spread ** 2)``: 0
    for a client that looks like the federation, about 1 for one a whole
    federation spread away.

    Parameters
    ----------
    clients : sequence of (int, array-like)
        Each client's id and its training inputs (``(n, *input_shape)``; a lazy
        view is read :data:`_CHUNK_ROWS` rows at a time).
    image : bool
        Whether the inputs are images (else table rows).
    columns : sequence of int, optional
        Tables: the columns measured (the numeric ones feature skew changes,
        :func:`fedpipe.data.partition.featureskew.skewable_columns`); default
        every column.

    Returns
    -------
    pandas.DataFrame
        One row per client: ``client``, ``n_train``, ``location``, ``spread``,
        ``distance``; images also ``mean_intensity`` and ``contrast`` (the
        client's means of ``m`` and ``c``). Empty clients get NaN figures.
    """
    import pandas as pd

    if image:
        per_client = []
        for _, x in clients:
            stats = [  # float32 rows, float64 sums
                np.stack(
                    [
                        rows.mean(axis=1, dtype=np.float64),
                        rows.std(axis=1, dtype=np.float64),
                    ],
                    axis=1,
                )
                for rows in _chunks(x, np.float32)
            ]
            per_client.append(np.concatenate(stats) if stats else np.empty((0, 2)))
        pooled = np.concatenate(per_client) if per_client else np.empty((0, 2))
        center = pooled.mean(axis=0) if len(pooled) else np.zeros(2)
        scale = pooled.std(axis=0) if len(pooled) else np.ones(2)
        scale = np.where(scale > 0, scale, 1.0)
        means = np.array(
            [s.mean(axis=0) if len(s) else np.full(2, np.nan) for s in per_client]
        ).reshape(len(per_client), 2)
        z = (means - center) / scale
        table = pd.DataFrame(
            {
                "client": [int(c) for c, _ in clients],
                "n_train": [len(s) for s in per_client],
                "mean_intensity": means[:, 0],
                "contrast": means[:, 1],
                "location": z[:, 0],
                "spread": z[:, 1],
            }
        )
    else:
        table = _table_stats(clients, columns)
    table["distance"] = np.sqrt(table["location"] ** 2 + table["spread"] ** 2)
    return table


def _table_stats(
    clients: Sequence[tuple[int, Any]], columns: Sequence[int] | None
) -> pd.DataFrame:
    """:func:`feature_stats` of table rows.

    Two passes over each client's rows: counts, sums (the means), then the sums
    of absolute deviations, about the client's own mean and about the pooled
    one. Per live column ``j`` (pooled std ``s_j > 0``) and client ``k`` with
    ``n`` values there, of ``N`` pooled:

    - ``z = (mean_k - mean) / s_j``, whose square an IID client of ``n`` rows
      has in expectation ``f / n`` (``f = (N - n) / (N - 1)``, drawing without
      replacement);
    - ``u = (mad_k - mad) / s_j`` (``mad``: mean absolute deviation), whose
      square such a client has at most ``(1 - (mad / s_j) ** 2) f / n`` in
      expectation (the variance of ``|x - mean|`` is ``s_j ** 2 - mad ** 2``).

    ``location = sqrt(max(mean_j z ** 2 - mean_j f / n, 0))`` and ``spread``
    the same of ``u``. A difference of means of ``x`` and of ``|x - mean|``,
    unlike a ratio of standard deviations, stays within sampling noise on a
    near-constant column (a 0/1 column with a handful of ones: a client
    without any has std 0, whose log ratio to the pooled std is minus
    infinity, but a mean absolute deviation off by a few hundredths).
    """
    import pandas as pd

    chosen = None if columns is None else np.asarray(columns, dtype=np.int64)

    def rows_of(x: Any) -> Any:
        for rows in _chunks(x):
            yield rows if chosen is None else rows[:, chosen]

    sums = []
    for _, x in clients:
        total = count = None
        for rows in rows_of(x):
            seen = ~np.isnan(rows)
            part = (np.where(seen, rows, 0.0).sum(0), seen.sum(0))
            if total is None:
                total, count = part
            else:
                total, count = total + part[0], count + part[1]
        sums.append((total, count))
    width = next((len(t) for t, _ in sums if t is not None), 0)
    zero = np.zeros(width)
    sums = [(zero, zero) if t is None else (t, c) for t, c in sums]
    all_n = sum((c for _, c in sums), zero)
    all_mean = _safe_div(sum((t for t, _ in sums), zero), all_n)
    means = [_safe_div(t, c) for t, c in sums]
    # second pass: absolute and squared deviations (about own and pooled mean)
    own_abs, all_abs, all_sq = [], zero.copy(), zero.copy()
    for (_, x), mean in zip(clients, means, strict=True):
        mine = zero.copy()
        for rows in rows_of(x):
            seen = ~np.isnan(rows)
            mine = mine + np.where(seen, np.abs(rows - mean), 0.0).sum(0)
            pooled = np.where(seen, rows - all_mean, 0.0)
            all_abs = all_abs + np.abs(pooled).sum(0)
            all_sq = all_sq + (pooled**2).sum(0)
        own_abs.append(mine)
    all_std = np.sqrt(_safe_div(all_sq, all_n))
    all_mad = _safe_div(all_abs, all_n)
    live = all_std > 1e-12 * np.maximum(np.abs(all_mean), 1.0)
    location, spread = [], []
    for (_, c), mean, mine in zip(sums, means, own_abs, strict=True):
        ok = live & (c > 0)
        if not ok.any():
            location.append(np.nan)
            spread.append(np.nan)
            continue
        s, n, big = all_std[ok], c[ok], all_n[ok]
        f = np.where(big > 1, (big - n) / np.maximum(big - 1, 1), 0.0)
        z = (mean[ok] - all_mean[ok]) / s
        u = (mine[ok] / n - all_mad[ok]) / s
        sampled = np.mean(f / n)
        sampled_u = np.mean((1 - np.minimum(all_mad[ok] / s, 1.0) ** 2) * f / n)
        location.append(float(np.sqrt(max(np.mean(z**2) - sampled, 0.0))))
        spread.append(float(np.sqrt(max(np.mean(u**2) - sampled_u, 0.0))))
    return pd.DataFrame(
        {
            "client": [int(c) for c, _ in clients],
            "n_train": [len(x) for _, x in clients],
            "location": location,
            "spread": spread,
        }
    )


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.divide(a, b, out=np.zeros(np.broadcast(a, b).shape), where=b > 0)


def feature_skew(table: pd.DataFrame) -> float:
    """The summary figure: the clients' mean :func:`feature_stats` ``distance``
    (0.0 for none; empty clients left out)."""
    distance = table["distance"].dropna()
    return float(distance.mean()) if len(distance) else 0.0


def feature_skew_plot(
    table: pd.DataFrame, path: Path, *, image: bool, title: str = ""
) -> None:
    """Write a PNG of each client's distance from the federation's inputs.

    Three bars per client: the size of its ``location`` and ``spread`` parts
    and its ``distance`` (their root sum of squares), with the mean distance
    (:func:`feature_skew`, the figure in ``skew.json``) as a dashed line. Agg
    canvas, no global backend change; the ``Software`` metadata entry is
    omitted.

    Parameters
    ----------
    table : pandas.DataFrame
        Output of :func:`feature_stats`.
    path : Path
        Where to write the PNG; parent directories are created.
    image : bool
        Names the parts for images (intensity, contrast) or tables (column means,
        column spreads).
    title : str
        Added after the figure's own title (e.g. the method and its params).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(table)
    width = min(max(6.0, 0.45 * n + 3.0), 24.0)
    fig = Figure(figsize=(width, 4.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    where = np.arange(n)
    parts = (
        ("mean intensity (z)", "contrast (z)")
        if image
        else ("column means (rms z)", "column spreads (rms mean-abs-deviation z)")
    )
    ax.bar(where - 0.27, np.abs(table["location"]), 0.27, label="|" + parts[0] + "|")
    ax.bar(where, np.abs(table["spread"]), 0.27, label="|" + parts[1] + "|")
    ax.bar(where + 0.27, table["distance"], 0.27, label="distance", color="black")
    ax.axhline(
        feature_skew(table),
        color="grey",
        linestyle="--",
        label=f"feature_skew = {feature_skew(table):.3f}",
    )
    if n <= _TICK_EVERY_CLIENT_MAX:
        ax.set_xticks(where, labels=[str(int(c)) for c in table["client"]])
    ax.set_xlabel("client")
    ax.set_ylabel("federation standard deviations")
    ax.legend(fontsize=8)
    text = "How far each client's inputs sit from the federation's"
    if title:
        text += ": " + title
    ax.set_title("\n".join(textwrap.wrap(text, width=int(width * 11))), fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
