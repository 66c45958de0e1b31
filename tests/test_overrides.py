"""``-S key=value`` overrides: parsing, validation, and writing into params.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedpipe.config.overrides import (
    apply_overrides,
    check_overrides,
    parse_overrides,
    set_params,
    with_overrides,
)
from fedpipe.config.params import ParamsError, load_params, round_chain

ROOT = Path(__file__).resolve().parents[1]


def _params_copy(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text((ROOT / "params.yaml").read_text())
    return path


def _dumped_copy(tmp_path: Path) -> Path:
    """params.yaml as a tool without comments writes it (block lists, no marker)."""
    path = tmp_path / "params.yaml"
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("arg", "key", "value"),
    [
        ("train.lr=0.1", "train.lr", 0.1),
        ("federation.rounds=20", "federation.rounds", 20),
        ("strategy.name=fedadam", "strategy.name", "fedadam"),
        ("data.image_size=[32, 32]", "data.image_size", [32, 32]),
        ("strategy.options={alpha: 0.01}", "strategy.options", {"alpha": 0.01}),
        ("train.local_steps=null", "train.local_steps", None),
        ("train.local_steps=", "train.local_steps", None),
        ("data.dedupe=false", "data.dedupe", False),
        ("model.options.note=a=b", "model.options.note", "a=b"),
    ],
)
def test_values_are_yaml(arg: str, key: str, value: object) -> None:
    assert parse_overrides([arg]) == {key: value}


@pytest.mark.parametrize("arg", ["train.lr", "=1", "train..lr=1", "train lr=1"])
def test_not_key_value_is_refused_naming_the_argument(arg: str) -> None:
    with pytest.raises(ParamsError, match="expected dotted.key=value") as err:
        parse_overrides([arg])
    assert f"-S {arg}" in str(err.value)


def test_round_chain_cannot_be_set() -> None:
    with pytest.raises(ParamsError, match=r"federation\.rounds=N"):
        parse_overrides(["round_chain.1=0"])


def test_later_overrides_win() -> None:
    assert parse_overrides(["train.lr=0.1", "train.lr=0.2"]) == {"train.lr": 0.2}


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("train.lr=-1", "-S: train.lr: Input should be greater than 0 (got -1)"),
        ("train.lrr=1", "-S: train.lrr: unknown key; allowed keys here: batch_size"),
        ("strategy.name=nope", "-S: strategy.name: unknown 'nope'; allowed: fedavg"),
        ("federation.rounds=x", "-S: federation.rounds: Input should be a valid int"),
        ("seed.x=1", "-S seed.x: seed is a value (42), not a section"),
    ],
)
def test_bad_values_get_params_yaml_messages(
    tmp_path: Path, arg: str, message: str
) -> None:
    path = _params_copy(tmp_path)
    text = path.read_text()
    with pytest.raises(ParamsError) as err:
        apply_overrides(path, [arg])
    assert str(err.value).startswith(message)
    assert len(str(err.value).splitlines()) == 1
    assert path.read_text() == text


def test_check_regenerates_round_chain_in_memory(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    check_overrides(path, {"federation.rounds": 3})  # no round_chain mismatch
    raw = with_overrides(yaml.safe_load(path.read_text()), {"federation.rounds": 3})
    assert raw["round_chain"] == round_chain(3)


def test_one_bad_override_writes_none_of_them(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    text = path.read_text()
    with pytest.raises(ParamsError, match="train.epochs"):
        apply_overrides(path, ["train.lr=0.1", "train.epochs=0"])
    assert path.read_text() == text


# ---------------------------------------------------------------- writing


@pytest.mark.parametrize("copy", [_params_copy, _dumped_copy])
def test_overrides_land_in_the_file(tmp_path: Path, copy) -> None:  # type: ignore[no-untyped-def]
    path = copy(tmp_path)
    changed = apply_overrides(
        path,
        [
            "federation.rounds=3",
            "strategy.name=fedadam",
            "data.image_size=[32, 32]",
            "strategy.options.alpha=0.01",
            "client.options={a: 1}",
        ],
    )
    assert set(changed) == {
        "federation.rounds",
        "strategy.name",
        "data.image_size",
        "strategy.options.alpha",
        "client.options",
    }
    params = load_params(path)
    assert params.federation.rounds == 3
    assert params.round_chain == round_chain(3)
    assert params.strategy.name == "fedadam"
    assert params.data.image_size == (32, 32)
    assert params.strategy.options == {"alpha": 0.01}
    assert params.client.options == {"a": 1}


def test_a_block_list_is_replaced_whole(tmp_path: Path) -> None:
    path = _dumped_copy(tmp_path)
    assert "image_size:\n  - 64\n  - 64\n" in path.read_text().replace("  -", "  -")
    set_params(path, {"data.image_size": [16, 24]})
    text = path.read_text()
    assert "image_size: [16, 24]\n" in text
    assert "- 64" not in text


def test_comments_of_a_replaced_line_stay(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    set_params(path, {"strategy.options.alpha": 0.5})
    line = next(li for li in path.read_text().splitlines() if "{alpha: 0.5}" in li)
    assert line.endswith("# your own strategy's settings, e.g. {alpha: 0.01}")
    assert line.startswith("  options: {alpha: 0.5}")


def test_deep_key_inside_a_block_mapping(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(
        "strategy:\n  name: fedavg\n  options:\n    alpha: 1  # kept\n    beta: 2\n"
        "seed: 3\n"
    )
    set_params(path, {"strategy.options.beta": 5, "strategy.options.gamma": 7})
    raw = yaml.safe_load(path.read_text())
    assert raw["strategy"]["options"] == {"alpha": 1, "beta": 5, "gamma": 7}
    assert "alpha: 1  # kept" in path.read_text()
    assert raw["seed"] == 3


def test_missing_nested_section_is_added(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("seed: 1\n")
    set_params(path, {"strategy.options.alpha": 0.1})
    assert yaml.safe_load(path.read_text())["strategy"] == {"options": {"alpha": 0.1}}


# ---------------------------------------------------------------- --exp


def test_exp_finds_fedpipe_when_the_venv_is_not_on_path(tmp_path, monkeypatch):
    """``.venv/bin/fedpipe run --exp NAME`` with the venv not activated: DVC runs
    ``fedpipe stage ...`` by name, so the ``dvc`` it starts must find the
    ``fedpipe`` beside this interpreter on its PATH (it exited 127 before)."""
    import shutil
    import subprocess
    import sys

    from fedpipe_app.experiments import variants

    _params_copy(tmp_path)
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no venv on it
    seen = {}

    def fake_run(cmd, env=None, **kw):
        seen["env"] = env
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(variants.subprocess, "run", fake_run)
    assert variants.run_experiment("lr-high", ["train.lr=0.1"]) == 0
    path = seen["env"]["PATH"]
    found = shutil.which("fedpipe", path=path)
    assert found is not None, path
    assert Path(found).parent == Path(sys.executable).parent
    assert path.split(":")[1:] == ["/usr/bin", "/bin"]  # the rest kept, in order


def test_exp_console_keeps_rounds_and_errors_not_dvc_chatter() -> None:
    """What ``fedpipe run --exp`` shows of ``dvc exp run``'s output (the rest
    goes to the log): the stages that ran are counted from DVC's lines."""
    from fedpipe_app.experiments.variants import StageLines

    transcript = [
        "Reproducing experiment 'lr-high'",
        "Stage 'ingest' didn't change, skipping",
        "Running stage 'round@1':",
        "> fedpipe stage round 1",
        "Prefect: runs report to http://127.0.0.1:4200/api",
        "round   1/2  global acc 0.7 loss 1.0  |  local acc 0.6 ± 0.1 loss 1.1",
        "Updating lock file 'dvc.lock'",
        "",
        "Running stage 'round@2':",
        "Prefect: runs report to http://127.0.0.1:4200/api",
        "WARNING: No file hash info found for '/x/.dvc/tmp/exps/data'.",
        "warning: 2 clients have fewer than 10 samples",
        "ERROR: failed to reproduce 'round@2': exited 1. To see more:",
        "",
        "\tdvc exp show",
        "Ran experiment(s): lr-high",
    ]
    lines = StageLines()
    shown = [s for s in map(lines.shown, transcript) if s is not None]
    assert lines.ran == ["round@1", "round@2"]
    assert shown == [
        "Prefect: runs report to http://127.0.0.1:4200/api",
        "round   1/2  global acc 0.7 loss 1.0  |  local acc 0.6 ± 0.1 loss 1.1",
        "warning: 2 clients have fewer than 10 samples",
        "ERROR: failed to reproduce 'round@2': exited 1. To see more:",
        "\tdvc exp show",
    ]
