"""Differential privacy through the real CLI: ``privacy.target_epsilon`` stops
``fedpipe run`` before the round that would pass it, epsilon is a DVC metric of
every recorded round, and the privacy table script runs at one epsilon."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from e2e_helpers import BIN, SCRIPTS, TINY, run_cli, run_main

from fedpipe.config import layout
from fedpipe.config.params import load_params
from fedpipe.config.privacy import Privacy
from fedpipe.core.seeds import rng_for
from fedpipe.core.weights import load_weights
from fedpipe.federation.privacy.accountant import central_epsilon
from fedpipe.federation.privacy.mechanism import gaussian_like, global_norm, privacy_rng
from fedpipe.observe.leaks import public_leaks

pytestmark = [
    pytest.mark.e2e,
]
FEDPIPE = str(BIN / "fedpipe")


def test_target_epsilon_stops_the_run_and_epsilon_is_a_dvc_metric(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    # the session's tiny run, rerun with privacy: its data stages stay up to date
    project = tmp_path / "p"
    shutil.copytree(tiny_run["project"], project)
    lock_before = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    federation = TINY["federation"]  # 3 clients, 2 a round, 4 rounds
    privacy = Privacy("central", 1.0, 2.0, 1e-3, federation["clients"], 2)
    target = (central_epsilon(privacy, 2) + central_epsilon(privacy, 3)) / 2
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["privacy"] = {
        "mechanism": "central",
        "noise_multiplier": 2.0,
        "delta": 1e-3,
        "target_epsilon": round(target, 4),
    }
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    proc = run_cli([FEDPIPE, "run", "--no-server-start"], project, cli_env, check=False)

    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "privacy.target_epsilon" in errors[0] and "round 3" in errors[0]
    assert "rounds 1..2 kept" in errors[0]
    assert "Traceback" not in proc.stderr
    rounds = project / "metrics/rounds"
    for k in (1, 2):
        spent = json.loads((rounds / f"round-{k}.json").read_text())["privacy"]
        assert spent["epsilon"] == pytest.approx(central_epsilon(privacy, k), abs=1e-6)
    # round 3 on was not computed: the earlier run's records stand in dvc.lock
    # (its models in DVC's cache), its files are not left published beside
    # this run's (they were that run's, without DP: per-client tables)
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert lock["round@2"] != lock_before["round@2"]
    assert lock["round@3"] == lock_before["round@3"]
    for k in (3, 4):
        assert not (rounds / f"round-{k}.json").exists()
        assert not (project / layout.client_metrics(k)).exists()
        assert not (project / layout.model_dir(k)).exists()
    assert not (project / layout.HISTORY_CSV).exists()
    shown = run_cli(
        [str(BIN / "dvc"), "metrics", "show", "--json"], project, cli_env
    ).stdout
    metrics = json.loads(shown)
    found = {
        path: values["privacy"]["epsilon"]
        for run in metrics.values()
        for path, data in run["data"].items()
        for values in [data.get("data", {})]
        if "privacy" in values
    }
    assert found["metrics/rounds/round-1.json"] < found["metrics/rounds/round-2.json"]
    _the_published_files_do_not_give_the_noise_away(project, cli_env, per_round=2)


def _the_published_files_do_not_give_the_noise_away(
    project: Path, cli_env: dict[str, str], *, per_round: int
) -> None:
    """The round stage keyed the noise by the project's key file, which git
    ignores; from params.yaml and the weights alone the noise of round 1 does
    not come off, with the key it does (central FedAvg, fixed clip 1)."""
    key_file = project / layout.DP_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    run_cli(["git", "check-ignore", "-q", str(layout.DP_KEY)], project, cli_env)
    params = load_params(project / "params.yaml")
    # the noise-free signal norm is the oracle's (not in the published record)
    oracle = json.loads((project / layout.oracle_record(1)).read_text())["summary"]
    signal, noise = oracle["privacy"]["signal_norm"], oracle["privacy"]["noise_norm"]
    before = load_weights(project / layout.model_weights(0))
    after = load_weights(project / layout.model_weights(1))
    delta = [np.asarray(a, np.float64) - b for a, b in zip(after, before, strict=True)]
    sigma = params.privacy.noise_multiplier * params.privacy.clip_norm

    def stripped(rng: np.random.Generator) -> float:
        z = gaussian_like(rng, delta, sigma)
        return global_norm([d - n / per_round for d, n in zip(delta, z, strict=True)])

    attacker = stripped(rng_for(params.seed, "privacy", 1))
    assert abs(attacker - signal) > 0.5 * noise, (attacker, signal, noise)
    owner = stripped(privacy_rng(params.seed, 1, key=key_file.read_bytes()))
    assert owner == pytest.approx(signal, rel=1e-3, abs=1e-4)


def _published_files(project: Path, cli_env: dict[str, str]) -> list[Path]:
    """Every file a DP run publishes: git-tracked, or a DVC output (the outs,
    metrics and plots dvc.lock records, folders walked)."""
    tracked = run_cli(["git", "ls-files"], project, cli_env).stdout.split()
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    outs = [o["path"] for stage in lock.values() for o in stage.get("outs", [])]
    files = {project / p for p in tracked}
    for out in outs:
        path = project / out
        files |= {path} if path.is_file() else set(path.rglob("*"))
    return sorted(f for f in files if f.is_file())


def _keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_a_dp_run_publishes_no_oracle_statistic(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = tmp_path / "p"
    shutil.copytree(tiny_run["project"], project)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["privacy"] = {"mechanism": "central", "noise_multiplier": 1.0, "delta": 1e-3}
    # Ditto: each client keeps a personal model, trained without clip or noise,
    # which must not be published either (issue 36, item 2)
    params["personalization"] = {"method": "ditto"}
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_main([FEDPIPE, "run", "--no-server-start"], project, cli_env)

    from fedpipe.federation.privacy.views import ORACLE_KEYS

    published = _published_files(project, cli_env)
    names = {str(f.relative_to(project)) for f in published}
    client_files = sorted(n for n in names if "/clients/client-" in n)
    assert not client_files, client_files
    assert public_leaks(project, load_params(project / "params.yaml")) == []
    rounds = TINY["federation"]["rounds"]
    kept = project / layout.private_client_state(rounds)
    assert list(kept.glob("client-*.npz"))  # the personal models: kept, privately
    assert (
        "personalized"
        in json.loads((project / layout.oracle_record(rounds)).read_text())["summary"]
    )
    assert {f"metrics/rounds/round-{k}.json" for k in range(1, rounds + 1)} <= names
    assert f"metrics/health/round-{rounds}.json" in names
    # "clients" and the like name other things outside the round records (the
    # partition manifest's assignment, the client-state index): there the
    # specific oracle keys are looked for, in the round records every one
    generic = {"clients", "layers", "aggregation", "excluded", "gap", "divergence"}
    leaks = {}
    for f in published:
        relative = str(f.relative_to(project))
        wanted = set(ORACLE_KEYS)
        if not relative.startswith(("metrics/", "reports/")):
            wanted -= generic
        if f.suffix == ".json":
            found = _keys(json.loads(f.read_text())) & wanted
        elif f.suffix == ".csv":
            header = f.read_text().splitlines()[:1]
            found = set(header[0].split(",") if header else []) & wanted
        else:
            continue
        if found:
            leaks[str(f.relative_to(project))] = sorted(found)
    assert not leaks
    # the oracle view is on disk for the doctor, git-ignored and no DVC output
    oracle = project / layout.oracle_record(rounds)
    assert "clients_selected" in json.loads(oracle.read_text())["summary"]
    run_cli(["git", "check-ignore", "-q", str(layout.oracle_record(rounds))], project,
            cli_env)  # fmt: skip
    assert not any(str(f).startswith(str(project / ".fedpipe")) for f in published)
    doctor = run_main(["doctor", "--fail-on", "never"], project, cli_env)
    assert doctor.stdout.startswith("View: oracle"), doctor.stdout[:500]
    assert "Not read" not in doctor.stdout
    # every record the views read is of the run dvc.lock records, the oracle
    # records tied to them (issue 36, defect 5)
    from fedpipe.observe.runfiles import stale_views

    assert stale_views(project) == []
    # the private state is no stage's output: DVC calls the run up to date
    status = run_cli([str(BIN / "dvc"), "status"], project, cli_env).stdout
    assert "up to date" in status, status
    # a clone without .fedpipe/ cannot continue the clients' models: one more
    # round is refused in one line naming the folder and the way out
    shutil.rmtree(project / layout.PRIVATE_CLIENT_STATE_DIR)
    more = [FEDPIPE, "run", "--no-server-start", "--no-report"]
    more += ["-S", f"federation.rounds={rounds + 1}"]
    proc = run_cli(more, project, cli_env, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert f".fedpipe/clients/round-{rounds}/" in errors[0], errors
    assert "fedpipe run --force" in errors[0] and "Traceback" not in proc.stderr


def test_privacy_table_script_at_one_epsilon(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    out = tmp_path / "table"
    run_cli(
        [
            sys.executable,
            str(SCRIPTS / "privacy_table.py"),
            "--epsilons",
            "4",
            "--rounds",
            "2",
            "--federations",
            "10:10",
            "--n-samples",
            "600",
            "--out",
            str(out),
        ],
        tmp_path,
        cli_env,
    )
    (row,) = json.loads((out / "privacy_table.json").read_text())
    assert row["target_epsilon"] == 4.0
    assert 3.9 < row["epsilon"] <= 4.0 + 1e-3
    assert 0.0 <= row["accuracy"] <= 1.0
    assert "| 10 | 10 | 4 |" in (out / "privacy_table.md").read_text()
