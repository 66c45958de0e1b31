"""A round's model with the fitted transform in front (fedpipe/model/rawinput.py)
and the raw table it scores (fedpipe/data/scoring.py): raw rows in, the same
scores as the federation's transform then model, and a saved file that plain
Keras loads in a process that never imports fedpipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.data.preprocess import fit_transform, row_transform
from fedpipe.data.scoring import ScoringError, read_scoring_table
from fedpipe.model.rawinput import raw_input_model, save_raw_input_model
from fedpipe.model.scoring import predictions_table
from fedpipe.model.zoo import build_model

COLUMNS = ["tiny", "unit", "huge"]


def _clients(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scales = np.array([1e-3, 1.0, 1e4])
    rows = [rng.normal(1.0, 1.0, size=(n, 3)) * scales for n in (40, 25, 60)]
    rows[1][rng.random(rows[1].shape) < 0.1] = np.nan
    return [x.astype(np.float32) for x in rows]


def _transform(missing: str = "mean"):
    return fit_transform(
        _clients(), columns=COLUMNS, numeric="standard", fit="federated",
        missing=missing, bins=64,
    )  # fmt: skip


def _raw_rows() -> np.ndarray:
    rng = np.random.default_rng(9)
    x = (rng.normal(1.0, 2.0, size=(17, 3)) * np.array([1e-3, 1.0, 1e4])).astype(
        np.float32
    )
    x[[2, 5], 0] = np.nan
    x[7, 2] = np.nan
    return x


def _trained(transform, n_classes: int = 3):
    model = build_model("mlp", (transform.n_outputs,), n_classes)
    rng = np.random.default_rng(1)
    model.set_weights([rng.normal(0, 0.5, w.shape) for w in model.get_weights()])
    return model


@pytest.mark.parametrize("n_classes", [2, 3])
def test_raw_rows_score_as_transform_then_model(n_classes: int) -> None:
    transform = _transform()
    assert transform.indicators  # client 1 had missing values
    model = _trained(transform, n_classes)
    x = _raw_rows()
    expected = model.predict(row_transform(transform, None)(x), verbose=0)
    got = raw_input_model(model, transform).predict(x, verbose=0)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_the_saved_file_loads_with_plain_keras(tmp_path: Path) -> None:
    transform = _transform()
    raw = raw_input_model(_trained(transform), transform)
    path = save_raw_input_model(raw, tmp_path / "round-3" / "model.keras")
    x = _raw_rows()
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, keras\n"
        "m = keras.saving.load_model(sys.argv[1])\n"
        "np.save(sys.argv[3], m.predict(np.load(sys.argv[2]), verbose=0))\n"
        "assert not [n for n in sys.modules if n.startswith('fedpipe')]\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"),
         str(tmp_path / "p.npy")],
        check=True, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    np.testing.assert_array_equal(
        np.load(tmp_path / "p.npy"), raw.predict(x, verbose=0)
    )


def test_an_identity_transform_has_nothing_to_put_in_front() -> None:
    from fedpipe.data.preprocess import identity_transform

    with pytest.raises(ValueError, match="identity"):
        raw_input_model(_trained(_transform()), identity_transform("images"))


def _csv(tmp_path: Path, frame: pd.DataFrame) -> Path:
    path = tmp_path / "new.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_table_is_read_in_the_models_column_order(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"huge": [1e4, 2e4], "label": ["a", "b"], "unit": [1.5, None],
         "tiny": [0.001, 0.002], "pid": ["p7", "p9"]}
    )  # fmt: skip
    path = _csv(tmp_path, frame)
    ids, x = read_scoring_table(path, columns=COLUMNS, id_column=None,
                                allow_missing=True)  # fmt: skip
    assert ids == ["row-1", "row-2"]
    assert x.dtype == np.float32
    np.testing.assert_array_equal(
        x, np.array([[0.001, 1.5, 1e4], [0.002, np.nan, 2e4]], dtype=np.float32)
    )
    ids, _ = read_scoring_table(path, columns=COLUMNS, id_column="pid",
                                allow_missing=True)  # fmt: skip
    assert ids == ["p7", "p9"]


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    path = _csv(tmp_path, pd.DataFrame({"tiny": [1.0], "huge": [2.0]}))
    with pytest.raises(
        ScoringError,
        match=r"new.csv: column 'unit' is missing; "
        r"the model takes the columns 'tiny', 'unit', 'huge'",
    ):
        read_scoring_table(path, columns=COLUMNS, id_column=None, allow_missing=True)


def test_a_non_numeric_value_is_named_with_its_rows(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"tiny": [1, 2, 3, 4], "unit": ["1", "x", "3", "n/a?"], "huge": [1, 2, 3, 4]}
    )
    path = _csv(tmp_path, frame)
    with pytest.raises(
        ScoringError,
        match=r"column 'unit' has non-numeric values \(rows 2, 4, e\.g\. 'x'\)",
    ):
        read_scoring_table(path, columns=COLUMNS, id_column=None, allow_missing=True)


def test_empty_cells_without_imputation_are_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame({"tiny": [1, None], "unit": [1, 2], "huge": [1, 2]})
    path = _csv(tmp_path, frame)
    with pytest.raises(
        ScoringError,
        match=r"column 'tiny' has empty cells \(row 2\).*preprocess\.missing",
    ):
        read_scoring_table(path, columns=COLUMNS, id_column=None, allow_missing=False)


def test_an_absent_id_column_is_named(tmp_path: Path) -> None:
    path = _csv(tmp_path, pd.DataFrame({"tiny": [1], "unit": [1], "huge": [1]}))
    with pytest.raises(ScoringError, match=r"no column 'pid' \(data\.id_column"):
        read_scoring_table(path, columns=COLUMNS, id_column="pid", allow_missing=True)


def test_predictions_table_spells_out_a_sigmoid() -> None:
    table = predictions_table(
        ["a", "b"], np.array([[0.25], [0.75]], dtype=np.float32), ["no", "yes"], "id"
    )
    assert table.columns.tolist() == ["id", "prediction", "p_no", "p_yes"]
    assert table["prediction"].tolist() == ["no", "yes"]
    assert table["p_yes"].tolist() == [0.25, 0.75]
