"""User code named in params.yaml: references, errors, DVC deps, shipping to workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedpipe.client.base import ClientAlgorithm
from fedpipe.config.params import ParamsError, code_files_of, parse_params
from fedpipe.core.plugins import (
    check_code_deps,
    listed_code_deps,
    load_object,
    load_subclass,
    sync_code_deps,
)
from fedpipe_app.project import template_text

CLIENT = """
from fedpipe.client.base import ClientAlgorithm, ClientReply


class Mine(ClientAlgorithm):
    name = "mine"
    settings = ("scale",)

    def __init__(self, *, scale=1.0):
        self.scale = scale

    def train(self, task, trainer):
        return ClientReply(task.global_weights)


class Half(ClientAlgorithm):
    name = "half"


def helper():
    return 1
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code/client.py").write_text(CLIENT)
    (tmp_path / "code/model.py").write_text("def build(shape, n):\n    return n\n")
    (tmp_path / "dvc.yaml").write_text(template_text("dvc.yaml"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _params(**sections: dict) -> object:
    return parse_params(
        {"federation": {"rounds": 1}, "round_chain": {1: 0}, **sections}
    )


def test_a_reference_loads_the_object_from_the_project_file(project: Path) -> None:
    cls = load_subclass("code/client.py:Mine", ClientAlgorithm, key="client.algorithm")
    assert cls.__name__ == "Mine" and cls.from_settings(scale=2.0).scale == 2.0
    assert load_object("code/client.py:helper", key="k")() == 1
    # a module path works as well as a file
    assert load_object("fedpipe.client.sgd:LocalSGD", key="k").name == "sgd"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("code/nothere.py:Mine", "file code/nothere.py not found"),
        ("code/client.py:Yours", "has no 'Yours'; it defines ClientAlgorithm"),
        ("code/client.py:helper", "is a function; allowed: a subclass of"),
        ("code/client.py:Half", "class Half does not implement train"),
        ("no_such_module:X", "cannot import module 'no_such_module'"),
    ],
)
def test_references_that_do_not_fit_name_the_key_and_what_was_found(
    project: Path, ref: str, message: str
) -> None:
    with pytest.raises(ParamsError) as err:
        load_subclass(ref, ClientAlgorithm, key="client.algorithm")
    assert f"client.algorithm={ref!r}" in str(err.value)
    assert message in str(err.value)


def test_a_file_that_fails_to_import_says_why(project: Path) -> None:
    (project / "code/broken.py").write_text("import nowhere_to_be_found\n")
    with pytest.raises(ParamsError, match="importing broken.py failed: Module"):
        load_object("code/broken.py:X", key="model.name")


def test_each_file_feeds_exactly_the_stages_that_use_it(project: Path) -> None:
    params = _params(
        model={"name": "code/model.py:build"},
        client={"algorithm": "code/client.py:Mine"},
    )
    assert code_files_of(params) == {
        "init": ["code/model.py"],
        "round": ["code/client.py", "code/model.py"],
        "partition": [],
    }
    assert code_files_of(_params()) == {"init": [], "round": [], "partition": []}


def test_sync_writes_the_deps_keeps_comments_and_removes_stale_ones(
    project: Path,
) -> None:
    params = _params(client={"algorithm": "code/client.py:Mine"})
    with pytest.raises(ParamsError, match="run `fedpipe sync`"):
        check_code_deps(code_files_of(params))
    before = (project / "dvc.yaml").read_text()
    assert sync_code_deps(code_files_of(params)) is True
    after = (project / "dvc.yaml").read_text()
    assert listed_code_deps() == {
        "init": [],
        "round": ["code/client.py"],
        "partition": [],
    }
    assert "# Each federation round is a stage of its own" in after  # comments kept
    assert len(after.splitlines()) == len(before.splitlines()) + 1
    check_code_deps(code_files_of(params))  # in step now
    assert sync_code_deps(code_files_of(params)) is False  # idempotent
    # back to built-ins: the file is no longer a dependency, the file as it was
    assert sync_code_deps(code_files_of(_params())) is True
    assert (project / "dvc.yaml").read_text() == before


def test_user_classes_travel_to_workers_that_cannot_import_them(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Dask workers unpickle client jobs; the user's module exists only under a
    generated name here, so its code must travel by value."""
    import cloudpickle

    cls = load_subclass("code/client.py:Mine", ClientAlgorithm, key="k")
    blob = tmp_path_factory.mktemp("ship") / "job.pkl"
    blob.write_bytes(cloudpickle.dumps(cls(scale=3.0)))
    elsewhere = tmp_path_factory.mktemp("worker")
    code = (
        "import pickle, sys; "
        f"obj = pickle.loads(open({str(blob)!r}, 'rb').read()); "
        "print(type(obj).__name__, obj.scale, obj.name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["Mine", "3.0", "mine"]


INSTALL_ELSEWHERE = """\
import pickle, sys
from fedpipe.core.plugins import install, load_object
files, blob = pickle.loads(open(sys.argv[1], "rb").read())
for file in files:
    install(file)
obj = pickle.loads(blob)  # by reference: the generated module name
same = load_object("code/client.py:Mine", key="k") is type(obj)
again = install(files[0]) is sys.modules[files[0].module]  # once per module
print(type(obj).__name__, obj.scale, same, again)
"""


def test_a_process_without_the_file_makes_its_module_from_the_shipped_source(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """What a Dask worker on another machine does (orchestration.usercode): the
    run's user files, installed under their generated names, load jobs pickled
    by reference, and the reference resolves there to the shipped code."""
    import pickle

    from fedpipe.core.plugins import loaded_files

    cls = load_subclass("code/client.py:Mine", ClientAlgorithm, key="k")
    [file] = [f for f in loaded_files() if f.module == cls.__module__]
    assert (file.target, file.source) == ("code/client.py", CLIENT.encode())
    blob = pickle.dumps(cls(scale=3.0))  # plain pickle: the class by reference
    ship = tmp_path_factory.mktemp("ship") / "files.pkl"
    ship.write_bytes(pickle.dumps(([file], blob)))
    elsewhere = tmp_path_factory.mktemp("worker")  # no code/client.py there
    out = subprocess.run(
        [sys.executable, "-c", INSTALL_ELSEWHERE, str(ship)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["Mine", "3.0", "True", "True"]


def test_a_natural_mapping_file_is_a_dependency_of_the_partition_stage(
    project: Path,
) -> None:
    params = _params(
        data={"source": "images", "path": "data/images"},
        partition={"method": "natural", "natural_mapping": "data/writers.csv"},
    )
    assert code_files_of(params)["partition"] == ["data/writers.csv"]
    with pytest.raises(ParamsError, match="run `fedpipe sync`"):
        check_code_deps(
            code_files_of(params)
        )  # an edited mapping would not rerun the partition
    before = (project / "dvc.yaml").read_text()
    assert sync_code_deps(code_files_of(params)) is True
    assert listed_code_deps()["partition"] == ["data/writers.csv"]
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    assert stages["partition"]["deps"] == [
        "data/prepared",
        "reports/validation/summary.json",
        "data/writers.csv",
    ]
    check_code_deps(code_files_of(params))
    assert sync_code_deps(code_files_of(_params())) is True  # back: the fixed deps
    assert (project / "dvc.yaml").read_text() == before
