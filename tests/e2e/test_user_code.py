"""Your own model, strategy and client algorithm, named in params.yaml.

One tiny project whose model builder, server strategy and client algorithm all
live in the project's own files: `fedpipe run` trains with them, `dvc.lock`
records each file as a dependency of exactly the stages that use it (editing one
reruns those stages only), `fedpipe lineage` shows their hashes, and references
that do not fit stop the run with one line naming the key.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from e2e_helpers import BIN, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")

MODEL = '''
import keras


def build(input_shape, n_classes, units=8):
    """A one-hidden-layer MLP with a configurable width."""
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            keras.layers.Flatten(),
            keras.layers.Dense(units, activation="relu", name="hidden"),
            keras.layers.Dense(n_classes, activation="softmax", name="output"),
        ]
    )
'''

STRATEGY = '''
import numpy as np

from fedpipe.strategy.base import Strategy


class HalfStep(Strategy):
    """FedAvg's step, scaled: w + step * weighted mean of (w_k - w)."""

    name = "halfstep"
    settings = ("step",)
    client_algorithm = "code/client.py:Damped"

    def __init__(self, *, step=0.5):
        self.step = float(step)

    def aggregate(self, global_weights, updates, state):
        n = np.array([u.n_samples for u in updates], dtype=np.float64)
        a = n / n.sum()
        new = [
            w + self.step * sum(ak * (u.weights[j] - w) for ak, u in zip(a, updates))
            for j, w in enumerate(global_weights)
        ]
        return new, {}
'''

CLIENT = '''
from fedpipe.client.base import ClientAlgorithm, ClientReply


class Damped(ClientAlgorithm):
    """Trains as usual and keeps a count of its rounds on the client."""

    name = "damped"
    settings = ("keep",)

    def __init__(self, *, keep=1.0):
        self.keep = float(keep)

    def train(self, task, trainer):
        fit = trainer.fit(task.global_weights, seed=task.seed_for("train"))
        seen = task.own(self.name).get("rounds", 0)
        return ClientReply(
            [w * self.keep for w in fit.weights],
            train_loss=fit.loss,
            state={self.name: {"rounds": seen + 1}},
        )
'''

PARAMS = {
    "model": {"name": "code/model.py:build", "options": {"units": 12}},
    "strategy": {"name": "code/strategy.py:HalfStep", "options": {"step": 0.5}},
    "client": {"options": {"keep": 1.0}},
    "federation": {"clients": 3, "rounds": 2, "fraction_fit": 1.0},
}


@pytest.fixture(scope="module")
def project(
    tiny_ready: Path, tmp_path_factory: pytest.TempPathFactory, cli_env: dict
) -> Path:
    """The session's tiny project with its data stages done, given the user's
    code: the run makes the initial model and the rounds only."""
    root = shutil.copytree(tiny_ready, tmp_path_factory.mktemp("user-code") / "p")
    code = root / "code"
    code.mkdir()
    for name, text in (("model", MODEL), ("strategy", STRATEGY), ("client", CLIENT)):
        (code / f"{name}.py").write_text(text)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params.pop("round_chain")
    for section, values in PARAMS.items():
        params[section].update(values)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_cli([FEDPIPE, "sync"], root, cli_env)
    run_cli(["git", "add", "-A"], root, cli_env)
    run_cli(["git", "commit", "-qm", "my code"], root, cli_env)
    proc = run_cli([FEDPIPE, "run", "--no-server-start", "--no-report"], root, cli_env)
    assert "stage(s) ran (init, round@1, round@2, summary)" in proc.stdout
    return root


def _deps(project: Path, stage: str) -> dict[str, str]:
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    return {d["path"]: d["md5"] for d in lock["stages"][stage]["deps"]}


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_runs_with_the_users_model_strategy_and_client(project: Path) -> None:
    summary = json.loads((project / "metrics/rounds/round-2.json").read_text())
    assert summary["global"]["accuracy"] > 0.3  # two rounds, clearly above chance
    with np.load(project / "models/round-2/weights.npz") as w:
        assert w["w000"].shape == (784, 12)  # model.options reached the builder
    # the client's own state is kept per client under its name
    with np.load(project / "models/round-2/clients/client-0001.npz") as s:
        assert int(s["damped/rounds"]) == 2


def test_the_strategy_applied_half_a_step(project: Path) -> None:
    health = json.loads((project / "metrics/health/round-2.json").read_text())
    assert health["aggregation"]["weight_sum"] == pytest.approx(0.5, abs=1e-3)


def test_each_file_is_a_dependency_of_exactly_the_stages_that_use_it(
    project: Path,
) -> None:
    model, strategy, client = "code/model.py", "code/strategy.py", "code/client.py"
    assert {model, strategy} <= set(_deps(project, "init"))
    assert client not in _deps(project, "init")
    for stage in ("round@1", "round@2"):
        assert {model, strategy, client} <= set(_deps(project, stage))
        assert _deps(project, stage)[client] == _md5(project / client)


def test_editing_a_file_reruns_exactly_its_stages(
    project: Path, tmp_path: Path, cli_env: dict
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    with (copy / "code/client.py").open("a") as f:
        f.write("\n# tuned\n")
    status = run_cli([DVC, "status"], copy, cli_env).stdout
    assert "round@1" in status and "round@2" in status
    assert "init:" not in status
    with (copy / "code/model.py").open("a") as f:
        f.write("\n# tuned\n")
    status = run_cli([DVC, "status"], copy, cli_env).stdout
    assert "init:" in status


def test_lineage_shows_the_code_hashes(project: Path, cli_env: dict) -> None:
    text = run_main(["lineage"], project, cli_env).stdout  # in this process
    for name in ("model", "strategy", "client"):
        path = project / "code" / f"{name}.py"
        assert f"code: code/{name}.py  md5 {_md5(path)}" in text
    assert "(read by round@1, round@2)" in text  # the client: the rounds only
    assert "(your code)" in text


@pytest.mark.parametrize(
    ("section", "value", "expected"),
    [
        # two through the CLI; every kind of misfit is unit-tested in test_plugins
        ("client", {"algorithm": "code/client.py:Missing"}, "code/client.py has no"),
        ("client", {"options": {"speed": 2}}, "client.options.speed"),
    ],
)
def test_code_that_does_not_fit_stops_with_one_line(
    project: Path,
    tmp_path: Path,
    cli_env: dict,
    section: str,
    value: dict,
    expected: str,
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    params = yaml.safe_load((copy / "params.yaml").read_text())
    params.pop("round_chain")  # regenerated by `fedpipe run` (sync)
    params[section].update(value)
    (copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = run_cli(
        [FEDPIPE, "run", "--no-server-start", "--no-report"], copy, cli_env, check=False
    )
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    # nothing versioned was lost
    assert _md5(copy / "models/round-2/weights.npz") == _md5(
        project / "models/round-2/weights.npz"
    )
