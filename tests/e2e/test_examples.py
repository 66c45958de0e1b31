"""The examples/ folder, end to end: each example copied into a tiny project the
way a user would bring it (its files under the project root, named in
``params.yaml``) and run with ``fedpipe run``.

* ``examples/seed_question``: the question's own ``createModel()`` on a two-class
  image folder, with the question's optimizer (Adam, 0.001).
* ``examples/feddyn``: FedDyn, a strategy and a client algorithm that exist only
  in the user's file, with state on the server (h) and on every client (its
  gradient state), carried from round to round through the files; on the
  session's digits with their data stages done (``tiny_ready``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from e2e_helpers import BIN, copy_project, make_project, run_cli, write_image_folder

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _bring(example: str, project: Path) -> None:
    """The example's files at ``examples/<example>/`` of the project."""
    shutil.copytree(
        EXAMPLES / example,
        project / "examples" / example,
        ignore=shutil.ignore_patterns("__pycache__"),
    )


def _run(project: Path, env: dict[str, str], ran: str | None = None) -> dict:
    proc = run_cli([FEDPIPE, "run", "--no-server-start", "--no-report"], project, env)
    if ran is not None:
        assert f"stage(s) ran ({ran})" in proc.stdout, proc.stdout[-2000:]
    return json.loads((project / "metrics/summary.json").read_text())


def _rounds(project: Path, rounds: int) -> list[dict]:
    return [
        json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        for k in range(1, rounds + 1)
    ]


def _code_deps(project: Path) -> dict[str, list[str]]:
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    return {
        name: [d for d in stages[name].get("do", stages[name])["deps"] if ".py" in d]
        for name in ("init", "round")
    }


SEED_QUESTION = {
    "data": {"source": "images", "path": "data/images", "image_size": [24, 24]},
    "model": {"name": "examples/seed_question/model.py:createModel"},
    "train": {"optimizer": "adam", "lr": 0.001},
    "federation": {"clients": 2, "rounds": 2, "fraction_fit": 1.0, "min_clients": 1},
    "partition": {"min_samples": 10},
    "validation": {"min_rows": 50},
}


def test_seed_question_model_on_an_image_folder(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = tmp_path / "masks"
    write_image_folder(path / "data/images")
    _bring("seed_question", path)
    project = make_project(path, cli_env, **SEED_QUESTION)
    model_file = "examples/seed_question/model.py"
    assert _code_deps(project) == {"init": [model_file], "round": [model_file]}

    summary = _run(project, cli_env)
    rounds = _rounds(project, 2)
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["clients_selected"] == [0, 1] for r in rounds)
    # the learnable two-class folder: the question's model learns it
    assert summary["global"]["accuracy"] > 0.8
    # with an aggregation whose weights sum to 1 the global loss stays on the scale
    # of the local ones: nothing like the question's 10k
    assert summary["global"]["loss"] < 2 * summary["local"]["loss"] + 0.1
    with np.load(project / "models/round-2/weights.npz") as weights:
        shapes = [weights[k].shape for k in sorted(weights.files)]
    assert (3, 3, 3, 32) in shapes and (64, 1) in shapes  # RGB in, one sigmoid out
    assert "up to date" in run_cli([DVC, "status"], project, cli_env).stdout

    # the model file is a dependency: editing it makes init and every round stale
    with (project / model_file).open("a") as handle:
        handle.write("\n# edited\n")
    status = run_cli([DVC, "status"], project, cli_env).stdout
    assert "init:" in status and "round@1:" in status and model_file in status


FEDDYN = {
    "model": {"name": "mlp"},
    "strategy": {
        "name": "examples/feddyn/feddyn.py:FedDyn",
        "options": {"alpha": 0.01},
    },
    "federation": {"clients": 3, "rounds": 3, "fraction_fit": 0.6, "min_clients": 2},
}


def _client_states(folder: Path) -> dict[int, dict[str, np.ndarray]]:
    out = {}
    for path in sorted(folder.glob("client-*.npz")):
        with np.load(path) as archive:
            out[int(path.stem.split("-")[1])] = {k: archive[k] for k in archive.files}
    return out


def test_feddyn_as_a_users_plugin(
    tiny_ready: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = tmp_path / "feddyn"
    _bring("feddyn", path)
    # the session's digits, already ingested, validated and partitioned
    project = copy_project(tiny_ready, path, cli_env, **FEDDYN)
    plugin = "examples/feddyn/feddyn.py"
    # the strategy names its client in the same file: both stages depend on it
    assert _code_deps(project) == {"init": [plugin], "round": [plugin]}

    summary = _run(project, cli_env, "init, round@1, round@2, round@3, summary")
    # 3 rounds of the mlp on the digits: far above chance (0.1)
    assert summary["global"]["accuracy"] > 0.6
    assert summary["aggregation_weight_sum"] == pytest.approx(1.0)

    trained: set[int] = set()
    before: dict[int, dict[str, np.ndarray]] = {}
    for k, record in enumerate(_rounds(project, 3), start=1):
        selected = record["clients_selected"]
        assert len(selected) == 2
        trained |= set(selected)
        with np.load(project / f"models/round-{k}/server_state.npz") as archive:
            h = {name: archive[name] for name in archive.files}
        assert sorted(h) == ["h/000", "h/001", "h/002", "h/003"]  # mlp: 4 arrays
        assert any(np.any(a != 0) for a in h.values())

        folder = project / f"models/round-{k}/clients"
        index = json.loads((folder / "index.json").read_text())
        assert index == {"clients": sorted(trained), "namespaces": ["feddyn"]}
        states = _client_states(folder)
        assert set(states) == trained
        for client, state in states.items():
            assert sorted(state) == [f"feddyn/grad/{j:03d}" for j in range(4)]
            if client in selected:  # trained this round: a new gradient state
                assert client not in before or any(
                    not np.array_equal(state[n], before[client][n]) for n in state
                )
            else:  # kept from its last round, unchanged
                assert all(np.array_equal(state[n], before[client][n]) for n in state)
        # h is the mean of all 3 clients' gradient states (untrained ones: zeros)
        for j in range(4):
            mean = sum(
                s[f"feddyn/grad/{j:03d}"].astype(np.float64) for s in states.values()
            )
            np.testing.assert_allclose(h[f"h/{j:03d}"], mean / 3, rtol=1e-5, atol=1e-9)
        before = states
