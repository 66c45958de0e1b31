"""The feature-skew heatmap of a ``stats.json`` (``reports/preprocess/``).

Rows are clients, columns the table's columns (an image set's one column,
``mean_intensity``); a cell is the client's column mean minus the global mean
in global standard deviations (:func:`~.summary.skew_matrix`), on a diverging
colour scale symmetric about 0; a blank cell was suppressed by the
minimum-count rule (or the column is constant). matplotlib's object API with
the Agg canvas, so no global backend is changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpipe.data.preprocess.summary import skew_matrix

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["skew_figure", "write_skew_png"]

_ANNOTATE_MAX_CELLS = 300
_SHOWN_COLUMNS = 60  # the widest-skewed columns beyond this are left out


def skew_figure(stats: dict[str, Any]) -> Figure:
    """A :class:`matplotlib.figure.Figure` of the skew of ``stats``."""
    from matplotlib.figure import Figure

    z = skew_matrix(stats)
    columns = list(stats["columns"])
    if len(columns) > _SHOWN_COLUMNS:
        widest = np.argsort(-np.nan_to_num(np.abs(z), nan=0.0).max(axis=0))
        keep = np.sort(widest[:_SHOWN_COLUMNS])
        z, columns = z[:, keep], [columns[j] for j in keep]
    n_clients, n_columns = z.shape
    width = min(max(5.0, 0.45 * n_columns + 3.0), 24.0)
    height = min(max(3.0, 0.32 * n_clients + 2.0), 24.0)
    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_subplot()
    bound = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    bound = max(bound, 0.5)
    image = ax.imshow(
        np.ma.masked_invalid(z), cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto"
    )
    ax.set_xticks(range(n_columns), labels=columns, rotation=60, ha="right")
    ax.set_yticks(range(n_clients), labels=[str(i) for i in range(n_clients)])
    ax.set_xlabel("column")
    ax.set_ylabel("client")
    if z.size <= _ANNOTATE_MAX_CELLS:
        for (i, j), v in np.ndenumerate(z):
            dark = np.isfinite(v) and abs(v) > 0.6 * bound
            text = "<k" if not np.isfinite(v) else f"{v:+.1f}"
            ax.text(
                j, i, text, ha="center", va="center", fontsize=7,
                color="white" if dark else "black",
            )  # fmt: skip
    fig.colorbar(image, ax=ax, label="client mean - global mean (global std)")
    ax.set_title(f"feature skew (counts below {stats['min_count']} withheld)")
    fig.tight_layout()
    return fig


def write_skew_png(stats: dict[str, Any], path: Path) -> None:
    """Write :func:`skew_figure` as a PNG at ``path`` (parents created; no
    ``Software`` metadata)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from fedpipe.core import atomic

    fig = skew_figure(stats)
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.writing(path) as tmp:
        fig.savefig(tmp, format="png", metadata={"Software": None})
