"""The doctor and the report on real runs through `fedpipe run`.

Two tiny projects from the same data (the session's digits, already ingested
and validated: ``tiny_ready``): a healthy one, and the seed question's
configuration (the seed question's CNN, Adam, and a FedAvg whose aggregation
weights sum to more than 1, planted with `faults.aggregation_weight_sum`), made
from a copy of the healthy one after its run (its data stages are not rerun). The
doctor must find nothing in the first and name the misweighted aggregation as
the cause in the second, whose global loss climbs by orders of magnitude while
its accuracy holds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, copy_project, run_cli, run_main

from fedpipe.config.overrides import set_params
from fedpipe.observe.doctor import codes

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.audit_exempt(
        "damages a copy of its project on purpose (the doctor on a damaged copy)"
    ),
]
FEDPIPE = str(BIN / "fedpipe")
HEALTHY = {"federation": {"clients": 4, "rounds": 5, "fraction_fit": 1.0}}
SEED_QUESTION = {  # on top of HEALTHY
    "train.optimizer": "adam",
    "train.lr": 0.001,
    "model.name": "seed_cnn",
    "faults.aggregation_weight_sum": 2.0,  # 1.5 in the README, over 10 rounds
}


@pytest.fixture(scope="module")
def runs(
    tiny_ready: Path,
    tmp_path_factory: pytest.TempPathFactory,
    cli_env: dict[str, str],
) -> dict:
    base = tmp_path_factory.mktemp("diagnostics")
    healthy = copy_project(tiny_ready, base / "healthy", cli_env, **HEALTHY)
    proc = run_main([FEDPIPE, "run", "--no-server-start"], healthy, cli_env)
    ran = proc.stdout.split("stage(s) ran", 1)[1]
    assert "validate" not in ran and "partition" in ran  # 4 clients, not 3
    seed = shutil.copytree(healthy, base / "seed", symlinks=True)
    set_params(seed / "params.yaml", SEED_QUESTION)
    run_cli(["git", "commit", "-qam", "the seed question"], seed, cli_env)
    proc = run_main([FEDPIPE, "run", "--no-server-start"], seed, cli_env)
    ran = proc.stdout.split("stage(s) ran", 1)[1]
    assert "partition" not in ran and "init" in ran  # the same data, a new model
    return {"healthy": healthy, "seed": seed}


def _rounds(project: Path) -> list[dict]:
    files = sorted(
        (project / "metrics/rounds").glob("round-*.json"),
        key=lambda p: int(p.stem.split("-")[1]),
    )
    return [json.loads(p.read_text()) for p in files]


def test_every_round_records_its_health(runs: dict) -> None:
    for project in runs.values():
        for k in range(1, 6):
            health = json.loads(
                (project / f"metrics/health/round-{k}.json").read_text()
            )
            assert health["round"] == k
            assert [c["client"] for c in health["clients"]] == [0, 1, 2, 3]
            assert all(
                0.0 <= (layer["divergence"] or 0) <= 1 for layer in health["layers"]
            )
        lock = (project / "dvc.lock").read_text()
        assert "metrics/health/round-5.json" in lock  # a versioned round output


def test_healthy_run_has_no_findings(runs: dict, cli_env: dict[str, str]) -> None:
    proc = run_main(["doctor"], runs["healthy"], cli_env, check=False)
    assert proc.returncode == 0, proc.stdout
    assert "no findings" in proc.stdout


def test_doctor_on_a_damaged_copy_lists_what_it_could_not_read(
    runs: dict, cli_env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "damaged"
    shutil.copytree(runs["healthy"], project, symlinks=True)
    health = project / "metrics/health/round-2.json"
    health.write_text(health.read_text()[:50])  # partly written
    (project / "metrics/rounds/round-5.json").unlink()  # stopped after health 5
    # the command's own process (the other doctor calls run in this one)
    proc = run_cli([FEDPIPE, "doctor"], project, cli_env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # info findings only
    assert "Traceback" not in proc.stderr
    # changed since dvc.lock recorded it: not read as this run's, and said
    assert "metrics/health/round-2.json (not the file dvc.lock records" in proc.stdout
    assert "round 5: a health record but no metrics/rounds file" in proc.stdout


def test_seed_question_loss_explodes_while_accuracy_holds(runs: dict) -> None:
    rounds = _rounds(runs["seed"])
    first, last = rounds[1]["global"], rounds[-1]["global"]
    assert last["loss"] > 100 * first["loss"]
    assert last["accuracy"] >= first["accuracy"] - 0.05
    assert last["accuracy"] > 0.5


def test_rounds_record_the_weight_sum_they_applied(runs: dict) -> None:
    """The planted fault is in the round records (not the 1.0 it should be), and
    the health record's fit of what was applied agrees."""
    for name, want in (("healthy", 1.0), ("seed", 2.0)):
        for k, summary in enumerate(_rounds(runs[name]), start=1):
            assert summary["aggregation_weight_sum"] == pytest.approx(want, abs=1e-6)
            health = json.loads(
                (runs[name] / f"metrics/health/round-{k}.json").read_text()
            )
            fitted = health["aggregation"]["weight_sum"]
            assert fitted == pytest.approx(want, abs=2e-3), (name, k)


def test_doctor_names_the_seed_question_cause(
    runs: dict, cli_env: dict[str, str]
) -> None:
    proc = run_main(["doctor", "--format", "json"], runs["seed"], cli_env, check=False)
    assert proc.returncode == 1
    findings = json.loads(proc.stdout)
    findings = findings["findings"] if isinstance(findings, dict) else findings
    assert findings[0]["code"] == codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED
    assert "sum to 2, not 1" in findings[0]["title"]
    assert any(f["code"] == codes.LOSS_RISING_ACCURACY_HOLDS for f in findings)
    text = run_main(["doctor"], runs["seed"], cli_env, check=False).stdout
    assert "effective weights sum to 2" in text and "fix:" in text


def test_report_shows_the_findings_and_lineage(
    runs: dict, cli_env: dict[str, str]
) -> None:
    run_main(["report"], runs["seed"], cli_env)  # its process: test_own_data.py
    page = (runs["seed"] / "reports/report.html").read_text()
    assert "aggregation weights sum to 2, not 1" in page
    assert page.count("<svg") >= 3  # plots inline
    lock = yaml.safe_load((runs["seed"] / "dvc.lock").read_text())
    outs = {o["path"]: o["md5"] for o in lock["stages"]["round@5"]["outs"]}
    assert outs["models/round-5/weights.npz"] in page  # the final model's hash
