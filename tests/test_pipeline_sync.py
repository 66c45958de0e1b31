"""dvc.yaml, params.yaml, the packaged templates and fedpipe.config.layout agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpipe.config import layout
from fedpipe.config.params import load_params, round_chain
from fedpipe_app.project import TEMPLATE_FILES, template_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def stages() -> dict:
    """The repository's pipeline as DVC resolves it (templating applied)."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        return {s.addressing: s for s in repo.index.stages}


def test_params_round_chain_matches_rounds() -> None:
    params = load_params(ROOT / "params.yaml")
    assert params.round_chain == round_chain(params.federation.rounds)


def test_dvc_makes_one_stage_per_round_in_order(stages: dict) -> None:
    rounds = load_params(ROOT / "params.yaml").federation.rounds
    assert list(stages) == layout.stage_names(rounds)


def test_only_the_root_pipeline_exists(stages: dict) -> None:
    assert {Path(s.path).resolve() for s in stages.values()} == {ROOT / "dvc.yaml"}


def test_round_stage_reads_previous_round_and_writes_layout_paths(stages: dict) -> None:
    for k in (1, 2, 10):
        stage = stages[f"round@{k}"]
        deps = {str(d.def_path) for d in stage.deps}
        outs = {str(o.def_path) for o in stage.outs}
        assert str(layout.model_weights(k - 1)) in deps
        assert str(layout.MANIFEST) in deps
        assert {
            str(layout.model_weights(k)),
            str(layout.round_metrics(k)),
            str(layout.client_metrics(k)),
        } <= outs
        assert stage.cmd == f"fedpipe stage round {k}"


def test_round_stages_do_not_depend_on_the_number_of_rounds(stages: dict) -> None:
    params = {
        p
        for dep in stages["round@1"].deps
        if hasattr(dep, "params")
        for p in dep.params
    }
    assert "federation.rounds" not in params
    assert "train" in params and "seed" in params


def test_ingest_reads_data_path(stages: dict) -> None:
    params = load_params(ROOT / "params.yaml")
    deps = {str(d.def_path) for d in stages["ingest"].deps}
    assert params.data.path in deps


def test_data_stages_write_layout_paths(stages: dict) -> None:
    def outs(name: str) -> set[str]:
        return {str(o.def_path) for o in stages[name].outs}

    assert outs("mnist5k") == {"data/raw/mnist5k.parquet"}
    assert outs("ingest") == {str(layout.PREPARED_DIR)}
    assert str(layout.VALIDATION_DIR) in outs("validate")
    assert {str(layout.MANIFEST), str(layout.PARTITION_REPORT_DIR)} <= outs("partition")
    assert str(layout.model_weights(0)) in outs("init")
    assert {str(layout.HISTORY_CSV), str(layout.SUMMARY_METRICS)} <= outs("summary")


@pytest.mark.parametrize("name", TEMPLATE_FILES)
def test_packaged_templates_equal_the_root_files(name: str) -> None:
    assert template_text(name) == (ROOT / name).read_text()


def test_the_demo_stage_only_for_the_demo_data(tmp_path: Path) -> None:
    """A project on its own table or image folder neither runs the mnist5k stage
    nor records its file: `fedpipe sync` / `fedpipe run` leave it out of
    dvc.yaml, and put it back, as the template has it, for the demo data."""
    import yaml

    from fedpipe_app.project import sync_demo_stage

    path = tmp_path / "dvc.yaml"
    path.write_text(template_text("dvc.yaml"))
    assert sync_demo_stage("table", path) is True
    stages = yaml.safe_load(path.read_text())["stages"]
    assert "mnist5k" not in stages and "ingest" in stages
    assert sync_demo_stage("images", path) is False  # already without it
    assert sync_demo_stage("mnist5k", path) is True
    assert path.read_text() == template_text("dvc.yaml")  # byte for byte
    assert "mnist5k" not in layout.stage_names(2, "table")
    assert layout.stage_names(2, "mnist5k") == layout.stage_names(2)
