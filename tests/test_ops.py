"""Operations: the runtime section, params overrides, UI artifacts, CLI entries."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fedpipe.config.overrides import set_params, yaml_scalar
from fedpipe.config.params import ParamsError, load_params, parse_params, round_chain
from fedpipe.federation.records import RoundRecord

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")

# ---------------------------------------------------------------- helpers


def _row(loss: float, acc: float) -> dict[str, float]:
    return {"loss": loss, "accuracy": acc, "precision": acc, "recall": acc, "auc": NAN}


def _record() -> RoundRecord:
    return RoundRecord(
        round=3,
        selected=[0, 2],
        n_test=[10, 20, 30],
        global_test=_row(0.5, 0.8),
        global_clients=[_row(0.4, 0.9), _row(0.6, 0.7), _row(0.5, 0.8)],
        local={0: _row(0.3, 0.95), 2: _row(0.7, 0.6)},
        aggregation_weight_sum=1.0,
    )


def _params_copy(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text((ROOT / "params.yaml").read_text())
    return path


# ---------------------------------------------------------------- runtime


def test_runtime_defaults_to_local_training() -> None:
    runtime = parse_params({"round_chain": {1: 0}, "federation": {"rounds": 1}}).runtime
    assert (runtime.runner, runtime.dask_address, runtime.dask_workers) == (
        "local",
        None,
        2,
    )


def test_runtime_rejects_unknown_runner_naming_the_key() -> None:
    with pytest.raises(ParamsError, match=r"runtime\.runner"):
        parse_params({"round_chain": round_chain(10), "runtime": {"runner": "ray"}})


def test_runtime_rejects_zero_workers() -> None:
    with pytest.raises(ParamsError, match=r"runtime\.dask_workers"):
        parse_params({"round_chain": round_chain(10), "runtime": {"dask_workers": 0}})


def test_no_stage_depends_on_the_runtime_section() -> None:
    # the runtime section must never change results, so no stage may track it
    for path in (ROOT / "dvc.yaml", ROOT / "fedpipe_app/templates/dvc.yaml.in"):
        stages = yaml.safe_load(path.read_text())["stages"]
        for name, stage in stages.items():
            body = stage.get("do", stage)
            tracked = [str(p) for p in body.get("params", [])]
            assert not [p for p in tracked if p.startswith("runtime")], name


# ---------------------------------------------------------------- overrides


def test_set_params_changes_only_those_lines(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    before = path.read_text().splitlines()
    changed = set_params(path, {"train.epochs": 3, "strategy.name": "fedprox"})
    assert changed == {"train.epochs": 3, "strategy.name": "fedprox"}
    after = path.read_text().splitlines()
    diff = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert [b for _, b in diff] == [
        "  epochs: 3                  # local epochs per round",
        "  name: fedprox              # fedavg | fedprox | fedavgm | fedadam | "
        "fedyogi | fedadagrad",
    ]
    params = load_params(path)
    assert (params.train.epochs, params.strategy.name) == (3, "fedprox")


def test_set_params_regenerates_round_chain_for_rounds(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    set_params(path, {"federation.rounds": 3})
    params = load_params(path)
    assert params.federation.rounds == 3
    assert params.round_chain == round_chain(3)


def test_set_params_leaves_the_file_alone_when_nothing_changes(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    text = path.read_text()
    assert set_params(path, {"federation.rounds": 10, "runtime.runner": "local"}) == {}
    assert path.read_text() == text


def test_set_params_restores_the_file_on_a_bad_value(tmp_path: Path) -> None:
    path = _params_copy(tmp_path)
    text = path.read_text()
    with pytest.raises(ParamsError, match=r"federation\.rounds"):
        set_params(path, {"federation.rounds": 0})
    assert path.read_text() == text


def test_set_params_adds_keys_and_sections_the_file_lacks(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("seed: 1\ntrain:\n  lr: 0.1\n")
    set_params(path, {"train.epochs": 2, "runtime.runner": "dask"})
    params = load_params(path)
    assert (params.train.epochs, params.train.lr) == (2, 0.1)
    assert params.runtime.runner == "dask"


def test_set_params_refuses_flow_style_sections(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    text = "train: {epochs: 1}\n"
    path.write_text(text)
    with pytest.raises(ParamsError, match="train.epochs"):
        set_params(path, {"train.epochs": 2})
    assert path.read_text() == text


@pytest.mark.parametrize(
    ("value", "text"), [(20, "20"), ("fedprox", "fedprox"), (True, "true")]
)
def test_yaml_scalar(value: object, text: str) -> None:
    assert yaml_scalar(value) == text


# ---------------------------------------------------------------- deployment


def test_flow_parameters_map_to_params_keys() -> None:
    from flows.deploy import overrides_from

    assert overrides_from(
        {"project_dir": "/p", "rounds": 20, "strategy": None, "runner": "dask"}
    ) == {"federation.rounds": 20, "runtime.runner": "dask"}


def test_cli_has_deploy_and_serve_with_a_schedule() -> None:
    from fedpipe_app.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["deploy", "--pool", "p", "--cron", "0 3 * * *"])
    assert (args.pool, args.cron, args.name) == ("p", "0 3 * * *", None)
    args = parser.parse_args(["serve", "--name", "nightly", "--timezone", "UTC"])
    assert (args.name, args.cron, args.timezone) == ("nightly", None, "UTC")


# ---------------------------------------------------------------- artifacts


def test_round_table_has_a_row_per_client_local_and_global_side_by_side() -> None:
    from tasks.artifacts import round_key, round_table_rows

    rows = round_table_rows(_record())
    assert [r["client"] for r in rows] == [0, 1, 2]
    assert [r["selected"] for r in rows] == [True, False, True]
    assert rows[0]["local_accuracy"] == 0.95 and rows[0]["global_accuracy"] == 0.9
    # not trained this round: no local model; NaN becomes an empty cell
    assert rows[1]["local_accuracy"] is None and rows[0]["local_auc"] is None
    assert not any(
        isinstance(v, float) and math.isnan(v) for r in rows for v in r.values()
    )
    assert round_key(3) == "fedpipe-round-3"


def test_artifacts_are_not_created_outside_a_run() -> None:
    from tasks.artifacts import in_a_run, publish_round_table, publish_run_artifacts

    assert not in_a_run()
    # would need an API; outside a flow run these return without one
    publish_round_table(_record())
    publish_run_artifacts(
        _record().summary(), ["round@3"], title="t", doctor_findings="x"
    )


# ---------------------------------------------------------------- dask


def test_workers_with_several_threads_are_refused() -> None:
    from distributed import LocalCluster

    from orchestration.runtime import check_workers

    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        with pytest.raises(ValueError, match="--nthreads 1"):
            check_workers(cluster.scheduler_address)


def test_single_threaded_workers_are_counted() -> None:
    from distributed import LocalCluster

    from orchestration.runtime import check_workers

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        assert check_workers(cluster.scheduler_address) == 2
