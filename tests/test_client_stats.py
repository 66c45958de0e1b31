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
    # the client's 43 rows are shown: its 40-row bin would give the 3 away by
    # difference, so it is hidden too (as ">=k": it holds k rows or more)
    assert stats["per_client"][1]["columns"]["c0"]["count"] == 43
    assert 40 not in bins and f">={K}" in bins
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
    # teal: 3 rows, not named; other "<5" beside the client's 29 values would
    # follow by difference from red 20 and green 6, so green is hidden too
    assert client0["count"] == 29
    assert client0["top"] == {"red": 20, "green": ">=5"}
    assert client0["other"] == "<5"
    assert client1["top"] == {"green": 10}  # red 4, teal 3: not named
    assert client1["other"] == 7
    assert skew_matrix(stats)[:, 0].tolist() == [pytest.approx(np.nan, nan_ok=True)] * 2
    assert stats["global"]["n"]["mean"] is not None  # a numeric column as before
    text = render_stats(stats, source="s")
    assert "  color (values): red 24, green 16, teal 6; other 0" in text
    assert "  color (values): red 20, green >=5; other <5" in text
    assert "  color (values): green 10; other 7" in text
    assert "teal 3" not in text and "red 4" not in text


def _derivable(stats: dict) -> list[str]:
    """Hidden counts a reader recovers by subtraction, worked out here by hand
    (not with the writer's relations): a client's missing from its rows and
    count, a hidden bin from the count and the other bins, a categorical
    ``other`` from the count and the top values."""
    found = []
    blocks = [("global", stats["rows"], stats["global"])] + [
        (f"client {i}", c["rows"], c["columns"])
        for i, c in enumerate(stats["per_client"])
    ]
    for who, rows, columns in blocks:
        for name, c in columns.items():
            pair = [c["count"], c["missing"]]
            if isinstance(rows, int) and sum(isinstance(v, str) for v in pair) == 1:
                found.append(f"{who} {name}: count/missing")
            bins = [c["count"], *c["histogram"]]
            if c["histogram"] and sum(isinstance(v, str) for v in bins) == 1:
                found.append(f"{who} {name}: histogram")
            if "other" in c:
                parts = [c["count"], c["other"], *c["top"].values()]
                if sum(isinstance(v, str) for v in parts) == 1:
                    found.append(f"{who} {name}: other")
    return found


@pytest.mark.parametrize("seed", range(20))
def test_no_hidden_count_follows_by_difference(seed: int) -> None:
    """Random small clients with missing values, rare categories and sparse
    bins: every hidden cell stays hidden when the reader subtracts (before
    the rule closed the relations, 'count 43 beside missing <5' and 'red 20,
    green 6; other <5' gave the small cells away: this failed for all 20)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(int(rng.integers(2, 5))):
        n = int(rng.integers(3, 60))
        x = np.stack(
            [rng.choice(4, size=n, p=[0.6, 0.25, 0.1, 0.05]).astype(float),
             rng.exponential(size=n)], axis=1,
        )  # fmt: skip
        x[rng.random(n) < 0.05, 1] = np.nan
        rows.append(x)
    labels = [(rng.random(len(x)) < 0.1).astype(int) for x in rows]
    stats = _stats(rows, labels, columns=["color", "v"],
                   column_types={"color": "categorical"},
                   strings={"color": ["a", "b", "c", "d"]})  # fmt: skip
    assert _derivable(stats) == []
    assert not [v for v in _counts(stats) if isinstance(v, int) and 0 < v < K]


def test_the_audit_reads_the_relations_the_writer_closed() -> None:
    from fedpipe.core.smallcells import disclosures
    from fedpipe.data.preprocess.summary import count_cells, count_relations

    c0 = np.array([0] * 20 + [1] * 6 + [2] * 3, dtype=np.float64)[:, None]
    stats = _stats([c0, c0[:12]], columns=["color"],
                   column_types={"color": "categorical"},
                   strings={"color": ["red", "green", "teal"]})  # fmt: skip
    assert disclosures(count_cells(stats), count_relations(stats), K) == []
    stats["global"]["color"]["top"]["green"] = 6  # as the file was written before
    found = disclosures(count_cells(stats), count_relations(stats), K)
    assert found == [
        "global.color.other: written '<5' but 3 by difference from "
        "global.color.count (column color, top values)"
    ]


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
    assert "color (values): red 32, green &gt;=5; other &lt;5" in page
    assert "color (values): red 12; other 0" in page  # client 1
    assert "color: 6 unseen" in page
    assert "teal" not in page


def test_quartiles_of_whole_number_columns_are_exact() -> None:
    """A 0/1 column's quartiles read 0 / 0 / 1, not points inside the first bin
    (0.001 / 0.002 / 0.004 before); a count column's are its values; a
    continuous column is still interpolated (within one bin)."""
    flags = [[0, 0, 0, 1] * 5, [0, 1] * 6]  # 32 rows, 11 ones
    counts = [[0, 1, 2, 2, 3] * 4, [5, 2, 2, 1, 1, 2] * 2]
    rows = [
        np.column_stack([f, c, np.linspace(0.5, 7.3, len(f))]).astype(np.float64)
        for f, c in zip(flags, counts, strict=True)
    ]
    stats = _stats(rows)
    pooled = np.concatenate(rows)
    for j, name in enumerate(("c0", "c1")):
        g = stats["global"][name]
        expected = [
            np.quantile(pooled[:, j], p, method="inverted_cdf")
            for p in (0.25, 0.5, 0.75)
        ]
        assert [g["q25"], g["q50"], g["q75"]] == expected, (name, g)
    assert [stats["global"]["c0"][q] for q in ("q25", "q50", "q75")] == [0, 0, 1]
    g = stats["global"]["c2"]
    assert 0.5 < g["q25"] < g["q50"] < g["q75"] < 7.3
    assert g["q50"] != round(g["q50"])  # not snapped: the column is not whole
