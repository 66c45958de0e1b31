"""Two views under DP (issue 25, item 2): the published round, health and client
records keep the server's view; the oracle diagnostics go to .fedpipe/oracle/,
which the doctor and the report read when present (and say so). Without DP the
records are the same bits as before."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedpipe.config import layout
from fedpipe.federation.privacy.views import ORACLE_KEYS, split_round
from fedpipe.observe.doctor import diagnose
from fedpipe.observe.report import write_report
from fedpipe.observe.runfiles import load_run

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

KEY = bytes(range(32))
DP = {"mechanism": "central", "noise_multiplier": 1.0}


def keys_in(value: Any) -> set[str]:
    """Every mapping key anywhere in a JSON value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_in(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_in(v)}
    return set()


def published_keys(root: Path) -> set[str]:
    """The keys of every published record (round, health) and the client tables'
    columns."""
    found: set[str] = set()
    for folder in (layout.ROUND_METRICS_DIR, layout.HEALTH_METRICS_DIR):
        for path in (root / folder).glob("*.json"):
            found |= keys_in(json.loads(path.read_text()))
    for path in (root / layout.CLIENT_METRICS_DIR).glob("*.csv"):
        found |= set(pd.read_csv(path).columns)
    return found


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("dp")
    summaries = run_federation(
        root, n_samples=300, clients=5, rounds=2, fraction_fit=0.6, privacy=DP,
        dp_key=KEY,
    )  # fmt: skip
    return root, summaries


def test_dp_records_publish_the_server_view_only(dp_run) -> None:
    root, summaries = dp_run
    leaked = published_keys(root) & set(ORACLE_KEYS)
    assert not leaked
    record = json.loads((root / layout.round_metrics(2)).read_text())
    assert record["privacy"]["view"] == "server"
    assert record["privacy"]["epsilon"] == summaries[-1]["privacy"]["epsilon"]
    assert record["privacy"]["accountant"] == "rdp-fixed"
    assert "global" in record  # the server's own held-out evaluation stays
    # ... and the in-memory summary did have them: the test can fail
    assert {"clients_selected", "local"} <= set(summaries[-1])
    assert "signal_norm" in summaries[-1]["privacy"]


def test_the_oracle_view_is_kept_out_of_git_and_dvc(dp_run) -> None:
    root, summaries = dp_run
    oracle = json.loads((root / layout.oracle_record(2)).read_text())
    assert oracle["view"] == "oracle"
    assert oracle["summary"]["clients_selected"] == summaries[-1]["clients_selected"]
    assert oracle["health"]["clients"]  # per-client norms, cosines, losses
    assert {"update_norm", "cosine_to_mean", "train_loss"} <= set(
        oracle["health"]["clients"][0]
    )
    assert len(oracle["clients"]) == 5
    # .fedpipe/ is ignored by git and DVC, and no stage declares it
    repo = Path(__file__).parents[1]
    assert ".fedpipe/" in (repo / ".gitignore").read_text().split()
    assert ".fedpipe/" in (repo / ".dvcignore").read_text().split()
    assert ".fedpipe" not in (repo / "dvc.yaml").read_text()


def test_doctor_and_report_read_the_oracle_and_say_so(dp_run, tmp_path) -> None:
    root, summaries = dp_run
    run = load_run(root)
    assert run.view == "oracle" and "oracle" in (run.view_text or "")
    assert run.rounds[2]["clients_selected"] == summaries[-1]["clients_selected"]
    assert run.health[1]["clients"]
    diagnose(run)
    page = write_report(root, tmp_path / "report.html", findings=None, run=run)
    assert "View: oracle" in page.read_text()
    # without the oracle records: the server view, said as such, and no crash
    server = tmp_path / "server"
    shutil.copytree(root, server)
    shutil.rmtree(server / layout.ORACLE_DIR)
    run = load_run(server)
    assert run.view == "server" and "View: server" in (run.view_text or "")
    assert "clients_selected" not in run.rounds[2]
    diagnose(run)
    page = write_report(server, tmp_path / "r2.html", findings=None, run=run)
    assert "View: server" in page.read_text()


def test_publish_oracle_keeps_everything_in_the_records(tmp_path: Path) -> None:
    summaries = run_federation(
        tmp_path, n_samples=300, clients=5, rounds=1, fraction_fit=0.6,
        privacy={**DP, "publish_oracle": True}, dp_key=KEY,
    )  # fmt: skip
    record = json.loads((tmp_path / layout.round_metrics(1)).read_text())
    assert record["clients_selected"] == summaries[0]["clients_selected"]
    assert record["privacy"]["view"] == "server+oracle"
    assert "signal_norm" in record["privacy"]
    assert not (tmp_path / layout.ORACLE_DIR).exists()
    assert load_run(tmp_path).view == "full"


def test_without_dp_nothing_is_split(tmp_path: Path) -> None:
    summaries = run_federation(
        tmp_path, n_samples=300, clients=5, rounds=1, fraction_fit=0.6
    )
    written = (tmp_path / layout.round_metrics(1)).read_text()
    assert written == json.dumps(summaries[0], indent=2, sort_keys=True) + "\n"
    assert "clients" in json.loads((tmp_path / layout.health_metrics(1)).read_text())
    assert not (tmp_path / layout.ORACLE_DIR).exists()
    run = load_run(tmp_path)
    assert run.view == "full" and run.view_text is None
    views = split_round(summaries[0], {"round": 1}, [], private=False)
    assert views.oracle is None and views.summary == summaries[0]


def _sampled_rows(clients: list[int]) -> list[dict[str, Any]]:
    """A round's per-client rows: the clients that were sampled (and scored)."""
    return [
        {"client": c, "selected": True, "local_accuracy": 0.5 + c / 100}
        for c in clients
    ]


def test_the_server_view_does_not_say_who_was_sampled() -> None:
    """Issue 36, item 1: the published table's rows were the sampled clients
    (only the columns were cut); two rounds that sampled different clients must
    publish the same table."""
    summary = {"round": 3, "privacy": {"epsilon": 1.0}}
    a = split_round(summary, {"round": 3}, _sampled_rows([1, 4]), private=True)
    b = split_round(summary, {"round": 3}, _sampled_rows([0, 2, 7]), private=True)
    assert a.clients == b.clients == []
    # the oracle keeps the rows
    assert a.oracle is not None and [r["client"] for r in a.oracle["clients"]] == [1, 4]


def test_the_published_client_table_has_no_rows_under_dp(tmp_path: Path) -> None:
    from fedpipe.federation.privacy.views import write_round_records

    table = pd.DataFrame(_sampled_rows([2, 5, 9]))
    published = write_round_records(
        tmp_path, 1, summary={"round": 1}, health={"round": 1}, table=table,
        private=True,
    )  # fmt: skip
    written = (tmp_path / layout.client_metrics(1)).read_text()
    assert written == "client\n"
    assert published is not None and published.empty
    oracle = json.loads((tmp_path / layout.oracle_record(1)).read_text())
    assert [r["client"] for r in oracle["clients"]] == [2, 5, 9]
    # without DP the table is written as it was
    write_round_records(
        tmp_path, 2, summary={"round": 2}, health={"round": 2}, table=table,
        private=False,
    )  # fmt: skip
    assert len(pd.read_csv(tmp_path / layout.client_metrics(2))) == 3


def test_dpsgd_per_client_books_are_the_oracles() -> None:
    """DP-SGD's epsilon_clients / steps_clients / stopped are keyed by client: a
    client's steps grow in each round it trains, so published they say who
    trained when."""
    books = {
        "epsilon": 2.0,
        "level": "record",
        "epsilon_clients": {"0": 2.0, "2": 1.5},
        "steps_clients": {"0": 8, "2": 4},
        "stopped": [0],
    }
    views = split_round(
        {"round": 2, "privacy": books}, {"round": 2, "stopped": "why"}, [],
        private=True,
    )  # fmt: skip
    assert views.summary["privacy"] == {
        "epsilon": 2.0, "level": "record", "view": "server"
    }  # fmt: skip
    assert views.health["stopped"] == "why"  # the health record's own key stays
    assert views.oracle is not None
    assert views.oracle["summary"]["privacy"]["steps_clients"] == {"0": 8, "2": 4}


# ------------------------------------------ another run's oracle (issue 36, 5)


@pytest.fixture(scope="module")
def plain_after_dp(dp_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run without DP in a project where a DP run (``dp_run``) wrote its
    oracle records before: the same rounds rewritten, with DP's oracle records
    left in place (as a fedpipe that never cleared them left them)."""
    dp_root, _ = dp_run
    root = tmp_path_factory.mktemp("plain")
    run_federation(root, n_samples=300, clients=5, rounds=2, fraction_fit=0.6)
    shutil.copytree(dp_root / layout.ORACLE_DIR, root / layout.ORACLE_DIR)
    return root


def _published(root: Path, k: int) -> dict:
    return json.loads((root / layout.round_metrics(k)).read_text())


def test_a_round_rewritten_without_dp_drops_its_oracle_record(
    dp_run, tmp_path: Path
) -> None:
    dp_root, _ = dp_run
    shutil.copytree(dp_root, tmp_path, dirs_exist_ok=True)
    assert (tmp_path / layout.oracle_record(1)).is_file()
    run_federation(tmp_path, n_samples=300, clients=5, rounds=1, fraction_fit=0.6)
    assert not (tmp_path / layout.oracle_record(1)).exists()
    assert (tmp_path / layout.oracle_record(2)).is_file()  # round 2 not rewritten


def test_another_runs_oracle_records_are_not_read(plain_after_dp, tmp_path) -> None:
    """The doctor, the report and the status read the published records of the
    run and say, once, that the oracle records of the DP run before were left
    unread (they said "View: oracle" and showed the DP run's accuracy)."""
    from fedpipe.observe.doctor import codes
    from fedpipe.observe.status import collect, format_text

    root = plain_after_dp
    run = load_run(root)
    assert run.view == "full"
    assert run.rounds == {1: _published(root, 1), 2: _published(root, 2)}
    assert [line.split(":")[0] for line in run.ignored] == [
        str(layout.oracle_record(1)),
        str(layout.oracle_record(2)),
    ]
    text = run.view_text or ""
    assert "View: oracle" not in text and text.count("Not read: 2 file(s)") == 1
    found = {f.code for f in diagnose(run)}
    assert codes.PRIVACY_NOISE_DOMINATES not in found
    page = write_report(root, tmp_path / "report.html", findings=None, run=run)
    html = page.read_text()
    assert "View: oracle" not in html and html.count("Not read: 2 file(s)") == 1
    status = collect(root)
    assert status.doctor is None or status.doctor.get("code") != (
        codes.PRIVACY_NOISE_DOMINATES
    )
    assert format_text(status).count("Not read: 2 file(s)") == 1


def test_an_oracle_record_is_read_only_beside_its_own_records(
    dp_run, tmp_path: Path
) -> None:
    from fedpipe.federation.privacy.views import BELONGS_TO

    dp_root, summaries = dp_run
    root = shutil.copytree(dp_root, tmp_path / "dp")
    tie = json.loads((root / layout.oracle_record(2)).read_text())[BELONGS_TO]
    assert set(tie) == {
        str(layout.health_metrics(2)),
        str(layout.round_metrics(2)),
        str(layout.client_metrics(2)),
    }
    # round 1's health record changed: its oracle record is not of it any more
    health = root / layout.health_metrics(1)
    health.write_text(health.read_text().replace('"round": 1', '"round":  1'))
    run = load_run(root)
    assert run.view == "oracle"  # round 2's is still read
    assert run.rounds[2]["clients_selected"] == summaries[1]["clients_selected"]
    assert "clients_selected" not in run.rounds[1]
    assert [line.split(":")[0] for line in run.ignored] == [
        str(layout.oracle_record(1))
    ]
    # an oracle record that names no records (an older fedpipe's): not read
    path = root / layout.oracle_record(2)
    record = json.loads(path.read_text())
    del record[BELONGS_TO]
    path.write_text(json.dumps(record))
    run = load_run(root)
    assert run.view == "server" and len(run.ignored) == 2


def test_stale_views_names_each_file_not_of_the_recorded_run(
    plain_after_dp, tmp_path: Path
) -> None:
    import hashlib

    import yaml

    from fedpipe.observe.runfiles import foreign_files as stale_views

    root = shutil.copytree(plain_after_dp, tmp_path / "p")
    oracle = [str(layout.oracle_record(k)) for k in (1, 2)]
    assert [m.split(":")[0] for m in stale_views(root)] == oracle  # no dvc.lock
    published = [
        layout.round_metrics(k) for k in (1, 2)
    ] + [layout.health_metrics(k) for k in (1, 2)] + [
        layout.client_metrics(k) for k in (1, 2)
    ] + [layout.MANIFEST]  # fmt: skip
    outs = [
        {"path": str(p), "md5": hashlib.md5((root / p).read_bytes()).hexdigest()}
        for p in published
    ]
    stages = {  # each round's records in its own round@K record, as DVC writes
        f"round@{k}": {"outs": [o for o in outs if f"round-{k}." in o["path"]]}
        for k in (1, 2)
    }
    stages["partition"] = {"outs": [outs[-1]]}
    lock = {"schema": "2.0", "stages": stages}
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert [m.split(":")[0] for m in stale_views(root)] == oracle
    shutil.rmtree(root / layout.ORACLE_DIR)
    assert stale_views(root) == []
    # a published record changed since dvc.lock recorded it, one never recorded
    # (a run stopped before recording it), a partition another run wrote
    (root / layout.health_metrics(2)).write_text("{}\n")
    (root / "params.yaml").write_text("federation:\n  rounds: 3\n")
    shutil.copy(root / layout.round_metrics(2), root / layout.round_metrics(3))
    manifest = root / layout.MANIFEST
    manifest.write_text(manifest.read_text() + "\n")
    stale = stale_views(root)
    assert [m.split(":")[0] for m in stale] == [
        str(layout.round_metrics(3)),
        str(layout.health_metrics(2)),
        str(layout.MANIFEST),
    ]
    assert "not recorded in dvc.lock" in stale[0]
    assert "not the file dvc.lock records" in stale[1]


def test_stale_views_names_rounds_beyond_federation_rounds(
    plain_after_dp, tmp_path: Path
) -> None:
    """A longer run before left rounds the params no longer plan (DVC removes
    neither their files nor their dvc.lock records)."""
    from fedpipe.observe.runfiles import foreign_files as stale_views

    root = shutil.copytree(plain_after_dp, tmp_path / "p")
    shutil.rmtree(root / layout.ORACLE_DIR)
    assert stale_views(root) == []  # params.yaml plans the 2 rounds written
    (root / "params.yaml").write_text("federation:\n  rounds: 1\n")
    assert [m.split(":")[0] for m in stale_views(root)] == [
        str(layout.round_metrics(2)),
        str(layout.health_metrics(2)),
        str(layout.client_metrics(2)),
    ]
    assert "beyond federation.rounds (1)" in stale_views(root)[0]


# ------------------------------ rounds not of the recorded run (issue 36, views)


def _lock_of(root: Path, rounds: int) -> dict:
    """A ``dvc.lock`` as ``fedpipe run`` records ``rounds`` rounds of the run
    under ``root``: each round@K built on round K-1's recorded weights."""
    import hashlib

    def md5(path: Path) -> str:
        return hashlib.md5((root / path).read_bytes()).hexdigest()

    weights = [f"models/round-{k}/weights.npz" for k in range(rounds + 1)]
    stages = {
        "partition": {
            "outs": [{"path": str(layout.MANIFEST), "md5": md5(layout.MANIFEST)}]
        },
        "init": {"outs": [{"path": weights[0], "md5": "init-weights"}]},
    }
    for k in range(1, rounds + 1):
        records = [
            layout.round_metrics(k),
            layout.health_metrics(k),
            layout.client_metrics(k),
        ]
        stages[f"round@{k}"] = {
            "deps": [{"path": weights[k - 1], "md5": stages_md5(stages, k - 1)}],
            "outs": [{"path": weights[k], "md5": f"weights-{k}"}]
            + [{"path": str(p), "md5": md5(p)} for p in records],
        }
    return {"schema": "2.0", "stages": stages}


def stages_md5(stages: dict, k: int) -> str:
    entry = stages["init" if k == 0 else f"round@{k}"]
    return entry["outs"][0]["md5"]


@pytest.fixture()
def recorded_plain(plain_after_dp, tmp_path: Path) -> Path:
    import yaml

    root = shutil.copytree(plain_after_dp, tmp_path / "p")
    shutil.rmtree(root / layout.ORACLE_DIR)
    (root / "params.yaml").write_text("federation:\n  rounds: 2\n")
    (root / "dvc.lock").write_text(yaml.safe_dump(_lock_of(root, 2)))
    return root


def _views_read(root: Path) -> dict[str, list[int]]:
    from fedpipe.observe.status import collect

    run = load_run(root)
    last = collect(root).last_round
    return {
        "rounds": sorted(run.rounds),
        "health": sorted(run.health),
        "clients": sorted(run.clients),
        "status": [last["round"]] if last else [],
    }


def test_views_read_only_the_rounds_dvc_lock_records(recorded_plain: Path) -> None:
    """A run stopped before recording its round 2 (the CI's Ctrl-C project:
    round 2's records written, dvc.lock not yet), a round left by an earlier,
    longer run, and a round record built on another round 1 than the recorded
    one (a privacy budget stop over an earlier run's rounds): the views read
    none of them, say so once, and the audit's views promise holds."""
    import yaml

    from fedpipe.observe.audit import audit
    from fedpipe.observe.runfiles import foreign_files, stale_views
    from fedpipe.observe.status import collect, format_text

    root = recorded_plain
    assert _views_read(root) == {k: [1, 2] for k in ("rounds", "health", "clients")} | {
        "status": [2]
    }
    assert foreign_files(root) == [] and stale_views(root) == []

    # 1. round 2 written but not recorded (the lock of round 1 only)
    (root / "dvc.lock").write_text(yaml.safe_dump(_lock_of(root, 1)))
    assert _views_read(root) == {k: [1] for k in ("rounds", "health", "clients")} | {
        "status": [1]
    }
    unread = [line.split(":")[0] for line in load_run(root).ignored]
    assert unread == [
        str(layout.round_metrics(2)),
        str(layout.health_metrics(2)),
        str(layout.client_metrics(2)),
    ]
    assert format_text(collect(root)).count("Not read: 3 file(s)") == 1
    assert stale_views(root) == [] and len(foreign_files(root)) == 3
    assert all(r.ok for r in audit(root, ("views",)))

    # 2. round 2's record built on another round 1 than the one recorded
    lock = _lock_of(root, 2)
    lock["stages"]["round@2"]["deps"][0]["md5"] = "an earlier run's round 1"
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert _views_read(root)["rounds"] == [1]
    assert "built on another round 1" in load_run(root).ignored[0]
    # ... and round 1's built on another init: no round is of the run
    lock["stages"]["round@1"]["deps"][0]["md5"] = "an earlier init"
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert _views_read(root) == {k: [] for k in ("rounds", "health", "clients")} | {
        "status": []
    }

    # 3. an earlier, longer run's round 2 (recorded, but beyond the 1 planned)
    (root / "dvc.lock").write_text(yaml.safe_dump(_lock_of(root, 2)))
    (root / "params.yaml").write_text("federation:\n  rounds: 1\n")
    assert _views_read(root)["rounds"] == [1]
    assert "beyond federation.rounds (1)" in load_run(root).ignored[0]
    assert stale_views(root) == []


def test_the_views_promise_is_broken_when_a_reader_takes_a_foreign_file(
    recorded_plain: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's check is of what the views read: a reader that took every
    round file on disk again (today's bug) breaks it."""
    import yaml

    from fedpipe.observe import runfiles

    root = recorded_plain
    (root / "dvc.lock").write_text(yaml.safe_dump(_lock_of(root, 1)))
    monkeypatch.setattr(
        runfiles,
        "round_files",
        lambda r, folder, suffix, foreign=None: runfiles.numbered_files(
            Path(r) / folder, suffix
        ),
    )
    stale = runfiles.stale_views(root)
    assert [line.split(":")[0] for line in stale] == [
        str(layout.round_metrics(2)),
        str(layout.health_metrics(2)),
        str(layout.client_metrics(2)),
    ]
    assert "not recorded in dvc.lock" in stale[0]
