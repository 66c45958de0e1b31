"""Your own code on Dask workers (issue 28): the FedDyn example, a plugin that
exists only as a file in the project, trained on a local cluster of two worker
processes, gives the bits of the local runner; and code the workers cannot
import ends the run with one line, in seconds, not a wait.

The workers cannot import the generated module the run loads a file under; the
run sends the files' source to them (:mod:`orchestration.usercode`).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from e2e_helpers import BIN, file_hashes, make_project, run_cli
from undone import undo_from

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
RUN = [str(BIN / "fedpipe"), "run", "--no-server-start", "--no-report"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FEDDYN = {
    "model": {"name": "mlp"},
    "strategy": {
        "name": "examples/feddyn/feddyn.py:FedDyn",
        "options": {"alpha": 0.01},
    },
    "federation": {"clients": 4, "rounds": 2, "fraction_fit": 0.75, "min_clients": 2},
}
ON_DASK = {"runtime.runner": "dask", "runtime.dask_workers": 2}
# a model file whose import fails anywhere but in the run's own process (as on
# a worker without a package the file imports); FEDPIPE_REPO_LOCK names the run
MODEL_ONLY_HERE = """\
import os

if os.environ.get("FEDPIPE_REPO_LOCK", str(os.getpid())) != str(os.getpid()):
    raise ImportError("No module named 'only_on_my_laptop'")

from fedpipe.model.zoo import build_model


def build(input_shape, n_classes):
    return build_model("mlp", input_shape, n_classes)
"""


@pytest.fixture(scope="module")
def feddyn(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> Path:
    """A tiny project using examples/feddyn/feddyn.py as the README says."""
    path = tmp_path_factory.mktemp("feddyn") / "local"
    shutil.copytree(
        EXAMPLES / "feddyn",
        path / "examples" / "feddyn",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return make_project(path, cli_env, **FEDDYN)


def test_feddyn_on_two_dask_workers_is_bitwise_the_local_run(
    feddyn: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    local = run_cli(RUN, feddyn, cli_env)
    # the local run taken back to before round 1: the rounds (where the clients
    # train, on the workers) run again, not the data stages
    on_dask = undo_from(shutil.copytree(feddyn, tmp_path / "on-dask"), 1)
    set_params(on_dask / "params.yaml", ON_DASK)
    dask = run_cli([*RUN, "-v"], on_dask, cli_env)
    log = dask.stdout + dask.stderr
    assert "client training runs on a local Dask cluster of 2 worker" in log
    assert "compiled in Dask worker" in log  # the clients trained on the workers
    assert "ModuleNotFoundError" not in log
    assert "round   2/2" in local.stdout + local.stderr
    for files in (
        "models/round-*/*.npz",
        "models/round-*/clients/*",
        "metrics/rounds/round-*.json",
    ):
        found = file_hashes(on_dask, files)
        assert found and found == file_hashes(feddyn, files), files
    # FedDyn's own state travelled: every trained client keeps its gradient
    assert len(file_hashes(on_dask, "models/round-2/clients/client-*.npz")) >= 3


def test_code_the_workers_cannot_import_ends_the_run_in_one_line_quickly(
    feddyn: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(feddyn, tmp_path / "only-here")
    # the fixture's project may have run already (another test of this module)
    (project / "metrics" / "rounds" / "round-1.json").unlink(missing_ok=True)
    (project / "code").mkdir()
    (project / "code" / "model.py").write_text(MODEL_ONLY_HERE)
    set_params(
        project / "params.yaml", {**ON_DASK, "model.name": "code/model.py:build"}
    )
    started = time.monotonic()
    run = run_cli(RUN, project, cli_env, check=False)
    took = time.monotonic() - started
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: a Dask worker could not import your code (examples/feddyn/"
        "feddyn.py, code/model.py): ImportError: No module named "
        "'only_on_my_laptop' (the workers need what it imports: fedpipe's "
        "environment with the same packages)"
    ], run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert not (project / "metrics/rounds/round-1.json").exists()
    print(f"\nthe run ended {took:.1f} s after it started")
    assert took < 240  # the whole run: data stages, init, a cluster, round 1
