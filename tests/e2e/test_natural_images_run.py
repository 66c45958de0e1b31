"""Natural clients of an image folder through `fedpipe run`: one client per writer
folder (``data/images/<writer>/<class>/x.png``, ``data.class_level: 1``,
``partition.natural_level: 0``), then by a mapping file, which `fedpipe run`
makes a dependency of the partition stage, so that editing it is a change DVC
sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bad_input_corpus import KINDS  # scripts/: e2e_helpers puts it on the path
from e2e_helpers import BIN, make_project, merge, run_cli, run_main, write_image_folder

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
WRITERS = ("w0", "w1", "w2")
BY_WRITER = merge(
    KINDS["images"],
    {
        "data": {"class_level": 1},
        "partition": {"method": "natural", "natural_level": 0},
        "federation": {"clients": len(WRITERS)},
    },
)


def _run(project: Path, env: dict[str, str]) -> None:
    run_main([FEDPIPE, "run", "--no-server-start", "--no-report"], project, env)


def _manifest(project: Path) -> dict:
    return json.loads((project / "data/partition/manifest.json").read_text())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> Path:
    path = tmp_path_factory.mktemp("natural-images") / "project"
    for k, writer in enumerate(WRITERS):
        write_image_folder(path / "data/images" / writer, per_class=30, seed=k)
    project = make_project(path, cli_env, **BY_WRITER)
    _run(project, cli_env)
    return project


def test_one_client_per_writer_folder(project: Path) -> None:
    manifest = _manifest(project)
    assert manifest["method"] == "natural"
    assert manifest["client_keys"] == list(WRITERS)
    assert manifest["params"]["natural_level"] == 0
    for client in manifest["clients"]:
        writers = {s.split("/")[0] for s in client["train"] + client["test"]}
        assert writers == {WRITERS[client["client"]]}
    schema = json.loads((project / "data/prepared/schema.json").read_text())
    assert schema["class_names"] == ["with_mask", "without_mask"]
    assert (project / "metrics/rounds/round-2.json").is_file()


def test_a_mapping_file_is_a_dependency_dvc_sees(
    project: Path, cli_env: dict[str, str]
) -> None:
    samples = [
        p.relative_to(project / "data/images").as_posix()
        for p in sorted((project / "data/images").rglob("img_*"))
    ]
    # two clients across the writers: even-numbered images and odd ones
    rows = [f"{s},{'even' if int(s[-7:-4]) % 2 == 0 else 'odd'}" for s in samples]
    mapping = project / "data/writers.csv"
    mapping.write_text("path,client\n" + "\n".join(rows) + "\n")
    set_params(
        project / "params.yaml",
        {
            "partition.natural_level": None,
            "partition.natural_mapping": "data/writers.csv",
            "federation.clients": 2,
        },
    )
    _run(project, cli_env)
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    assert "data/writers.csv" in stages["partition"]["deps"]
    manifest = _manifest(project)
    assert manifest["client_keys"] == ["even", "odd"]
    assert len(manifest["params"]["natural_mapping_sha256"]) == 64
    assert "up to date" in run_cli([DVC, "status"], project, cli_env).stdout
    # an edit of the mapping alone: the partition stage is out of date
    mapping.write_text(mapping.read_text().replace(",even\n", ",odd\n", 1))
    status = run_cli([DVC, "status", "partition"], project, cli_env).stdout
    assert "modified:" in status and "data/writers.csv" in status, status
