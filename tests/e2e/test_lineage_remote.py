"""Lineage audit and remote storage on a real tiny run.

One `fedpipe run` (tiny MLP, 3 clients, 4 rounds: the session's tiny run) in a
project whose default DVC remote is a temporary folder (never the user's default),
committed and pushed; then a fresh `git clone` elsewhere pulls the data back. The
audit is checked on the real dvc.lock: round 4's model traced to the raw data hash,
tampered files and edited params flagged (with DVC's own `dvc status` agreeing),
and the clone verifying clean.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pushed(
    tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """A run project pushed to a temporary remote, and a fresh clone pulled from it.

    The project is a copy of the session's tiny run, whose `fedpipe init` took its
    remote from ``FEDPIPE_DVC_REMOTE``: a folder of the session (conftest.py),
    outside both the project and its clone."""
    base = tmp_path_factory.mktemp("lineage")
    env = cli_env
    remote = Path(env["FEDPIPE_DVC_REMOTE"])
    project = base / "project"
    shutil.copytree(tiny_run["project"], project)
    run_cli(["git", "add", "-A"], project, env)
    run_cli(["git", "commit", "-qm", "tiny run"], project, env)
    push = run_cli([DVC, "push"], project, env)
    clone = base / "clone"
    run_cli(["git", "clone", "-q", str(project), str(clone)], base, env)
    pull = run_cli([DVC, "pull"], clone, env)
    return {
        "base": base,
        "remote": remote,
        "project": project,
        "clone": clone,
        "env": env,
        "push": push,
        "pull": pull,
    }


def _lineage(  # type: ignore[no-untyped-def]
    project: Path, env: dict[str, str], *target: str, fmt: str = "json",
    process: bool = False,
):  # fmt: skip
    """`fedpipe lineage`, in this process unless ``process`` (its own process:
    the first test)."""
    args = ["lineage", *target, "--format", fmt]
    if process:
        return run_cli([FEDPIPE, *args], project, env, check=False)
    return run_main(args, project, env, check=False)


def _tree_md5s(folder: Path) -> dict[str, str]:
    """md5 of every file under ``folder`` (what git and DVC track there)."""
    return {
        str(p.relative_to(folder)): _md5(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _copy(pushed: dict, name: str) -> Path:
    target = pushed["base"] / name
    shutil.copytree(pushed["project"], target)
    return target


def _flip_byte(path: Path, offset: int = 200) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- lineage


def test_round_model_traced_to_raw_data(pushed: dict) -> None:
    project, env = pushed["project"], pushed["env"]
    out = _lineage(project, env, "round", "4", process=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    data = json.loads(out.stdout)
    assert data["verified"] is True
    assert [s["name"] for s in data["stages"]] == [
        "mnist5k",
        "ingest",
        "validate",
        "partition",
        "preprocess",
        "init",
        "round@1",
        "round@2",
        "round@3",
        "round@4",
    ]
    assert data["target"]["path"] == "models/round-4/weights.npz"
    assert data["target"]["md5"] == _md5(project / "models/round-4/weights.npz")
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    raw_md5 = _md5(project / "data/raw/mnist5k.parquet")
    assert lock["mnist5k"]["outs"][0]["md5"] == raw_md5
    assert data["raw_data"] == [
        {
            "stage": "mnist5k",
            "path": "data/raw/mnist5k.parquet",
            "md5": raw_md5,
            "role": "output",
        }
    ]
    stages = {s["name"]: s for s in data["stages"]}
    # each round's input model is the model the previous round wrote
    for k in range(1, 5):
        dep = {d["path"]: d for d in stages[f"round@{k}"]["deps"]}
        model = dep[f"models/round-{k - 1}/weights.npz"]
        assert model["upstream"] == ("init" if k == 1 else f"round@{k - 1}")
        metrics = json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        info = stages[f"round@{k}"]["info"]
        assert info["clients_selected"] == metrics["clients_selected"]
        assert len(info["clients_selected"]) == 2
        assert stages[f"round@{k}"]["params"]["params.yaml"]["seed"] == 7
    assert stages["validate"]["info"]["validation"]["success"] is True
    manifest = stages["partition"]["info"]["manifest"]
    assert manifest["method"] == "iid" and manifest["clients"] == 3
    assert manifest["md5"] == _md5(project / "data/partition/manifest.json")
    prepared = stages["ingest"]["outs"][0]
    assert prepared["path"] == "data/prepared"
    assert prepared["md5"].endswith(".dir") and prepared["status"] == "ok"
    head = run_cli(["git", "rev-parse", "HEAD"], project, env).stdout.strip()
    assert data["git"]["commit"] == head
    assert data["git"]["dvc_lock"] == "committed"


def test_text_and_mermaid_on_real_run(pushed: dict) -> None:
    project, env = pushed["project"], pushed["env"]
    text = _lineage(project, env, "models/round-4/weights.npz", fmt="text")
    assert text.returncode == 0
    assert "raw data: data/raw/mnist5k.parquet" in text.stdout
    assert "validation: passed" in text.stdout
    assert "verified: 10 stage(s)" in text.stdout
    chart = _lineage(project, env, fmt="mermaid")  # the whole pipeline
    assert chart.returncode == 0
    assert chart.stdout.startswith("flowchart TD")
    lines = chart.stdout.splitlines()
    assert '  s_summary["summary<br/>ok"]' in lines
    assert not [line for line in lines if line.endswith(" flagged")]


def test_tampered_model_flagged(pushed: dict) -> None:
    project = _copy(pushed, "tampered-model")
    env = pushed["env"]
    _flip_byte(project / "models/round-1/weights.npz")
    out = _lineage(project, env, "4")
    assert out.returncode == 1, out.stdout + out.stderr
    flags = json.loads(out.stdout)["flags"]
    assert [(f["kind"], f["stage"], f["subject"]) for f in flags] == [
        ("changed", "round@1", "models/round-1/weights.npz")
    ]
    status = run_cli([DVC, "status", "round@1"], project, env).stdout
    assert "models/round-1/weights.npz" in status  # DVC agrees
    text = _lineage(project, env, "round", "4", fmt="text")
    assert text.returncode == 1 and "FLAGGED: 1 problem(s)" in text.stdout
    chart = _lineage(project, env, "4", fmt="mermaid")
    assert chart.returncode == 1 and "class s_round_1 flagged" in chart.stdout


def test_tampered_prepared_data_flagged(pushed: dict) -> None:
    project = _copy(pushed, "tampered-data")
    env = pushed["env"]
    _flip_byte(project / "data/prepared/features.npy")
    out = _lineage(project, env, "round", "2")
    assert out.returncode == 1
    [flag] = json.loads(out.stdout)["flags"]
    assert (flag["kind"], flag["stage"], flag["subject"]) == (
        "changed",
        "ingest",
        "data/prepared",
    )
    assert "changed: features.npy" in flag["message"]


def test_edited_params_flagged_stale(pushed: dict) -> None:
    project = _copy(pushed, "stale-params")
    env = pushed["env"]
    params = project / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["train"]["lr"] = 0.1
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = _lineage(project, env, "round", "4")
    assert out.returncode == 1
    flags = json.loads(out.stdout)["flags"]
    assert {(f["kind"], f["stage"]) for f in flags} == {
        ("stale", f"round@{k}") for k in range(1, 5)
    }
    assert "train.lr is 0.1, dvc.lock records 0.05" in flags[0]["message"]
    assert json.loads(out.stdout)["git"]["params_yaml"] == "differs from HEAD"
    status = run_cli([DVC, "status", "round@1"], project, env).stdout
    assert "modified:" in status and "train" in status  # DVC agrees


def test_bad_targets_exit_2(pushed: dict) -> None:
    project, env = pushed["project"], pushed["env"]
    out = _lineage(project, env, "round", "9")
    assert out.returncode == 2
    assert "round 9 is not recorded in dvc.lock (rounds recorded: 1..4)" in out.stderr
    out = _lineage(project, env, "params.yaml")
    assert out.returncode == 2
    assert "no stage in dvc.lock produces this path" in out.stderr
    assert "models/round-K/weights.npz" in out.stderr


# ---------------------------------------------------------------- remote


def test_remote_is_the_temporary_folder(pushed: dict) -> None:
    config = (pushed["project"] / ".dvc/config").read_text()
    assert f"url = {pushed['remote']}" in config
    assert "remote = storage" in config
    assert "pushed" in pushed["push"].stdout
    assert any((pushed["remote"] / "files/md5").iterdir())


def test_fresh_clone_pulls_identical_data(pushed: dict) -> None:
    project, clone, env = pushed["project"], pushed["clone"], pushed["env"]
    listed = run_cli([DVC, "remote", "list"], clone, env).stdout
    assert str(pushed["remote"]) in listed  # the clone reaches the same remote
    for folder in ("models", "data", "metrics", "reports"):
        original = _tree_md5s(project / folder)
        original.pop("report.html", None)  # rebuilt by every run, not versioned
        assert original, folder
        assert _tree_md5s(clone / folder) == original, folder
    assert len(file_hashes(clone, "models/round-*/weights.npz")) == 5
    status = run_cli([DVC, "status"], clone, env)
    assert "Data and pipelines are up to date" in status.stdout
    out = _lineage(clone, env, fmt="text")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified: 11 stage(s)" in out.stdout
