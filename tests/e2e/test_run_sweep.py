"""`fedpipe sweep` end to end: a tiny grid as DVC experiments, killed and resumed.

2 points (train.lr) x 2 seeds, 2 rounds of the tiny federation, two runs at a
time (two slots); the sweep is killed with SIGKILL once a run has finished (the
other slot's run half-way), then the same command finishes it without rerunning
what was done.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2e_helpers import BIN, run_cli

pytestmark = pytest.mark.e2e
SWEEP = [
    str(BIN / "fedpipe"), "sweep", "--no-server-start", "--name", "t",
    "-S", "federation.rounds=2", "-S", "train.lr=0.05,0.2", "--seeds", "2",
    "-j", "2",
]  # fmt: skip
RUNS = ["t-l0.05-s0", "t-l0.2-s0", "t-l0.05-s1", "t-l0.2-s1"]


def _data_rows(path: Path) -> list[str]:
    return path.read_text().splitlines()[1:] if path.exists() else []


def _refs(project: Path) -> dict[str, str]:
    out = run_cli(
        ["git", "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps/"],
        project,
        {**os.environ},
    ).stdout
    return {
        ref.rsplit("/", 1)[1]: sha
        for sha, ref in (line.split() for line in out.splitlines())
        if "/exec/" not in ref
    }


@pytest.fixture(scope="module")
def swept(
    tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """A copy of the tiny run's project, swept: killed after one run, resumed."""
    project = tmp_path_factory.mktemp("sweep") / "project"
    shutil.copytree(tiny_run["project"], project)
    out = project / "sweeps" / "t"
    log = (project.parent / "first.log").open("w")
    first = subprocess.Popen(
        SWEEP, cwd=project, env=cli_env, stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 240
    while not _data_rows(out / "runs.csv"):
        assert first.poll() is None, (project.parent / "first.log").read_text()
        assert time.monotonic() < deadline, "no run finished in 240 s"
        time.sleep(0.3)
    first.send_signal(signal.SIGKILL)
    first.wait()
    log.close()
    before = {
        "rows": _data_rows(out / "runs.csv"),
        "refs": _refs(project),
        "log": (project.parent / "first.log").read_text(),
    }
    second = run_cli(SWEEP, project, cli_env)
    return {"project": project, "out": out, "before": before, "second": second}


def test_the_killed_sweep_resumes_without_rerunning_finished_runs(swept: dict) -> None:
    before, text = swept["before"], swept["second"].stdout
    finished = [row.split(",")[0] for row in before["rows"]]
    assert finished and set(finished) < set(RUNS)
    for name in finished:
        assert f"skip {name}: finished" in text
        point, seed = name.split("-")[1], name[-1]
        assert f"] {point} seed {seed}:" not in text  # no progress line: not rerun
    after = _refs(swept["project"])
    assert {n: after[n] for n in finished} == {n: before["refs"][n] for n in finished}
    rows = _data_rows(swept["out"] / "runs.csv")
    assert set(before["rows"]) <= set(rows)  # the finished runs' rows, unchanged
    assert [r.split(",")[0] for r in rows] == RUNS
    rest = len(RUNS) - len(finished)
    assert f"{rest} of 4 runs to go" in text and "[4/4]" in text


def test_every_run_is_a_dvc_experiment_with_params_and_metrics(
    swept: dict, cli_env: dict[str, str]
) -> None:
    shown = json.loads(
        run_cli(
            [str(BIN / "dvc"), "exp", "show", "--json"], swept["project"], cli_env
        ).stdout
    )
    exps = {
        rev["name"]: rev["data"]
        for row in shown
        for group in row.get("experiments") or []
        for rev in group["revs"]
    }
    assert set(RUNS) <= set(exps)
    for name in RUNS:
        params = exps[name]["params"]["params.yaml"]["data"]
        assert params["seed"] == int(name[-1])
        assert params["train"]["lr"] == float(name.split("-")[1][1:])
        assert params["federation"]["rounds"] == 2
        acc = exps[name]["metrics"]["metrics/summary.json"]["data"]["global"]
        assert 0 < acc["accuracy"] <= 1


def test_the_table_is_complete_with_mean_and_std(swept: dict) -> None:
    out = swept["out"]
    table = (out / "table.md").read_text().splitlines()
    assert table[0].startswith("| train.lr | seeds | federated acc |")
    assert len(table) == 4 and all("| 2 | 0." in line for line in table[2:])
    assert " ± " in table[2]
    layers = json.loads((out / "layers.json").read_text())
    assert [e["run"] for e in layers] == RUNS
    assert all(len(e["layers"]) >= 2 for e in layers)


def test_plots_from_the_table(swept: dict, cli_env: dict[str, str]) -> None:
    out = swept["out"]
    proc = run_cli(
        [str(BIN / "fedpipe"), "sweep", "plot", str(out), "--x", "train.lr",
         "--y", "accuracy"], swept["project"], cli_env,
    )  # fmt: skip
    made = proc.stdout.split()
    assert [Path(p).name for p in made] == [
        "accuracy-by-train_lr.png",
        "divergence_by_layer.png",
    ]
    assert all(Path(p).stat().st_size > 1000 for p in made)
