"""Scoring a raw table with a round's global model (``fedpipe predict``).

:func:`export_round` builds the round's model behind the fitted transform
(:func:`~fedpipe.model.rawinput.raw_input_model`) and saves it as
``models/round-K/model.keras``; :func:`score_table` scores a table's raw rows
with that model and writes the predictions with the rows' ids.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from fedpipe.config import layout
from fedpipe.core import atomic
from fedpipe.core.errors import FedpipeError

if TYPE_CHECKING:
    from fedpipe.config.params import ModelParams, TrainParams

__all__ = ["MODEL_FILE", "Scored", "export_round", "predictions_table", "score_table"]

MODEL_FILE = "model.keras"  # in models/round-K/, beside weights.npz
NOTES = "notes"  # the predictions' column naming what the model filled or read as other


@dataclass(frozen=True)
class Scored:
    """What :func:`score_table` did."""

    rows: int
    model_file: Path
    notes: str | None = None  # the flagged rows, one line (None: none)


def model_file(round_: int) -> Path:
    """Where round ``round_``'s raw-input model is saved."""
    return layout.model_dir(round_) / MODEL_FILE


def export_round(
    model: ModelParams, train: TrainParams, round_: int, root: Path = Path(".")
) -> keras.Model:
    """Round ``round_``'s global model (``model.*``, ``train.*``) with the transform
    in front, saved as :func:`model_file` under ``root``; the model."""
    from fedpipe.core.weights import load_weights
    from fedpipe.data.preprocess import read_transform
    from fedpipe.data.sources import prepared_spec
    from fedpipe.model.rawinput import raw_input_model, save_raw_input_model
    from fedpipe.model.training import model_spec_for

    weights_file = root / layout.model_weights(round_)
    for needed in (root / layout.TRANSFORM, weights_file):
        if not needed.is_file():
            raise FedpipeError(
                f"{needed}: not found; run `fedpipe run` (or `dvc repro`) first"
            )
    transform = read_transform(root / layout.TRANSFORM)
    if transform.is_identity:
        raise FedpipeError(
            "fedpipe predict scores tables (data.source: table); this run's data "
            f"is images ({transform.note})"
        )
    spec = prepared_spec(root / layout.PREPARED_DIR)
    spec = dataclasses.replace(spec, input_shape=(transform.n_outputs,))
    built = model_spec_for(model, train, spec).build()
    built.set_weights(load_weights(weights_file))
    raw = raw_input_model(built, transform)
    save_raw_input_model(raw, root / model_file(round_))
    return raw


def predictions_table(
    ids: list[str], probs: np.ndarray, class_names: list[str], id_name: str
) -> Any:
    """A DataFrame: the id, the predicted class, ``p_<class>`` per class (a
    sigmoid output is the second class's probability)."""
    import pandas as pd

    p = np.asarray(probs, dtype=np.float64).reshape(len(ids), -1)
    if p.shape[1] == 1 and len(class_names) == 2:
        p = np.concatenate([1.0 - p, p], axis=1)
    table = pd.DataFrame({id_name: ids})
    table["prediction"] = [class_names[i] for i in p.argmax(axis=1)]
    for j, name in enumerate(class_names):
        table[f"p_{name}"] = p[:, j]
    return table


def score_table(
    table: Path,
    *,
    model: ModelParams,
    train: TrainParams,
    id_column: str | None,
    round_: int,
    out: Path,
) -> Scored:
    """Score ``table`` with round ``round_``'s model (``model.*``, ``train.*``);
    write ``out`` (CSV): the id (``id_column``, ``data.id_column``; null: the
    row), the prediction, the probabilities and ``notes`` (per row, each blank
    cell the model filled and each categorical value it read as "other":
    :func:`fedpipe.data.scoring.row_notes`).

    Raises
    ------
    fedpipe.data.scoring.ScoringError
        The table cannot be scored (a column missing, a non-numeric value in
        a numeric column, an empty cell the transform cannot fill).
    """
    from fedpipe.data.ingest import read_schema
    from fedpipe.data.preprocess import read_transform
    from fedpipe.data.scoring import read_scoring_columns, row_notes
    from fedpipe.model.rawinput import raw_inputs

    transform = read_transform(layout.TRANSFORM)
    if transform.is_identity:
        raise FedpipeError(
            "fedpipe predict scores tables (data.source: table); this run's data "
            f"is images ({transform.note})"
        )
    ids, columns = read_scoring_columns(
        table,
        columns=transform.columns,
        id_column=id_column,
        allow_missing=transform.scaling_for(None).fill is not None,
        strings={e.name for e in transform.encodings},
        kinds=read_schema(layout.PREPARED_DIR).get("column_types"),
    )
    x = raw_inputs(transform, columns)
    raw = export_round(model, train, round_)
    probs = raw.predict(x, batch_size=1024, verbose=0)
    names = [str(c) for c in read_schema(layout.PREPARED_DIR)["class_names"]]
    frame = predictions_table(ids, probs, names, id_column or "row")
    notes = row_notes(transform, columns)
    frame[NOTES] = notes.notes
    with atomic.writing(out) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.9g")
    return Scored(
        rows=len(ids), model_file=model_file(round_), notes=notes.summary(NOTES)
    )
