"""The readable federated statistics (data/preprocess/stats.json, `fedpipe stats`):
the minimum-count rule, the feature skew, the text a person reads, the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedpipe.data.preprocess.summary import shown, skew_matrix, summarize
from fedpipe.observe.clientstats import StatsError, render_stats

K = 5


def _stats(rows: list[np.ndarray], labels: list[np.ndarray] | None = None, **kw):
    if labels is None:
        labels = [np.arange(len(x)) % 2 for x in rows]
    settings = {
        "columns": [f"c{j}" for j in range(rows[0].shape[1])],
        "class_names": ["no", "yes"],
        "kind": "table",
        "min_count": K,
        "bins": 256,
    }
    settings.update(kw)
    return summarize(rows, labels, **settings)


def _counts(stats: dict) -> list[object]:
    """Every count the file writes: rows, labels, per column count, missing and
    histogram bins, globally and per client."""
    blocks = [stats["global"], *(c["columns"] for c in stats["per_client"])]
    out: list[object] = [stats["rows"]]
    for client in stats["per_client"]:
        out += [client["rows"], *client["labels"].values()]
    for block in blocks:
        for column in block.values():
            out += [column["count"], column["missing"], *column["histogram"]]
    return out


def test_shown_withholds_counts_below_k_but_not_zero() -> None:
    assert [shown(n, 5) for n in (0, 1, 4, 5, 12)] == [0, "<5", "<5", 5, 12]


def test_a_client_with_3_rows_in_a_bin_is_not_shown() -> None:
    rng = np.random.default_rng(0)
    big = rng.uniform(0.0, 10.0, size=(200, 1))
    # client 1: 40 rows in the middle, 3 rows alone in the top bin
    small = np.concatenate([np.full((40, 1), 5.0), np.full((3, 1), 10.0)])
    stats = _stats([big, small])
    bins = stats["per_client"][1]["columns"]["c0"]["histogram"]
    assert bins[-1] == f"<{K}"
    assert 3 not in bins
    assert 40 in bins  # a bin of k or more rows is shown as it is
    # the file never holds a count in 1..k-1 anywhere
    counts = _counts(stats)
    assert f"<{K}" in counts
    assert not [v for v in counts if isinstance(v, int) and 0 < v < K]


def test_a_small_client_and_a_rare_label_are_withheld() -> None:
    rng = np.random.default_rng(1)
    rows = [rng.normal(size=(50, 2)), rng.normal(size=(3, 2))]
    labels = [np.r_[np.zeros(47), np.ones(3)].astype(int), np.zeros(3, int)]
    stats = _stats(rows, labels)
    assert stats["per_client"][0]["labels"] == {"no": 47, "yes": f"<{K}"}
    tiny = stats["per_client"][1]
    assert tiny["rows"] == f"<{K}"
    for column in tiny["columns"].values():
        for key in ("count", "mean", "std", "q25", "q50", "q75"):
            assert column[key] == f"<{K}", key
    assert np.isnan(skew_matrix(stats)[1]).all()  # no skew cell either
    text = render_stats(stats, source="stats.json")
    assert f"client 1: <{K} rows" in text


def test_global_statistics_equal_the_pooled_rows() -> None:
    rng = np.random.default_rng(2)
    rows = [rng.normal(3.0, 2.0, size=(n, 3)) for n in (30, 70, 45)]
    pooled = np.concatenate(rows)
    stats = _stats(rows)
    for j, name in enumerate(stats["columns"]):
        g = stats["global"][name]
        assert g["count"] == len(pooled)
        assert g["mean"] == pytest.approx(pooled[:, j].mean(), abs=1e-9)
        assert g["std"] == pytest.approx(pooled[:, j].std(), abs=1e-9)
        assert g["min"] == pooled[:, j].min() and g["max"] == pooled[:, j].max()
        width = (g["max"] - g["min"]) / 256
        assert abs(g["q50"] - np.median(pooled[:, j])) <= width


@pytest.mark.parametrize("column", [0, 1])
def test_the_skew_figure_rises_with_a_planted_shift(column: int) -> None:
    rng = np.random.default_rng(3)
    base = [rng.normal(size=(80, 2)) for _ in range(4)]
    skews = []
    for shift in (0.0, 0.5, 1.0, 2.0, 4.0):
        rows = [x.copy() for x in base]
        rows[2][:, column] += shift
        z = skew_matrix(_stats(rows))
        skews.append(z[2, column])
        other = 1 - column
        assert abs(z[2, other]) < 0.5  # the other column stays put
    assert all(b > a for a, b in zip(skews, skews[1:], strict=False)), skews
    assert skews[0] < 0.5 < 1.0 < skews[-1]


def test_missing_values_are_counted_per_client() -> None:
    x = np.arange(40, dtype=float).reshape(20, 2)
    x[:6, 0] = np.nan
    y = np.arange(40, dtype=float).reshape(20, 2)
    y[:2, 1] = np.nan
    stats = _stats([x, y])
    assert stats["per_client"][0]["columns"]["c0"]["missing"] == 6
    assert stats["per_client"][1]["columns"]["c1"]["missing"] == f"<{K}"
    assert stats["global"]["c0"]["missing"] == 6


def test_render_stats_on_a_tiny_table() -> None:
    rows = [
        np.array([[1.0, 10.0]] * 6 + [[3.0, 30.0]] * 6),
        np.array([[2.0, 20.0]] * 10),
    ]
    stats = _stats(rows, columns=["age", "income"])
    text = render_stats(stats, source="data/preprocess/stats.json")
    lines = text.splitlines()
    assert lines[0].startswith("data/preprocess/stats.json: table, 2 clients, 22 ")
    assert "counts below 5 shown as <5" in lines[0]
    glob = next(i for i, line in enumerate(lines) if line == "global")
    assert lines[glob + 1].split() == [
        "column", "count", "missing", "mean", "std", "min", "q25", "median", "q75",
        "max",
    ]  # fmt: skip
    age = lines[glob + 2].split()
    assert age[:4] == ["age", "22", "0", "2"] and age[5] == "1" and age[-1] == "3"
    assert "client 0: 12 rows; labels no 6, yes 6" in lines
    assert "client 1: 10 rows; labels no 5, yes 5" in lines
    client1 = lines[lines.index("client 1: 10 rows; labels no 5, yes 5") + 2]
    assert client1.split()[:4] == ["age", "10", "0", "2"]
    assert "feature skew (client mean - global mean, in global std):" in lines
    only = render_stats(stats, source="s", clients=[1], columns=["income"])
    assert "client 0" not in only and " age " not in only and "income" in only


def test_render_stats_names_an_unknown_column_or_client() -> None:
    stats = _stats([np.ones((10, 2)), np.ones((10, 2))])
    with pytest.raises(StatsError, match=r"--column 'nope': not a column of s; "):
        render_stats(stats, source="s", columns=["nope"])
    with pytest.raises(StatsError, match=r"--client 7: s has clients 0\.\.1"):
        render_stats(stats, source="s", clients=[7])


def test_the_report_has_the_section(tmp_path: Path) -> None:
    from fedpipe.core.jsonio import write_json
    from fedpipe.observe.report import build_report

    rng = np.random.default_rng(4)
    rows = [rng.normal(size=(30, 2)), rng.normal(size=(3, 2)) + 2]
    write_json(tmp_path / "data/preprocess/stats.json", _stats(rows))
    page = build_report(tmp_path, findings=[], generated=None)
    assert "Federated statistics and feature skew" in page
    assert 'data-plot="skew"' in page
    assert "Client 1: &lt;5 rows" in page
    # round-tripped through JSON, the file reads the same
    again = json.loads((tmp_path / "data/preprocess/stats.json").read_text())
    assert again["per_client"][1]["rows"] == "<5"


def test_categorical_columns_show_top_values_under_the_rule() -> None:
    """A category is named with its rows only where it has k rows or more
    (globally, per client); codes get no mean, quartiles or skew."""
    values = ["red", "green", "teal"]
    # client 0: red 20, green 6, teal 3; client 1: red 4, green 10, teal 3
    c0 = np.array([0] * 20 + [1] * 6 + [2] * 3, dtype=np.float64)
    c1 = np.array([0] * 4 + [1] * 10 + [2] * 3, dtype=np.float64)
    rows = [np.stack([c, np.arange(len(c), dtype=float)], axis=1) for c in (c0, c1)]
    stats = _stats(rows, columns=["color", "n"], column_types={"color": "categorical"},
                   strings={"color": values})  # fmt: skip
    glob = stats["global"]["color"]
    assert glob["top"] == {"red": 24, "green": 16, "teal": 6}
    assert glob["other"] == 0 and glob["mean"] is None and glob["histogram"] == []
    client0, client1 = (c["columns"]["color"] for c in stats["per_client"])
    assert client0["top"] == {"red": 20, "green": 6}  # teal: 3 rows, not named
    assert client0["other"] == "<5"
    assert client1["top"] == {"green": 10}  # red 4, teal 3: not named
    assert client1["other"] == 7
    assert skew_matrix(stats)[:, 0].tolist() == [pytest.approx(np.nan, nan_ok=True)] * 2
    assert stats["global"]["n"]["mean"] is not None  # a numeric column as before
    text = render_stats(stats, source="s")
    assert "  color (values): red 24, green 16, teal 6; other 0" in text
    assert "  color (values): red 20, green 6; other <5" in text
    assert "  color (values): green 10; other 7" in text
    assert "teal 3" not in text and "red 4" not in text


def test_text_columns_show_top_tokens_by_rows() -> None:
    values = ["good film", "bad film", "good", "odd words"]
    codes = np.array([0] * 6 + [1] * 5 + [2] * 2 + [3] * 1, dtype=np.float64)
    stats = _stats([codes[:, None]], columns=["review"],
                   column_types={"review": "text"}, strings={"review": values},
                   labels=[np.zeros(len(codes), dtype=int)])  # fmt: skip
    assert stats["global"]["review"]["top"] == {"film": 11, "good": 8, "bad": 5}
    assert "other" not in stats["global"]["review"]


def test_the_report_lists_top_values_under_the_rule(tmp_path: Path) -> None:
    from fedpipe.core.jsonio import write_json
    from fedpipe.observe.report import build_report

    c0 = np.array([0] * 20 + [1] * 6 + [2] * 3, dtype=np.float64)[:, None]
    stats = _stats([c0, c0[:12]], columns=["color"],
                   column_types={"color": "categorical"},
                   strings={"color": ["red", "green", "teal"]})  # fmt: skip
    stats["heldout_other"] = {"color": {"unseen": 6, "rare": "<5"}}
    write_json(tmp_path / "data/preprocess/stats.json", stats)
    page = build_report(tmp_path, findings=[], generated=None)
    assert "color (values): red 32, green 6; other &lt;5" in page
    assert "color (values): red 12; other 0" in page  # client 1
    assert "color: 6 unseen" in page
    assert "teal" not in page
