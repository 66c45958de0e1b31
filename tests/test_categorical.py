"""Categorical and free-text table columns: stored as codes by the ingest, their
vocabularies fitted from the clients' merged counts only (equal to the pooled
training rows'), rare and unseen values to "other", errors that name the column
and the key."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import PreprocessParams, ValidationParams
from fedpipe.core.errors import FedpipeError
from fedpipe.core.jsonio import write_json
from fedpipe.data.ingest import (
    IngestError,
    ingest_table,
    open_features,
    read_samples,
    read_schema,
)
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.preprocess import PreprocessError, fit_prepared, read_transform
from fedpipe.data.preprocess.encode import tokens
from fedpipe.data.splits import open_federated

COLORS = ["red", "green", "blue", "violet"]  # violet: rare
WORDS = ["good", "great", "bad", "awful", "the", "a", "film", "plot"]


def _frame(n: int = 240, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    color = rng.choice(COLORS, size=n, p=[0.4, 0.3, 0.27, 0.03])
    messages = [
        " ".join(rng.choice(WORDS, size=rng.integers(2, 7)))
        + (" Good!" if y else " BAD.")
        for y in labels
    ]
    return pd.DataFrame(
        {
            "x": rng.normal(0, 1e3, n),
            "color": color,
            "size": rng.choice([1, 2, 3], size=n),
            "review": messages,
            "label": labels,
        }
    )


def _prepared(
    root: Path,
    frame: pd.DataFrame | None = None,
    **settings: object,
) -> dict:
    frame = _frame() if frame is None else frame
    frame.to_csv(root / "table.csv", index=False)
    params = PreprocessParams(**{"text": ["review"], **settings})  # type: ignore[arg-type]
    prepared = root / "prepared"
    ingest_table(
        root / "table.csv",
        out_dir=prepared,
        label_column="label",
        categorical=params.categorical,
        text=params.text,
    )
    manifest = partition_table(
        read_samples(prepared), classes=[0, 1], seed=1, test_fraction=0.2,
        method="iid", n_clients=4, local_test_fraction=0.25, dedupe=True,
        settings={"min_samples": 5, "min_classes": 1},
    )  # fmt: skip
    write_json(root / "manifest.json", manifest)
    return {
        "prepared": prepared,
        "manifest": root / "manifest.json",
        "settings": params,
        "raw": manifest,
        "frame": frame,
        "samples": read_samples(prepared),
    }


def _fit(table: dict):
    return fit_prepared(table["prepared"], table["manifest"], table["settings"])


def _rows(table: dict, ids: list[str]) -> pd.DataFrame:
    """The original table's rows of these sample ids (``row-<n>``)."""
    return table["frame"].iloc[[int(i.split("-")[1]) - 1 for i in ids]]


def _train_ids(table: dict) -> list[str]:
    return [i for c in table["raw"]["clients"] for i in c["train"]]


# ---------------------------------------------------------------- ingest


def test_text_columns_are_stored_as_codes_with_their_table(tmp_path: Path) -> None:
    table = _prepared(tmp_path, categorical=["size"])
    schema = read_schema(table["prepared"])
    assert schema["column_types"] == {
        "color": "categorical",  # all text: found, not declared
        "size": "categorical",  # numbers, declared
        "review": "text",
    }
    features = np.asarray(open_features(table["prepared"]))
    names = schema["feature_names"]
    for column in ("color", "size", "review"):
        codes = features[:, names.index(column)].astype(int)
        decoded = [schema["strings"][column][c] for c in codes]
        assert decoded == table["frame"][column].astype(str).tolist()
    assert (read_samples(table["prepared"])["status"] == "ok").all()


def test_a_numeric_table_has_no_string_schema(tmp_path: Path) -> None:
    _frame()[["x", "size", "label"]].to_csv(tmp_path / "t.csv", index=False)
    ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label")
    schema = read_schema(tmp_path / "p")
    assert "column_types" not in schema and "strings" not in schema


def test_a_parquet_string_column_is_categorical(tmp_path: Path) -> None:
    _frame()[["x", "color", "label"]].to_parquet(tmp_path / "t.parquet")
    ingest_table(tmp_path / "t.parquet", out_dir=tmp_path / "p", label_column="label")
    assert read_schema(tmp_path / "p")["column_types"] == {"color": "categorical"}


def test_a_number_after_the_first_rows_keeps_a_column_numeric(
    tmp_path: Path,
) -> None:
    """The first rows rule columns of numbers out; a column that looks like
    text there is read to the end before it is called categorical."""
    n = 3000
    code = ["unknown"] * n
    code[2500] = "5"
    frame = pd.DataFrame({"x": np.arange(n), "code": code, "label": np.arange(n) % 2})
    frame.to_csv(tmp_path / "t.csv", index=False)
    ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label")
    assert "column_types" not in read_schema(tmp_path / "p")
    status = read_samples(tmp_path / "p")["status"]
    assert status.iloc[0] == "non-numeric value 'unknown' in column 'code'"
    assert status.iloc[2500] == "ok"


def test_a_declared_column_that_is_not_a_feature_is_named(tmp_path: Path) -> None:
    _frame().to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(IngestError, match=r"preprocess\.categorical: 'colour' is not"):
        ingest_table(
            tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label",
            categorical=["colour"], text=["review"],
        )  # fmt: skip


def test_a_numeric_column_with_text_in_a_few_rows_names_them(tmp_path: Path) -> None:
    """Validation names the rows and the key that declares the column
    categorical."""
    from fedpipe.data.validation import validate_prepared_dir

    frame = _frame()[["x", "size", "label"]].astype({"size": object})
    frame.loc[[7, 30], "size"] = ["three", "n/a?"]
    frame.to_csv(tmp_path / "t.csv", index=False)
    ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label")
    report = validate_prepared_dir(tmp_path / "p", ValidationParams(min_rows=10))
    message = " ".join(f.detail for f in report.failures)
    status = [f for f in report.failures if f.column == "status"]
    assert status and set(status[0].examples) == {"row-8", "row-31"}
    assert "non-numeric value 'three' in column 'size'" in message
    assert "preprocess.categorical" in message
    # declared, it ingests as categories, 'three' among them
    ingest_table(
        tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label",
        categorical=["size"],
    )  # fmt: skip
    assert "three" in read_schema(tmp_path / "p")["strings"]["size"]
    assert (read_samples(tmp_path / "p")["status"] == "ok").all()


def test_a_declaration_newer_than_the_ingest_is_named(tmp_path: Path) -> None:
    table = _prepared(tmp_path)
    stale = PreprocessParams(text=["review"], categorical=["size"])
    with pytest.raises(PreprocessError, match=r"preprocess\.categorical: 'size'"):
        fit_prepared(table["prepared"], table["manifest"], stale)


# ---------------------------------------------------------------- the fit


def test_federated_vocabularies_equal_the_pooled_training_rows(tmp_path: Path) -> None:
    table = _prepared(tmp_path, min_category_count=5, min_token_count=3)
    transform = _fit(table)
    pooled = _rows(table, _train_ids(table))
    by_name = {e.name: e for e in transform.encodings}
    counts = Counter(pooled["color"])
    expected = sorted(
        (v for v, c in counts.items() if c >= 5), key=lambda v: (-counts[v], v)
    )
    assert list(by_name["color"].vocabulary) == expected
    stats = transform.statistics["columns"]["color"]
    assert stats["categories"] == {v: counts[v] for v in expected}
    words = Counter(t for m in pooled["review"] for t in tokens(m))
    kept = sorted((t for t, c in words.items() if c >= 3), key=lambda t: (-words[t], t))
    assert list(by_name["review"].vocabulary) == kept
    assert set(kept) <= {w.lower() for w in WORDS}


def test_rare_values_go_to_other(tmp_path: Path) -> None:
    table = _prepared(tmp_path, min_category_count=20)
    transform = _fit(table)
    color = next(e for e in transform.encodings if e.name == "color")
    pooled = _rows(table, _train_ids(table))
    rare = int((pooled["color"] == "violet").sum())
    assert 0 < rare < 20 and "violet" not in color.vocabulary
    assert transform.statistics["columns"]["color"]["<other>"] == {
        "rows": rare,
        "values": 1,
    }
    data = open_federated(table["prepared"], table["manifest"])
    j = color.column
    onehot = color(data.clients[0].x_train[:, j])
    codes = data.clients[0].x_train[:, j].astype(int)
    violet = read_schema(table["prepared"])["strings"]["color"].index("violet")
    assert (onehot[codes == violet, 0] == 1).all()  # column 0: other
    assert (onehot.sum(axis=1) == 1).all()


def test_a_heldout_only_category_goes_to_other_and_is_counted(tmp_path: Path) -> None:
    frame = _frame()
    table = _prepared(tmp_path, frame)
    heldout = table["raw"]["heldout"][:6]
    frame.loc[[int(i.split("-")[1]) - 1 for i in heldout], "color"] = "teal"
    frame.loc[int(heldout[5].split("-")[1]) - 1, "color"] = "mauve"
    table = _prepared(tmp_path, frame)
    transform = _fit(table)
    color = next(e for e in transform.encodings if e.name == "color")
    assert "teal" not in color.vocabulary
    assert transform.heldout["other"]["color"]["unseen"] == 6
    # under the minimum-count rule (5): mauve, in one held-out row, is not named
    assert transform.heldout["other"]["color"]["unseen_values"] == {"teal": 5}
    write_json(tmp_path / "t.json", transform.to_json())
    data = open_federated(table["prepared"], table["manifest"], tmp_path / "t.json")
    numeric = len(transform.numeric_columns)
    ids = table["raw"]["heldout"]
    x_test = np.asarray(data.x_test)
    for row in (ids.index(i) for i in heldout):
        assert x_test[row, numeric] == 1.0  # the "other" column of color


def test_test_splits_and_the_heldout_set_do_not_influence_the_fit(
    tmp_path: Path,
) -> None:
    table = _prepared(tmp_path)
    before = _fit(table).to_json()
    tests = [i for c in table["raw"]["clients"] for i in c["test"]]
    frame = table["frame"].copy()
    rows = [int(i.split("-")[1]) - 1 for i in tests + table["raw"]["heldout"]]
    frame.loc[rows, "color"] = "green"
    frame.loc[rows, "review"] = "unheard of words everywhere"
    after = _fit(_prepared(tmp_path, frame)).to_json()
    # the code -> slot tables follow the stored codes (numbered over every row);
    # what each value maps to, and everything fitted, is unchanged
    for fitted in (before, after):
        fitted.pop("heldout")
        for enc in fitted["encodings"]:
            enc.pop("code_slots")
    assert after == before
    # ... while a client's training rows do
    train = table["raw"]["clients"][0]["train"][:8]
    frame.loc[[int(i.split("-")[1]) - 1 for i in train], "color"] = "green"
    changed = _fit(_prepared(tmp_path, frame)).to_json()
    assert changed["statistics"] != before["statistics"]


# ---------------------------------------------------------------- applied


@pytest.mark.parametrize("encoding", ["onehot", "index"])
@pytest.mark.parametrize("text", ["multihot", "tfidf"])
def test_the_federation_reads_encoded_rows(
    tmp_path: Path, encoding: str, text: str
) -> None:
    table = _prepared(tmp_path, categorical_encoding=encoding, text_encoding=text)
    transform = _fit(table)
    write_json(tmp_path / "t.json", transform.to_json())
    back = read_transform(tmp_path / "t.json")
    assert back.to_json() == transform.to_json()
    data = open_federated(table["prepared"], table["manifest"], tmp_path / "t.json")
    color, review = transform.encodings
    numeric = len(transform.numeric_columns)  # x and size
    width = numeric + color.width + review.width
    assert data.spec.input_shape == (width,) == (transform.n_outputs,)
    x = data.clients[1].x_train
    assert x.shape[1] == width and np.isfinite(x).all()
    lazy = data.clients[1].x_train_lazy
    chunks = np.concatenate([lazy[i : i + 7] for i in range(0, len(lazy), 7)])
    np.testing.assert_array_equal(chunks, x)  # any chunking, the same bits
    words = x[:, numeric + color.width :]
    if text == "tfidf":
        np.testing.assert_allclose(np.linalg.norm(words, axis=1), 1.0, rtol=1e-6)
    else:
        assert set(np.unique(words)) <= {0.0, 1.0}
    if encoding == "index":
        slots = set(range(1 + len(color.vocabulary)))
        assert set(np.unique(x[:, numeric])) <= slots


def test_missing_categories_are_imputed_with_the_most_frequent(tmp_path: Path) -> None:
    frame = _frame()
    frame.loc[[3, 9, 40], "color"] = np.nan
    with pytest.raises(FedpipeError, match=r"preprocess\.missing"):
        _fit(_prepared(tmp_path, frame))
    table = _prepared(tmp_path, frame, missing="mean")
    transform = _fit(table)
    color = next(e for e in transform.encodings if e.name == "color")
    assert transform.indicators == (color.column,)
    write_json(tmp_path / "t.json", transform.to_json())
    data = open_federated(table["prepared"], table["manifest"], tmp_path / "t.json")
    x = np.concatenate([c.x_train for c in data.clients])
    flagged = x[:, -1] == 1.0
    assert flagged.sum() >= 1
    numeric = len(transform.numeric_columns)
    onehot = x[:, numeric : numeric + color.width]
    assert (onehot[flagged, 1] == 1.0).all()  # slot 1: the most frequent value


def test_heldout_only_and_rare_categories_are_counted_in_the_stats(
    tmp_path: Path,
) -> None:
    """``fedpipe stats`` (stats.json) counts the held-out rows that go to
    "other": a value no client trained on (unseen) and a rare one."""
    from fedpipe.data.preprocess.summary import summarize_prepared
    from fedpipe.observe.clientstats import render_stats

    frame = _frame()
    table = _prepared(tmp_path, frame)
    heldout = table["raw"]["heldout"]
    rows = [int(i.split("-")[1]) - 1 for i in heldout]
    frame.loc[rows[:6], "color"] = "teal"
    table = _prepared(tmp_path, frame, min_category_count=20, min_count_shown=2)
    stats = summarize_prepared(table["prepared"], table["manifest"], table["settings"])
    trained = _rows(table, _train_ids(table))["color"]
    assert "teal" not in set(trained) and 0 < (trained == "violet").sum() < 20
    held = _rows(table, heldout)["color"]
    rare = int((held == "violet").sum())
    assert stats["heldout_other"]["color"] == {"unseen": 6, "rare": rare}
    assert "teal" not in stats["global"]["color"]["top"]
    assert "review" not in stats["heldout_other"]  # a text column has no "other"
    text = render_stats(stats, source="s")
    assert f"  color: 6 unseen (in no client's training rows), {rare} rare" in text
