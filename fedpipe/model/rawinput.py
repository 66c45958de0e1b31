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

A table with categorical or text columns (``transform.encodings``) gives a
model of one input per column, named after it (``/`` reads ``_``: Keras
refuses it in a name; a dict of 1-D arrays in):
float32 (NaN = missing) for a numeric column, a string for an encoded one
(its text with surrounding spaces removed, as the ingest keys it; ``""`` =
missing). A categorical column goes through a ``StringLookup`` of its
federated vocabulary (out-of-vocabulary: the "other" slot 0, exactly as
:class:`~fedpipe.data.preprocess.encode.Encoding` maps a rare or unseen
value), a text column through a ``TextVectorization`` of its federated token
vocabulary (the tokenizer is :func:`~fedpipe.data.preprocess.encode.tokens`'),
counts times the federated idf and unit length for ``tfidf``.

With ``preprocess.fit: local`` the model carries the federated fit (the one
the held-out set is scored with): a new row belongs to no client.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
from keras import ops

from fedpipe.core.errors import FedpipeError
from fedpipe.data.preprocess.encode import CATEGORICAL_KINDS, Encoding
from fedpipe.data.preprocess.fit import Scaling, Transform

__all__ = ["input_names", "raw_input_model", "raw_inputs", "save_raw_input_model"]

# the out-of-vocabulary token of the lookups (a name no table has as a value;
# not NUL: NumPy's fixed-width strings drop trailing NULs, so "\x00" == "")
_OOV = "[fedpipe:other]"


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
    if transform.encodings:
        return _by_column_model(model, transform)
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


def input_names(columns: tuple[str, ...]) -> dict[str, str]:
    """Column -> the name of its input (Keras refuses a ``/`` in a name: it
    reads ``_``)."""
    names = {c: c.replace("/", "_") for c in columns}
    if len(set(names.values())) < len(names):
        clash = sorted(c for c in columns if "/" in c)
        raise FedpipeError(
            f"raw_input_model: column(s) {', '.join(map(repr, clash))} name an "
            "input like another column once '/' reads '_' (Keras refuses '/' in "
            "a name); rename one of them in the table"
        )
    return names


def raw_inputs(
    transform: Transform, columns: dict[str, np.ndarray]
) -> np.ndarray | dict[str, np.ndarray]:
    """What :func:`raw_input_model`'s model takes, from per-column 1-D arrays
    (float32 for a numeric column, str for an encoded one): the ``(n, d)``
    float32 matrix, or with encodings a dict by input name
    (:func:`input_names`) in column order."""
    if transform.encodings:
        names = input_names(transform.columns)
        return {names[c]: columns[c] for c in transform.columns}
    return np.stack([columns[name] for name in transform.columns], axis=1).astype(
        np.float32
    )


def _by_column_model(model: keras.Model, transform: Transform) -> keras.Model:
    """:func:`raw_input_model` of a table with encoded columns: one input per
    column, the outputs in :class:`~fedpipe.data.preprocess.RowTransform`'s
    order (numeric columns, each encoding's columns, the indicators)."""
    scaling = transform.scaling_for(None)
    encodings = {e.column: e for e in transform.encodings}
    names = input_names(transform.columns)
    inputs = {
        name: keras.Input(
            (), dtype="string" if j in encodings else "float32", name=names[name]
        )
        for j, name in enumerate(transform.columns)
    }
    parts = []
    missing: dict[int, object] = {}
    numeric = list(transform.numeric_columns)
    if numeric:
        x = ops.stack([inputs[transform.columns[j]] for j in numeric], axis=1)
        x = ops.cast(x, "float64")
        absent = ops.isnan(x)
        for k, j in enumerate(numeric):
            missing[j] = ops.take(absent, [k], axis=1)
        if scaling.fill is not None:
            x = ops.where(absent, np.asarray(scaling.fill[numeric]), x)
        x = ops.divide(
            ops.subtract(x, np.asarray(scaling.center[numeric])),
            np.asarray(scaling.scale[numeric]),
        )
        parts.append(ops.cast(x, "float32"))
    for enc in transform.encodings:
        text = inputs[enc.name]
        if enc.kind in CATEGORICAL_KINDS:
            part, missing[enc.column] = _categorical(enc, text, scaling)
        else:
            part, missing[enc.column] = _text(enc, text)
        if part is not None:
            parts.append(part)
    for j in transform.indicators:
        parts.append(ops.cast(missing[j], "float32"))
    x = ops.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    by_name = {names[c]: tensor for c, tensor in inputs.items()}
    return keras.Model(by_name, model(x), name=f"{model.name}_raw_columns")


def _empty(index: object, empty_at: int) -> object:
    """``(n, 1)`` True where a lookup's index is the empty string's."""
    return ops.expand_dims(ops.equal(index, empty_at), 1)


def _categorical(enc: Encoding, text: object, scaling: Scaling) -> tuple:
    """The slot of each value (the vocabulary's ``1 + i``, else 0; a missing
    value the imputed most frequent value's slot 1, else 0), one-hot or as a
    number; and where the value was missing."""
    kept = list(enc.vocabulary)
    lookup = keras.layers.StringLookup(
        vocabulary=[*kept, ""], num_oov_indices=1, oov_token=_OOV,
        output_mode="int", name=f"lookup_{enc.column}",
    )  # fmt: skip
    index = lookup(text)  # 0 out of vocabulary, 1 + i, 1 + len(kept) empty
    fill = 1 if scaling.fill is not None and kept else 0
    slot = ops.take(np.array([*range(len(kept) + 1), fill], dtype=np.int64), index)
    if enc.kind == "index":
        part = ops.expand_dims(ops.cast(slot, "float32"), 1)
    else:
        part = ops.one_hot(slot, enc.width, dtype="float32")
    return part, _empty(index, len(kept) + 1)


def _text(enc: Encoding, text: object) -> tuple:
    """The multi-hot or TF-IDF row of each text (None: no vocabulary, no
    columns); and where the text was missing."""
    empty = keras.layers.StringLookup(
        vocabulary=[""], num_oov_indices=1, oov_token=_OOV, output_mode="int",
        name=f"empty_{enc.column}",
    )  # fmt: skip
    absent = _empty(empty(text), 1)
    if not enc.vocabulary:
        return None, absent
    vectorize = keras.layers.TextVectorization(
        standardize="lower_and_strip_punctuation", split="whitespace",
        vocabulary=list(enc.vocabulary),
        output_mode="multi_hot" if enc.kind == "multihot" else "count",
        name=f"vectorize_{enc.column}",
    )  # fmt: skip
    words = vectorize(text)
    words = ops.take(words, list(range(1, 1 + len(enc.vocabulary))), axis=1)
    if enc.kind == "multihot":
        return words, absent
    assert enc.idf is not None
    weights = ops.multiply(ops.cast(words, "float64"), np.asarray(enc.idf))
    norm = ops.sqrt(ops.sum(ops.square(weights), axis=1, keepdims=True))
    safe = ops.where(ops.greater(norm, 0.0), norm, 1.0)
    return ops.cast(ops.divide(weights, safe), "float32"), absent


def save_raw_input_model(model: keras.Model, path: Path) -> Path:
    """Save ``model`` as a ``.keras`` file at ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    return path
