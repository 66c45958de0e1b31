"""scripts/wire_table.py, tiny: the table data set, one seed, one round, DP on,
none and int8 with and without SecAgg+; the refused cell names its rule, int8
costs less than float32 and every run DP cell reports epsilon."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import wire_table  # noqa: E402


def test_the_table_runs_refuses_by_rule_and_orders_the_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--datasets", "breast_cancer", "--seeds", "0", "--rounds", "1",
            "--uplinks", "none", "int8", "--secure", "none", "secagg_plus",
            "--dp", "on", "--out", str(tmp_path)]  # fmt: skip
    assert wire_table.main(argv) == 0
    text = (tmp_path / "wire_table.md").read_text()
    assert text in capsys.readouterr().out
    assert "python scripts/wire_table.py --datasets breast_cancer" in text
    rows = {
        (r["uplink"], r["secure_aggregation"]): r
        for r in json.loads((tmp_path / "wire_table.json").read_text())["rows"]
    }
    assert set(rows) == {
        ("none", "none"), ("int8", "none"),
        ("none", "secagg_plus"), ("int8", "secagg_plus"),
    }  # fmt: skip
    refused = rows["int8", "secagg_plus"]["refused"]
    assert "compression.uplink=int8" in refused
    assert "secure_aggregation.name=secagg_plus" in refused
    assert f"refused: {refused}" in text
    plain, int8 = rows["none", "none"], rows["int8", "none"]
    assert int8["uplink_ratio"] < 0.3 < plain["uplink_ratio"]
    assert int8["uplink_bytes_per_client"] < plain["uplink_bytes_per_client"]
    secure = rows["none", "secagg_plus"]
    assert secure["mechanism"] == "distributed"
    assert secure["protocol_bytes_per_client"] > 0
    for row in (plain, int8, secure):
        assert row["epsilon"] is not None and row["epsilon"] > 0
        assert 0.0 <= row["accuracy_mean"] <= 1.0
    assert plain["mechanism"] == int8["mechanism"] == "central"
