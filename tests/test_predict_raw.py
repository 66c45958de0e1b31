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


def test_one_non_numeric_value_is_named_with_its_row(tmp_path: Path) -> None:
    """A value with a unit in one row (moved here from the end-to-end test of
    `fedpipe predict`, which keeps one bad table for the CLI's path)."""
    frame = pd.DataFrame(
        {"tiny": [1, 2, 3, 4], "unit": [1, 2, 3, 4], "huge": ["1", "2", "3", "12 kg"]}
    )
    path = _csv(tmp_path, frame)
    with pytest.raises(
        ScoringError,
        match=r"column 'huge' has non-numeric values \(row 4, e\.g\. '12 kg'\)",
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


# ------------------------------------------- categorical and text columns

MIXED = ["tiny", "color", "huge", "review"]
COLOR_VALUES = ["red", "green", "blue", "violet"]  # violet: rare (below k)
REVIEW_VALUES = [
    "Good, good film!",
    "don't STOP_me now",
    "the plot... was BAD",
    "awful-awful plot",
    "École, école: a great film",
    "great",
]


def _mixed_clients(missing: bool, seed: int = 3) -> list[np.ndarray]:
    """Stored rows as the ingest writes them: numbers, and codes into
    ``COLOR_VALUES`` / ``REVIEW_VALUES``."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (30, 45, 25):
        x = np.empty((n, 4))
        x[:, 0] = rng.normal(1.0, 1.0, n) * 1e-3
        x[:, 1] = rng.choice(4, size=n, p=[0.4, 0.3, 0.28, 0.02])
        x[:, 2] = rng.normal(1.0, 1.0, n) * 1e4
        x[:, 3] = rng.integers(0, len(REVIEW_VALUES), n)
        if missing:
            x[rng.random(x.shape) < 0.08] = np.nan
        out.append(x.astype(np.float32))
    return out


def _mixed_transform(categorical: str, text: str, missing: str):
    return fit_transform(
        _mixed_clients(missing != "refuse"), columns=MIXED, numeric="standard",
        fit="federated", missing=missing, bins=32,
        column_types={"color": "categorical", "review": "text"},
        strings={"color": COLOR_VALUES, "review": REVIEW_VALUES},
        categorical_encoding=categorical, min_category_count=4, text_encoding=text,
        min_token_count=2,
    )  # fmt: skip


def _mixed_raw(missing: bool) -> dict[str, np.ndarray]:
    """Raw columns to score: an unseen category (teal), the rare one, texts
    with unseen words, punctuation and case, empty cells when ``missing``."""
    color = ["red", "teal", "violet", "blue", "green", "red", "teal", "blue"]
    review = [
        "GOOD film", "brand new words", "don't stop", "the_plot, BAD!",
        "great great great film", "école", "awful", "Good, good film!",
    ]  # fmt: skip
    tiny = np.linspace(-1e-3, 3e-3, 8).astype(np.float32)
    huge = np.linspace(-2e4, 3e4, 8).astype(np.float32)
    if missing:
        color[3] = ""
        review[5] = ""
        tiny[[1, 6]] = np.nan
        huge[3] = np.nan
    return {
        "tiny": tiny,
        "color": np.array(color, dtype=object),
        "huge": huge,
        "review": np.array(review, dtype=object),
    }


def _encode_path(transform, raw: dict[str, np.ndarray]) -> np.ndarray:
    """fedpipe's own path: the raw strings coded as the ingest codes them (a
    new value numbered on after the stored ones), the fitted encodings
    rebuilt for that table, then :class:`RowTransform`."""
    import dataclasses

    from fedpipe.data.preprocess import RowTransform
    from fedpipe.data.preprocess.encode import categorical_encoding, text_encoding

    stored = {"color": list(COLOR_VALUES), "review": list(REVIEW_VALUES)}
    x = np.empty((len(raw["tiny"]), len(MIXED)), dtype=np.float32)
    encodings = []
    for enc in transform.encodings:
        values = stored[enc.name]
        for v in raw[enc.name]:
            if v and v not in values:
                values.append(v)
        x[:, enc.column] = [values.index(v) if v else np.nan for v in raw[enc.name]]
        if enc.kind in ("onehot", "index"):
            again = categorical_encoding(
                enc.column, enc.name, enc.kind, enc.vocabulary, values
            )
        else:
            again = text_encoding(enc.column, enc.name, enc.kind, enc.vocabulary,
                                  values)  # fmt: skip
            again = dataclasses.replace(again, idf=enc.idf)
        encodings.append(again)
    for j in transform.numeric_columns:
        x[:, j] = raw[MIXED[j]]
    scaling = transform.scaling_for(None)
    return RowTransform(scaling, transform.indicators, tuple(encodings))(x)


@pytest.mark.parametrize(
    ("categorical", "text", "missing"),
    [("onehot", "multihot", "mean"), ("onehot", "tfidf", "median"),
     ("index", "tfidf", "refuse"), ("index", "multihot", "mean")],
)  # fmt: skip
def test_raw_columns_encode_as_fedpipe_does(
    categorical: str, text: str, missing: str
) -> None:
    import keras

    transform = _mixed_transform(categorical, text, missing)
    color = transform.encodings[0]
    assert "violet" not in color.vocabulary and color.vocabulary
    assert bool(transform.indicators) == (missing != "refuse")
    raw = _mixed_raw(missing != "refuse")
    expected = _encode_path(transform, raw)
    identity = keras.Sequential(
        [keras.Input((transform.n_outputs,)), keras.layers.Identity()]
    )
    got = raw_input_model(identity, transform).predict(raw, verbose=0)
    assert got.shape == expected.shape == (8, transform.n_outputs)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    numeric = len(transform.numeric_columns)
    if categorical == "onehot":
        assert got[1, numeric] == 1.0  # teal, unseen: the "other" slot
        assert got[2, numeric] == 1.0  # violet, rare: "other" too
    else:
        assert got[1, numeric] == got[2, numeric] == 0.0
    model = _trained(transform, 3)
    np.testing.assert_allclose(
        raw_input_model(model, transform).predict(raw, verbose=0),
        model.predict(expected, verbose=0),
        rtol=0,
        atol=1e-6,
    )


def test_a_missing_category_and_text_are_imputed_and_flagged() -> None:
    transform = _mixed_transform("onehot", "multihot", "mean")
    color, review = transform.encodings
    raw = _mixed_raw(missing=True)
    import keras

    identity = keras.Sequential(
        [keras.Input((transform.n_outputs,)), keras.layers.Identity()]
    )
    got = raw_input_model(identity, transform).predict(raw, verbose=0)
    numeric = len(transform.numeric_columns)
    assert got[3, numeric + 1] == 1.0  # empty: the most frequent value's slot
    words = got[:, numeric + color.width : numeric + color.width + review.width]
    assert not words[5].any()  # an empty text has no token
    flags = got[:, -len(transform.indicators) :]
    at = {MIXED[j]: k for k, j in enumerate(transform.indicators)}
    assert flags[3, at["color"]] == 1.0 and flags[5, at["review"]] == 1.0
    assert flags[1, at["tiny"]] == 1.0 and flags[0].sum() == 0.0


def test_rows_the_model_reads_otherwise_are_noted() -> None:
    """The predictions say, per row, which blank cells the model filled and
    which categorical values it read as "other" (unseen or too rare to keep);
    before, ``fedpipe predict`` did both silently."""
    from fedpipe.data.scoring import row_notes

    transform = _mixed_transform("onehot", "multihot", "mean")
    color = transform.encodings[0]
    assert color.vocabulary[0] == "red"  # the most frequent (p 0.4)
    found = row_notes(transform, _mixed_raw(missing=True))
    notes = found.notes
    assert [i for i, n in enumerate(notes) if n] == [1, 2, 3, 5, 6]
    assert "color 'teal'" in notes[1] and "tiny blank" in notes[1]
    assert "color 'violet'" in notes[2] and '"other"' in notes[2]  # rare in training
    assert "color blank: filled 'red'" in notes[3] and "huge blank" in notes[3]
    mean_tiny = transform.scaling_for(None).fill[MIXED.index("tiny")]
    assert f"tiny blank: filled {mean_tiny:.6g}" in notes[1]
    assert notes[5] == "review blank: no words"
    assert "color 'teal'" in notes[6] and "tiny blank" in notes[6]
    assert found.other == {"color": 3}
    assert found.filled == {"tiny": 2, "color": 1, "huge": 1, "review": 1}
    line = found.summary()
    assert line is not None and line.startswith("5 of 8 row(s) flagged in the notes")
    assert "3 value(s) not in the model's vocabulary" in line
    assert row_notes(transform, _mixed_raw(missing=False)).summary() is not None
    clean = {k: v[[0, 4, 5, 7]] for k, v in _mixed_raw(missing=False).items()}
    assert row_notes(transform, clean).notes == ["", "", "", ""]
    assert row_notes(transform, clean).summary() is None


def test_the_column_model_loads_with_plain_keras(tmp_path: Path) -> None:
    transform = _mixed_transform("onehot", "tfidf", "mean")
    raw = raw_input_model(_trained(transform), transform)
    path = save_raw_input_model(raw, tmp_path / "round-2" / "model.keras")
    columns = _mixed_raw(missing=True)
    np.savez(tmp_path / "x.npz", **{k: v.astype(str) if v.dtype == object else v
                                    for k, v in columns.items()})  # fmt: skip
    script = (
        "import sys, numpy as np, keras\n"
        "m = keras.saving.load_model(sys.argv[1])\n"
        "x = {k: v.astype(object) if v.dtype.kind == 'U' else v\n"
        "     for k, v in np.load(sys.argv[2]).items()}\n"
        "np.save(sys.argv[3], m.predict(x, verbose=0))\n"
        "assert not [n for n in sys.modules if n.startswith('fedpipe')]\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(path), str(tmp_path / "x.npz"),
         str(tmp_path / "p.npy")],
        check=True, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    np.testing.assert_array_equal(
        np.load(tmp_path / "p.npy"), raw.predict(columns, verbose=0)
    )


def test_string_columns_are_read_as_the_ingest_keys_them(tmp_path: Path) -> None:
    from fedpipe.data.scoring import read_scoring_columns

    frame = pd.DataFrame(
        {"tiny": [0.5, None, 2.0], "color": [" red", None, "teal "],
         "huge": [1, 2, 3], "review": ["Good film", "", "  bad  "]}
    )  # fmt: skip
    path = _csv(tmp_path, frame)
    ids, columns = read_scoring_columns(
        path, columns=MIXED, id_column=None, allow_missing=True,
        strings={"color", "review"},
    )  # fmt: skip
    assert ids == ["row-1", "row-2", "row-3"]
    assert columns["color"].tolist() == ["red", "", "teal"]
    assert columns["review"].tolist() == ["Good film", "", "bad"]
    assert columns["tiny"].dtype == np.float32 and np.isnan(columns["tiny"][1])
    with pytest.raises(ScoringError, match=r"column 'color' has empty cells \(row 2\)"):
        read_scoring_columns(
            path, columns=["huge", "color"], id_column=None, allow_missing=False,
            strings={"color"},
        )  # fmt: skip


def test_tokens_are_textvectorizations() -> None:
    """fedpipe's tokenizer is Keras' (what the model file tokenizes with)."""
    import keras

    from fedpipe.data.preprocess.encode import tokens

    texts = [
        "Hello, World!", "don't  stop_me", "ÉCOLE école Straße", "a\xa0b c",
        "tab\there\nnl\x0bvt\x0cff\rcr", "x--y..z", "  lead  ", "", "😀ok 😀",
    ]  # fmt: skip
    vocabulary = sorted({t for text in texts for t in tokens(text)})
    layer = keras.layers.TextVectorization(vocabulary=vocabulary, output_mode="int")
    got = layer(np.array(texts, dtype=object)).numpy()
    for text, row in zip(texts, got, strict=True):
        expected = [1 + vocabulary.index(t) + 1 for t in tokens(text)]
        assert [int(i) for i in row if i] == expected, text


def test_a_slash_in_a_column_name_reads_underscore() -> None:
    """Keras refuses '/' in an input's name: the column 'w/h' is input 'w_h'."""
    from fedpipe.model.rawinput import raw_inputs

    clients = _mixed_clients(missing=False)
    columns = ["w/h", "color", "huge", "review"]
    transform = fit_transform(
        clients, columns=columns, numeric="standard", fit="federated",
        missing="refuse", bins=32,
        column_types={"color": "categorical", "review": "text"},
        strings={"color": COLOR_VALUES, "review": REVIEW_VALUES},
    )  # fmt: skip
    raw = _mixed_raw(missing=False)
    raw["w/h"] = raw.pop("tiny")
    x = raw_inputs(transform, raw)
    assert list(x) == ["w_h", "color", "huge", "review"]
    model = raw_input_model(_trained(transform), transform)
    assert sorted(i.name for i in model.inputs) == sorted(x)  # Keras sorts them
    assert np.isfinite(model.predict(x, verbose=0)).all()
