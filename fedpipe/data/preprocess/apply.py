"""Applying a fitted :class:`~fedpipe.data.preprocess.fit.Transform` to rows.

:class:`RowTransform` is what a split's features pass through when they are
read (:class:`fedpipe.data.splits.Features`): missing values filled, every
value centered and scaled in float64, the categorical and text columns' codes
encoded, the indicator columns appended, float32 out. Elementwise per row, so
any chunking of the rows gives the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedpipe.core.jsonio import read_json
from fedpipe.data.preprocess.encode import Encoding
from fedpipe.data.preprocess.fit import Scaling, Transform

__all__ = ["RowTransform", "read_transform", "row_transform"]


@dataclass(frozen=True, eq=False)
class RowTransform:
    """One split's transform: ``(n, d)`` float32 rows in, ``(n, d + k)`` out.

    Attributes
    ----------
    scaling : Scaling
        The split's per-column parameters.
    indicators : tuple of int
        Columns whose missingness is appended as a 0/1 column, in this order.
    encodings : tuple of Encoding
        Columns of codes replaced by their encoding: the numeric columns come
        first, then each encoding's columns.
    """

    scaling: Scaling
    indicators: tuple[int, ...] = ()
    encodings: tuple[Encoding, ...] = ()

    def output_width(self, width: int) -> int:
        """Columns out for ``width`` columns in."""
        encoded = sum(e.width - 1 for e in self.encodings)
        return width + encoded + len(self.indicators)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        missing = np.isnan(rows)
        if self.scaling.fill is not None:
            rows = np.where(missing, self.scaling.fill, rows)
        out = (rows - self.scaling.center) / self.scaling.scale
        if self.encodings:
            encoded = {e.column for e in self.encodings}
            kept = [j for j in range(rows.shape[1]) if j not in encoded]
            parts = [out[:, kept]] + [e(rows[:, e.column]) for e in self.encodings]
            out = np.concatenate(parts, axis=1)
        if self.indicators:
            flags = missing[:, list(self.indicators)].astype(np.float64)
            out = np.concatenate([out, flags], axis=1)
        return out.astype(np.float32)


def row_transform(transform: Transform, client: int | None) -> RowTransform | None:
    """Client ``client``'s transform (None: the held-out set's); None for an
    identity transform (the rows stay exactly as converted)."""
    if transform.is_identity:
        return None
    return RowTransform(
        transform.scaling_for(client), transform.indicators, transform.encodings
    )


def read_transform(path: Path | str) -> Transform:
    """The :class:`Transform` in ``transform.json``."""
    return Transform.from_json(read_json(Path(path)))
