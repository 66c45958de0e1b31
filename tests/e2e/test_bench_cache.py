"""benchmarks/bench_cache.py on a tiny SCAFFOLD run: what its figures must satisfy."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from e2e_helpers import load_script

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cache.py"


bench = load_script(SCRIPT)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]):
    project = tmp_path_factory.mktemp("bench-cache") / "project"
    report = bench.measure(
        project, env=cli_env, rounds=2, clients=6, per_round=2, strategy="scaffold"
    )
    return project, report


def test_every_round_adds_bytes(measured) -> None:
    _, report = measured
    assert [s.stage for s in report.rounds] == ["round@1", "round@2"]
    assert all(s.total > 0 for s in report.rounds)


def test_new_round_files_count_their_recorded_size(measured) -> None:
    project, report = measured
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    odb = project / ".dvc" / "cache" / "files" / "md5"
    earlier: set[str] = set()
    checked = 0
    for name, stage in lock["stages"].items():
        for out in stage.get("outs", []):
            md5 = out["md5"]
            if name.startswith("round@") and not md5.endswith(".dir"):
                by_out = next(s for s in report.stages if s.stage == name).by_out
                expected = 0 if md5 in earlier else out["size"]
                assert by_out[out["path"]] == expected, out["path"]
                checked += 1
            earlier |= set(bench.objects_of(odb, md5))
    assert checked >= 2  # the outs are derived from dvc.lock, not named here


def test_stage_figures_add_up_to_the_cache(measured) -> None:
    project, report = measured
    objects = bench.folder_bytes(project / ".dvc" / "cache" / "files")
    assert sum(s.total for s in report.stages) == objects
    assert report.cache_after_init == 0
    assert report.growth >= objects


def test_table_totals_are_the_sum_of_their_outs(measured) -> None:
    _, report = measured
    table = bench.markdown(report).split("\n\n")[0].splitlines()[2:]
    assert [row.split("|")[1].strip() for row in table] == ["1", "2", "mean"]
    for row in table[:-1]:
        *outs, total = (int(c.replace(",", "")) for c in row.split("|")[2:-1])
        assert sum(outs) == total


def test_an_object_already_recorded_is_not_counted_again(measured) -> None:
    project, report = measured
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    order = list(lock["stages"])
    odb = project / ".dvc" / "cache" / "files" / "md5"
    again = copy.deepcopy(lock)
    # round 2 also "outputs" the prepared data (a directory) and round 1's model
    (data,) = lock["stages"]["ingest"]["outs"]
    model = lock["stages"]["round@1"]["outs"][0]
    again["stages"]["round@2"]["outs"] += [
        data | {"path": "copy/prepared"},
        model | {"path": "copy/weights.npz"},
    ]
    recount = {s.stage: s for s in bench.attribute(again, order, odb)}
    first = {s.stage: s for s in report.stages}
    assert recount["round@2"].by_out["copy/prepared"] == 0
    assert recount["round@2"].by_out["copy/weights.npz"] == 0
    assert recount["round@2"].total == first["round@2"].total
    assert data["md5"].endswith(".dir")
    assert first["ingest"].by_out[data["path"]] > data["size"]  # files + listing
