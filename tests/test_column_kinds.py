"""Column kinds a person would recognise: ISO dates and timestamps become days
since 1970-01-01, yes/no and true/false columns 1/0, a numeric column of a few
whole-number levels is warned about (naming preprocess.categorical); each
column's kind and why reach schema.json and ``fedpipe stats``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import PreprocessParams
from fedpipe.core.jsonio import write_json
from fedpipe.data.ingest import ingest_table, open_features, read_samples, read_schema
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.preprocess import fit_prepared

N = 80


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "when": [
                "2024-03-05",  # 19787 days after 1970-01-01
                "2024-03-06T12:00:00Z",  # and a half
                "1970-01-02 06:00",  # 1.25 (no offset: UTC)
                "2024-03-05T02:00:00+02:00",  # midnight UTC: 19787
            ]
            * (N // 4),
            "smoker": ["yes", "No", "TRUE", "false"] * (N // 4),
            "grade": rng.integers(1, 6, size=N),  # 5 levels: codes?
            "flag": rng.integers(0, 2, size=N),  # 0/1: numeric, no warning
            "x": rng.normal(5.0, 2.0, size=N),
            "label": np.arange(N) % 2,
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("kinds")
    frame = _frame()
    frame.to_csv(root / "t.csv", index=False)
    result = ingest_table(
        root / "t.csv", out_dir=root / "prepared", label_column="label"
    )
    return {"root": root, "prepared": root / "prepared", "result": result}


def _column(prepared: Path, name: str) -> np.ndarray:
    names = read_schema(prepared)["feature_names"]
    return np.asarray(open_features(prepared))[:, names.index(name)]


def test_a_date_column_becomes_days_since_1970(table: dict, tmp_path: Path) -> None:
    days = _column(table["prepared"], "when")[:4]
    np.testing.assert_allclose(days, [19787.0, 19788.5, 1.25, 19787.0])
    schema = read_schema(table["prepared"])
    assert schema["column_types"]["when"] == "date"
    assert "when" not in schema.get("strings", {})
    assert set(read_samples(table["prepared"])["status"]) == {"ok"}
    # one value that is not a date (or yes/no) keeps the column categorical
    frame = _frame()
    frame.loc[7, "when"] = "soon"
    frame.loc[9, "smoker"] = "maybe"
    frame.to_csv(tmp_path / "t.csv", index=False)
    ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label")
    types = read_schema(tmp_path / "p")["column_types"]
    assert types["when"] == "categorical" and types["smoker"] == "categorical"


def test_a_yes_no_column_becomes_1_and_0(table: dict) -> None:
    assert _column(table["prepared"], "smoker")[:4].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert read_schema(table["prepared"])["column_types"]["smoker"] == "boolean"


def test_the_preprocess_scales_dates_and_leaves_booleans_0_1(
    table: dict, tmp_path: Path
) -> None:
    prepared = table["prepared"]
    manifest = partition_table(
        read_samples(prepared), classes=[0, 1], seed=0, test_fraction=0.2,
        method="iid", n_clients=2, local_test_fraction=0.2, dedupe=False,
        settings={"min_samples": 5, "min_classes": 1},
    )  # fmt: skip
    write_json(tmp_path / "m.json", manifest)
    transform = fit_prepared(prepared, tmp_path / "m.json", PreprocessParams())
    scaling = transform.scaling_for(None)
    names = list(transform.columns)
    smoker, when = names.index("smoker"), names.index("when")
    assert (scaling.center[smoker], scaling.scale[smoker]) == (0.0, 1.0)
    assert scaling.center[when] > 10000 and scaling.scale[when] > 1000
    assert not transform.encodings  # neither is a category


def test_a_few_whole_number_levels_are_warned_about_by_name(table: dict) -> None:
    (warning,) = table["result"].warnings
    assert "'grade'" in warning and "preprocess.categorical" in warning
    assert "(1, 2, 3, 4, 5)" in warning
    kinds = read_schema(table["prepared"])["column_kinds"]
    assert kinds["grade"]["kind"] == "numeric"
    assert "preprocess.categorical" in kinds["grade"]["why"]
    assert kinds["when"]["kind"] == "date" and kinds["x"]["kind"] == "numeric"


def test_parquet_timestamps_and_bools_are_dates_and_booleans(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "at": pd.to_datetime(
                ["2024-03-05 12:00", "1970-01-03"] * 30, format="ISO8601"
            ),
            "ok": [True, False] * 30,
            "x": np.arange(60.0),
            "label": [0, 1] * 30,
        }
    )
    frame.to_parquet(tmp_path / "t.parquet")
    ingest_table(tmp_path / "t.parquet", out_dir=tmp_path / "p", label_column="label")
    schema = read_schema(tmp_path / "p")
    assert schema["column_types"] == {"at": "date", "ok": "boolean"}
    assert _column(tmp_path / "p", "at")[:2].tolist() == [19787.5, 2.0]
    assert _column(tmp_path / "p", "ok")[:2].tolist() == [1.0, 0.0]


def test_stats_show_each_columns_kind_and_why() -> None:
    from fedpipe.observe.clientstats import kind_lines

    stats = {
        "column_kinds": {
            "when": {"kind": "date", "why": "every value an ISO date"},
            "x": {"kind": "numeric", "why": "numbers"},
        }
    }
    assert kind_lines(stats, ["x", "when"]) == [
        "  x: numeric (numbers)",
        "  when: date (every value an ISO date)",
    ]


def test_predict_reads_dates_and_booleans_as_the_ingest_stored_them(
    tmp_path: Path,
) -> None:
    from fedpipe.data.scoring import ScoringError, read_scoring_columns

    pd.DataFrame(
        {"when": ["2024-03-05", "1970-01-02 06:00"], "smoker": ["Yes", "false"]}
    ).to_csv(tmp_path / "new.csv", index=False)
    _, values = read_scoring_columns(
        tmp_path / "new.csv", columns=["when", "smoker"], id_column=None,
        allow_missing=False, kinds={"when": "date", "smoker": "boolean"},
    )  # fmt: skip
    assert values["when"].tolist() == [19787.0, 1.25]
    assert values["smoker"].tolist() == [1.0, 0.0]
    pd.DataFrame({"when": ["tomorrow"], "smoker": ["yes"]}).to_csv(
        tmp_path / "bad.csv", index=False
    )
    with pytest.raises(ScoringError, match="'when' has values that are not ISO"):
        read_scoring_columns(
            tmp_path / "bad.csv", columns=["when", "smoker"], id_column=None,
            allow_missing=False, kinds={"when": "date", "smoker": "boolean"},
        )  # fmt: skip
