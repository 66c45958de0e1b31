"""A trained model with the fitted transform in front: raw table rows in.

:func:`raw_input_model` wraps the model a round trained (which sees the rows
after the ``preprocess`` stage's transform) in a Keras model whose input is
the table's raw feature columns, in ``transform.json``'s order, as float32
with NaN for a missing value. Its first operations are the transform's, in
the same float64 arithmetic as :class:`fedpipe.data.preprocess.RowTransform`
(missing values filled, ``(x - center) / scale``, float32, then the 0/1
missing-value indicators), so it scores a row exactly as the federation
evaluated it. Only built-in Keras operations, so the saved ``.keras`` file
loads with plain ``keras.saving.load_model(path)``: no fedpipe, no custom
objects, safe mode on.

With ``preprocess.fit: local`` the model carries the federated fit (the one
the held-out set is scored with): a new row belongs to no client.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
from keras import ops

from fedpipe.data.preprocess.fit import Transform

__all__ = ["raw_input_model", "save_raw_input_model"]


def raw_input_model(model: keras.Model, transform: Transform) -> keras.Model:
    """``model`` behind ``transform``'s federated fit: ``(n, d)`` raw rows in.

    Parameters
    ----------
    model : keras.Model
        Built with the trained weights; takes ``transform.n_outputs`` columns.
    transform : Transform
        The ``preprocess`` stage's (a table's; not an identity transform).

    Raises
    ------
    ValueError
        An identity transform (images: nothing to put in front).
    """
    if transform.is_identity:
        raise ValueError(
            "raw_input_model: the transform is an identity (image data); the "
            "model's own input is the raw input scaled by 1/255"
        )
    scaling = transform.scaling_for(None)
    rows = keras.Input((len(transform.columns),), dtype="float32", name="raw_rows")
    x = ops.cast(rows, "float64")
    missing = ops.isnan(x)
    if scaling.fill is not None:
        x = ops.where(missing, np.asarray(scaling.fill, dtype=np.float64), x)
    x = ops.divide(
        ops.subtract(x, np.asarray(scaling.center, dtype=np.float64)),
        np.asarray(scaling.scale, dtype=np.float64),
    )
    x = ops.cast(x, "float32")
    if transform.indicators:
        flags = ops.take(missing, list(transform.indicators), axis=1)
        x = ops.concatenate([x, ops.cast(flags, "float32")], axis=1)
    return keras.Model(rows, model(x), name=f"{model.name}_raw_rows")


def save_raw_input_model(model: keras.Model, path: Path) -> Path:
    """Save ``model`` as a ``.keras`` file at ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    return path
