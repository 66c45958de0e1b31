"""benchmarks/bench_scale.py on one tiny case, through the real CLI: its figures,
and what ``evaluation.clients: participants`` records in the run it measures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from e2e_helpers import load_script

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_scale.py"


bench = load_script(SCRIPT)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]):
    work = tmp_path_factory.mktemp("bench-scale")
    args = argparse.Namespace(
        rounds=3, rows_per_client=40, images_n=0, evaluate="participants", repeats=1
    )
    case = bench.Case.parse("20x4")
    return work / "p20x4", bench.measure(case, work, args=args, env=cli_env)


def test_the_row_has_every_figure(measured) -> None:
    _, result = measured
    assert result.fedpipe_s > 0 and result.library_s > 0
    # the printed cells are the measured figures, rounded; the ratio is the run
    # time over the library time before rounding (0.156 / 0.039 may print 3.96x)
    cells = [c.strip() for c in bench.markdown([result]).splitlines()[-1].split("|")]
    run_s, library_s, ratio = float(cells[2]), float(cells[3]), cells[4]
    assert run_s == pytest.approx(result.fedpipe_s, abs=5e-4)
    assert library_s == pytest.approx(result.library_s, abs=5e-4)
    assert ratio.endswith("x")
    assert float(ratio[:-1]) == pytest.approx(
        result.fedpipe_s / result.library_s, abs=5e-3
    )
    assert result.peak_rss_mb > 100 and result.library_rss_mb > 100
    assert result.cache_bytes_per_round > 0
    row = bench.markdown([result]).splitlines()[-1]
    assert row.startswith("| 20x4 (table, mlp) |")


def test_rounds_score_their_participants_and_the_last_everyone(measured) -> None:
    project, _ = measured
    rounds = [
        json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        for k in (1, 2, 3)
    ]
    assert [r.get("clients_scored") for r in rounds] == [4, 4, None]
    last = (project / "metrics/clients/round-3.csv").read_text().splitlines()
    assert len(last) == 1 + 20  # header + every client
    first = (project / "metrics/clients/round-1.csv").read_text().splitlines()
    assert len(first) == 1 + 4
