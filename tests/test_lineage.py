"""Lineage audit on a small synthetic project (the real one: tests/e2e).

The synthetic project has the pipeline's shape (raw file -> prepared directory ->
validate -> partition -> init -> round@1 -> round@2 -> summary) with a dvc.lock
whose hashes are computed here independently, the way DVC 3 computes them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from fedpipe.observe.lineage import (
    LineageError,
    audit,
    expected_commands,
    format_json,
    format_mermaid,
    format_text,
)
from fedpipe_app import cli
from fedpipe_app.project import REMOTE_ROOT, default_remote_url, init_project

PARAMS = {
    "seed": 7,
    "data": {"source": "mnist5k", "path": "data/raw/mnist5k.parquet"},
    "federation": {"clients": 3, "rounds": 2},
    "train": {"lr": 0.05, "epochs": 1},
    "round_chain": {"1": 0, "2": 1},
}

PIPELINE = {
    "stages": {
        "mnist5k": {"cmd": "fedpipe stage mnist5k"},
        "ingest": {"cmd": "fedpipe stage ingest"},
        "validate": {"cmd": "fedpipe stage validate"},
        "partition": {"cmd": "fedpipe stage partition"},
        "init": {"cmd": "fedpipe stage init"},
        "round": {
            "foreach": "${round_chain}",
            "do": {"cmd": "fedpipe stage round ${key}"},
        },
        "summary": {"cmd": "fedpipe stage summary"},
    }
}

# ---------------------------------------------------------------- helpers


class _NoAliases(yaml.SafeDumper):
    """Write each entry out in full, as DVC does (no YAML anchors)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _dump(obj: object) -> str:
    return yaml.dump(obj, Dumper=_NoAliases, sort_keys=False)


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _write(root: Path, rel: str, data: bytes) -> dict:
    """A file output, and its copy in DVC's cache as a run leaves it."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    md5 = _md5(data)
    cached = root / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return {"path": rel, "hash": "md5", "md5": md5, "size": len(data)}


def _write_dir(root: Path, rel: str, files: dict[str, bytes]) -> dict:
    """A directory output; its listing goes into the cache as DVC 3 keeps it."""
    listing = []
    for name, data in sorted(files.items()):
        _write(root, f"{rel}/{name}", data)
        listing.append({"md5": _md5(data), "relpath": name})
    blob = json.dumps(listing, sort_keys=True).encode()
    md5 = _md5(blob) + ".dir"
    cached = root / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(blob)
    return {"path": rel, "hash": "md5", "md5": md5, "nfiles": len(files)}


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=2).encode()


def make_synthetic(root: Path) -> Path:
    """Files and a dvc.lock recording them, as a two-round run would leave them."""
    lock: dict[str, dict] = {}
    raw = _write(root, "data/raw/mnist5k.parquet", b"raw digits")
    lock["mnist5k"] = {"cmd": "fedpipe stage mnist5k", "outs": [raw]}
    prepared = _write_dir(
        root,
        "data/prepared",
        {"features.npy": b"features", "schema.json": b"{}", "samples.parquet": b"ids"},
    )
    lock["ingest"] = {
        "cmd": "fedpipe stage ingest",
        "deps": [raw],
        "params": {"params.yaml": {"data": PARAMS["data"]}},
        "outs": [prepared],
    }
    summary = {"success": True, "n_rows": 50, "n_expectations": 12}
    summary |= {"warnings": ["class imbalance 12.0 > 10"], "failures": []}
    validation = _write_dir(
        root, "reports/validation", {"summary.json": _json(summary)}
    )
    lock["validate"] = {
        "cmd": "fedpipe stage validate",
        "deps": [prepared],
        "outs": [validation],
    }
    manifest = {
        "method": "iid",
        "n_clients": 3,
        "clients": [
            {"client": c, "train": list(range(10 + c)), "test": [1, 2]}
            for c in range(3)
        ],
        "heldout": list(range(8)),
        "dropped_duplicates": [],
        "params": {"seed": 7},
    }
    manifest_out = _write(root, "data/partition/manifest.json", _json(manifest))
    summary_dep = {**validation, "path": "reports/validation/summary.json"}
    summary_dep["md5"] = _md5(_json(summary))
    summary_dep.pop("nfiles")
    lock["partition"] = {
        "cmd": "fedpipe stage partition",
        "deps": [prepared, summary_dep],
        "params": {"params.yaml": {"seed": 7, "federation.clients": 3}},
        "outs": [manifest_out],
    }
    schema_dep = {"path": "data/prepared/schema.json", "hash": "md5"}
    schema_dep["md5"] = _md5(b"{}")
    model = _write(root, "models/round-0/weights.npz", b"w0")
    lock["init"] = {
        "cmd": "fedpipe stage init",
        "deps": [schema_dep],
        "params": {"params.yaml": {"seed": 7}},
        "outs": [model],
    }
    for k in (1, 2):
        metrics = {"round": k, "clients_selected": [0, k], "global": {"accuracy": 0.5}}
        metrics_out = _write(root, f"metrics/rounds/round-{k}.json", _json(metrics))
        new = _write(root, f"models/round-{k}/weights.npz", f"w{k}".encode())
        lock[f"round@{k}"] = {
            "cmd": f"fedpipe stage round {k}",
            "deps": [manifest_out, prepared, model],
            "params": {"params.yaml": {"seed": 7, "train": PARAMS["train"]}},
            "outs": [metrics_out, new],
        }
        model = new
    lock["summary"] = {
        "cmd": "fedpipe stage summary",
        "deps": [metrics_out],
        "outs": [_write(root, "metrics/summary.json", b"{}")],
    }
    (root / "dvc.lock").write_text(_dump({"schema": "2.0", "stages": lock}))
    (root / "dvc.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    (root / "params.yaml").write_text(yaml.safe_dump(PARAMS, sort_keys=False))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_synthetic(tmp_path / "proj")


def _edit_lock(root: Path, edit) -> None:  # type: ignore[no-untyped-def]
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    edit(lock["stages"])
    (root / "dvc.lock").write_text(_dump(lock))


def _kinds(lineage) -> set[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    return {(f.kind, f.stage, f.subject) for f in lineage.flags}


# ---------------------------------------------------------------- hashing


def test_fixture_dir_hash_is_dvcs(tmp_path: Path) -> None:
    # the synthetic dvc.lock's directory hashes are DVC's (dvc_data as reference)
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta
    from dvc_data.hashfile.tree import Tree

    files = {"sub/b.txt": b"b", "a-b.txt": b"a", "a/c.txt": b"c"}
    recorded = _write_dir(tmp_path, "d", files)
    tree = Tree()
    for relpath, data in files.items():
        tree.add(tuple(relpath.split("/")), Meta(), HashInfo("md5", _md5(data)))
    tree.digest()
    assert recorded["md5"] == tree.hash_info.value


# ---------------------------------------------------------------- chain


def test_clean_project_verifies_from_model_to_raw_data(project: Path) -> None:
    lineage = audit(project, ["round", "2"])
    assert lineage.verified, format_text(lineage)
    assert [s.name for s in lineage.stages] == [
        "mnist5k",
        "ingest",
        "validate",
        "partition",
        "init",
        "round@1",
        "round@2",
    ]
    assert lineage.target_path == "models/round-2/weights.npz"
    assert lineage.target_md5 == _md5(b"w2")
    [raw] = lineage.raw
    assert (raw.path, raw.md5, raw.role) == (
        "data/raw/mnist5k.parquet",
        _md5(b"raw digits"),
        "output",
    )


def test_stage_details(project: Path) -> None:
    stages = {s.name: s for s in audit(project, ["2"]).stages}
    assert stages["validate"].info["validation"]["success"] is True
    assert stages["validate"].info["validation"]["warnings"] == [
        "class imbalance 12.0 > 10"
    ]
    manifest = stages["partition"].info["manifest"]
    assert manifest["method"] == "iid"
    assert manifest["train_sizes"] == [10, 11, 12]
    assert manifest["md5"] == _md5(
        (project / "data/partition/manifest.json").read_bytes()
    )
    assert stages["round@1"].info["clients_selected"] == [0, 1]
    assert stages["round@2"].upstream == ("partition", "ingest", "round@1")
    # a file inside a directory output is traced to the stage writing the directory
    assert stages["init"].deps[0].upstream == "ingest"
    assert stages["round@2"].params["params.yaml"]["train"]["lr"] == 0.05


@pytest.mark.parametrize(
    ("target", "stage", "path"),
    [
        (["round", "1"], "round@1", "models/round-1/weights.npz"),
        (["1"], "round@1", "models/round-1/weights.npz"),
        (["0"], "init", "models/round-0/weights.npz"),
        (["round@2"], "round@2", None),
        (["partition"], "partition", None),
        ([], "summary", None),
        (["metrics/rounds/round-2.json"], "round@2", "metrics/rounds/round-2.json"),
        (["./data/prepared/"], "ingest", "data/prepared"),
        (["data/prepared/features.npy"], "ingest", "data/prepared/features.npy"),
    ],
)
def test_targets(project: Path, target: list[str], stage: str, path: str) -> None:
    lineage = audit(project, target)
    assert (lineage.target_stage, lineage.target_path) == (stage, path)


def test_absolute_path_target(project: Path) -> None:
    lineage = audit(project, [str(project / "models/round-1/weights.npz")])
    assert lineage.target_stage == "round@1"


def test_partition_chain_leaves_out_later_stages(project: Path) -> None:
    names = [s.name for s in audit(project, ["partition"]).stages]
    assert names == ["mnist5k", "ingest", "validate", "partition"]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (["round", "7"], "round 7 is not recorded in dvc.lock (rounds recorded: 1..2)"),
        (["7"], "round 7 is not recorded"),
        (["round", "x"], "not a round number"),
        (["round"], "give the round number"),
        (["params.yaml"], "params.yaml: no stage in dvc.lock produces this path"),
        (["models/round-9/weights.npz"], "no stage in dvc.lock produces"),
        (["1", "2"], "give one target"),
    ],
)
def test_bad_targets_name_what_is_accepted(
    project: Path, target: list[str], says: str
) -> None:
    with pytest.raises(LineageError) as err:
        audit(project, target)
    assert says in str(err.value)
    assert "models/round-K/weights.npz" in str(err.value)
    assert "0..2" in str(err.value)


def test_no_lock_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LineageError, match="dvc.lock: not found"):
        audit(tmp_path, [])


# ---------------------------------------------------------------- flags


def test_changed_model_flagged(project: Path) -> None:
    (project / "models/round-1/weights.npz").write_bytes(b"w1 tampered")
    lineage = audit(project, ["2"])
    assert not lineage.verified
    assert _kinds(lineage) == {("changed", "round@1", "models/round-1/weights.npz")}
    [flag] = lineage.flags
    assert _md5(b"w1 tampered") in flag.message and _md5(b"w1") in flag.message


def test_changed_file_inside_directory_is_named(project: Path) -> None:
    (project / "data/prepared/features.npy").write_bytes(b"other features")
    (project / "data/prepared/extra.txt").write_bytes(b"new")
    lineage = audit(project, ["1"])
    assert _kinds(lineage) == {("changed", "ingest", "data/prepared")}
    message = lineage.flags[0].message
    assert "changed: features.npy" in message and "added: extra.txt" in message


def test_missing_output_flagged(project: Path) -> None:
    (project / "metrics/rounds/round-1.json").unlink()
    lineage = audit(project, ["2"])
    assert _kinds(lineage) == {("missing", "round@1", "metrics/rounds/round-1.json")}
    assert lineage.stages[-2].info["clients_selected"] is None


def test_stale_input_flagged(project: Path) -> None:
    # round@1 was rerun (new model recorded) but round@2 was not
    def rerun_round_1(stages: dict) -> None:
        stages["round@1"]["outs"][1]["md5"] = _md5(b"w1 new")

    _edit_lock(project, rerun_round_1)
    _write(project, "models/round-1/weights.npz", b"w1 new")  # and its cache copy
    lineage = audit(project, ["2"])
    assert _kinds(lineage) == {("stale", "round@2", "models/round-1/weights.npz")}
    assert "round@1 now records" in lineage.flags[0].message


def test_stale_params_flagged_per_stage(project: Path) -> None:
    params = dict(PARAMS, train={"lr": 0.1, "epochs": 1})
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    lineage = audit(project, ["2"])
    assert _kinds(lineage) == {
        ("stale", "round@1", "train"),
        ("stale", "round@2", "train"),
    }
    assert "train.lr is 0.1, dvc.lock records 0.05" in lineage.flags[0].message


def test_removed_param_flagged(project: Path) -> None:
    params = {k: v for k, v in PARAMS.items() if k != "seed"}
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    kinds = _kinds(audit(project, ["partition"]))
    assert kinds == {("stale", "partition", "seed")}


def test_changed_command_flagged(project: Path) -> None:
    pipeline = yaml.safe_load((project / "dvc.yaml").read_text())
    pipeline["stages"]["validate"]["cmd"] = "fedpipe stage validate --strict"
    (project / "dvc.yaml").write_text(yaml.safe_dump(pipeline))
    lineage = audit(project, ["partition"])
    assert _kinds(lineage) == {("stale", "validate", "cmd")}


def test_stage_gone_from_pipeline_flagged(project: Path) -> None:
    params = dict(PARAMS, round_chain={"1": 0})
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    assert ("stale", "round@2", "dvc.yaml") in _kinds(audit(project, ["2"]))
    assert audit(project, ["1"]).verified


def test_raw_input_no_stage_produces(project: Path) -> None:
    # own data: ingest reads a table tracked by `dvc add`, no mnist5k stage
    table = _write(project, "data/raw/table.csv", b"a,b\n1,2\n")

    def own_data(stages: dict) -> None:
        del stages["mnist5k"]
        stages["ingest"]["deps"] = [table]

    _edit_lock(project, own_data)
    dvc_file = {"outs": [{"md5": table["md5"], "path": "table.csv"}]}
    (project / "data/raw/table.csv.dvc").write_text(yaml.safe_dump(dvc_file))
    lineage = audit(project, ["1"])
    assert lineage.verified, format_text(lineage)
    assert [(r.path, r.role) for r in lineage.raw] == [("data/raw/table.csv", "input")]
    (project / "data/raw/table.csv").write_bytes(b"a,b\n1,3\n")
    assert _kinds(audit(project, ["1"])) == {
        ("changed", "ingest", "data/raw/table.csv")
    }


def test_expected_commands_expand_foreach(project: Path) -> None:
    commands = expected_commands(project)
    assert commands["round@2"] == "fedpipe stage round 2"
    assert commands["summary"] == "fedpipe stage summary"
    assert "round" not in commands


def test_dvcignore_read_as_dvc_reads_it(project: Path) -> None:
    # gitignore semantics in full (here a negation), as `dvc status` applies them
    (project / ".dvcignore").write_text("*.log\n!kept.log\n")
    (project / "data/prepared/debug.log").write_bytes(b"ignored")
    assert audit(project, ["1"]).verified
    (project / "data/prepared/kept.log").write_bytes(b"not ignored")
    lineage = audit(project, ["1"])
    assert _kinds(lineage) == {("changed", "ingest", "data/prepared")}
    assert "added: kept.log" in lineage.flags[0].message


def test_command_templated_from_vars(project: Path) -> None:
    # dvc.yaml `vars` (not only params.yaml) feed ${...}, as DVC resolves them
    pipeline = yaml.safe_load((project / "dvc.yaml").read_text())
    pipeline["vars"] = [{"level": "strict"}]
    pipeline["stages"]["validate"]["cmd"] = "fedpipe stage validate --${level}"
    (project / "dvc.yaml").write_text(yaml.safe_dump(pipeline))
    lineage = audit(project, ["partition"])
    assert _kinds(lineage) == {("stale", "validate", "cmd")}
    assert "now runs `fedpipe stage validate --strict`" in lineage.flags[0].message


# ---------------------------------------------------------------- formats


def test_text_report(project: Path) -> None:
    text = format_text(audit(project, ["2"]))
    assert "raw data: data/raw/mnist5k.parquet  md5 " + _md5(b"raw digits") in text
    assert "validation: passed (12 expectations on 50 rows" in text
    assert "manifest: iid, 3 clients, train sizes [10, 11, 12]" in text
    assert "clients: 0, 2" in text
    assert "params: as the stage before" in text
    assert text.rstrip().splitlines()[-1].startswith("verified: 7 stage(s)")
    (project / "models/round-0/weights.npz").write_bytes(b"x")
    flagged = format_text(audit(project, ["2"]))
    assert "FLAGGED: 1 problem(s)" in flagged
    assert "init  [changed]" in flagged


def test_json_report(project: Path) -> None:
    (project / "models/round-1/weights.npz").write_bytes(b"x")
    data = json.loads(format_json(audit(project, ["2"])))
    assert data["verified"] is False
    assert data["target"]["stage"] == "round@2"
    assert data["raw_data"][0]["md5"] == _md5(b"raw digits")
    stages = {s["name"]: s for s in data["stages"]}
    assert stages["round@1"]["status"] == "changed"
    assert stages["round@2"]["info"]["clients_selected"] == [0, 2]
    assert data["flags"][0]["subject"] == "models/round-1/weights.npz"


def test_mermaid_styles_flagged_stages(project: Path) -> None:
    (project / "models/round-1/weights.npz").write_bytes(b"x")
    chart = format_mermaid(audit(project, ["2"]))
    lines = chart.splitlines()
    assert lines[0] == "flowchart TD"
    assert '  s_round_1["round@1<br/>changed"]' in lines
    assert "  class s_round_1 flagged" in lines
    assert any(line.startswith("  classDef flagged") for line in lines)
    assert '  s_round_1 -->|"weights.npz"| s_round_2' in lines
    assert "  s_round_2 --> target" in lines


# ---------------------------------------------------------------- git


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_git_state_reported_not_flagged(project: Path) -> None:
    assert audit(project, ["1"]).git.lock == "no git"
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "run")
    git = audit(project, ["1"]).git
    assert git.lock == "committed" and not git.dirty and len(git.commit or "") == 40
    _edit_lock(project, lambda stages: stages["summary"].update(cmd="other"))
    lineage = audit(project, ["1"])
    assert lineage.git.lock == "differs from HEAD"
    assert lineage.git.dirty == ("dvc.lock",)
    assert lineage.verified  # summary is not upstream of round 1; git never flags


# ---------------------------------------------------------------- CLI


def test_cli_exit_codes(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(project)
    assert cli.main(["lineage", "round", "2"]) == 0
    assert "verified:" in capsys.readouterr().out
    assert cli.main(["lineage", "round", "5"]) == 2
    assert "round 5 is not recorded" in capsys.readouterr().err
    assert cli.main(["lineage", "nowhere.txt"]) == 2
    (project / "models/round-2/weights.npz").write_bytes(b"x")
    assert cli.main(["lineage", "--format", "json", "2"]) == 1
    assert json.loads(capsys.readouterr().out)["verified"] is False


def test_cli_help_documents_targets_and_exit_codes() -> None:
    from fedpipe_app.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices["lineage"]  # type: ignore[union-attr]
    text = sub.format_help()
    for needle in ("round N | N", "exit status: 0", "1 something is flagged", "2 bad"):
        assert needle in text


# ---------------------------------------------------------------- remote


def test_default_remote_is_outside_any_clone() -> None:
    url = default_remote_url("my exp")
    assert url.startswith(REMOTE_ROOT + "/my-exp-")
    assert url.startswith("~/")  # DVC expands it; the same for every clone
    assert default_remote_url("my exp") != url  # two projects never share a folder


def test_init_sets_default_remote(tmp_path: Path) -> None:
    # (an explicit URL: tests/e2e/test_lineage_remote.py, through FEDPIPE_DVC_REMOTE)
    init_project(tmp_path / "p")
    config = (tmp_path / "p/.dvc/config").read_text()
    assert "remote = storage" in config
    assert f"url = {REMOTE_ROOT}/p-" in config


def test_repository_has_default_remote() -> None:
    config = (Path(__file__).parents[1] / ".dvc/config").read_text()
    assert "remote = storage" in config
    assert f"url = {REMOTE_ROOT}/fedpipe" in config


def _cached(project: Path, rel: str) -> Path:
    md5 = _md5((project / rel).read_bytes())
    return project / ".dvc/cache/files/md5" / md5[:2] / md5[2:]


def test_altered_cache_object_flagged(project: Path) -> None:
    # DVC would reuse it: it does not hash a read-only cache file again
    obj = _cached(project, "models/round-1/weights.npz")
    obj.write_bytes(b"w1 rotten")
    lineage = audit(project, ["2"])
    assert _kinds(lineage) == {("cache", "round@1", "models/round-1/weights.npz")}
    assert f"is altered (its md5 is {_md5(b'w1 rotten')})" in lineage.flags[0].message
    # the output's own line says so too, not "ok" (the workspace file is fine)
    (round1,) = [s for s in lineage.stages if s.name == "round@1"]
    (out,) = [c for c in round1.outs if c.path == "models/round-1/weights.npz"]
    assert out.status == "altered"
    line = next(
        x for x in format_text(lineage).splitlines() if "round-1/weights.npz" in x
    )
    assert line.endswith("ALTERED"), line


def test_cache_object_deleted_flagged(project: Path) -> None:
    _cached(project, "models/round-2/weights.npz").unlink()
    lineage = audit(project, ["2"])
    assert _kinds(lineage) == {("cache", "round@2", "models/round-2/weights.npz")}
    assert "missing from DVC's cache" in lineage.flags[0].message
    (round2,) = [s for s in lineage.stages if s.name == "round@2"]
    (out,) = [c for c in round2.outs if c.path == "models/round-2/weights.npz"]
    assert out.status == "uncached"


def test_gone_from_workspace_and_cache_is_one_flag(project: Path) -> None:
    _cached(project, "models/round-2/weights.npz").unlink()
    (project / "models/round-2/weights.npz").unlink()
    lineage = audit(project, ["2"])
    assert _kinds(lineage) == {("missing", "round@2", "models/round-2/weights.npz")}
