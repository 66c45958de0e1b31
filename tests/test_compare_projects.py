"""The project comparison that scripts/compare_trees.py and scripts/chaos.py rest on:
two projects' outputs, file by file and dvc.lock out by out, timings aside."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ct = _load("compare_trees")
LOCK = """\
schema: '2.0'
stages:
  round@1:
    cmd: fedpipe stage round 1
    outs:
    - path: models/round-1
      md5: {md5}.dir
    - path: metrics/rounds/round-1.json
      md5: 0123
"""


def _project(root: Path, *, weight: float = 1.0, seconds: float = 2.0) -> Path:
    (root / "models" / "round-1").mkdir(parents=True)
    np.savez(root / "models" / "round-1" / "weights.npz", w=np.full(3, weight))
    (root / "metrics" / "rounds").mkdir(parents=True)
    record = {"round": 1, "global": {"accuracy": 0.5}, "seconds": seconds}
    (root / "metrics" / "rounds" / "round-1.json").write_text(json.dumps(record))
    (root / "logs").mkdir()
    (root / "logs" / "run.log").write_text(f"took {seconds} s\n")
    (root / "dvc.lock").write_text(LOCK.format(md5="aa" if weight == 1.0 else "bb"))
    return root


def test_equal_projects_are_identical_timings_and_logs_aside(tmp_path: Path) -> None:
    a = _project(tmp_path / "a")
    b = _project(tmp_path / "b", seconds=9.0)
    result = ct.compare_projects(a, b)
    assert result.identical, result.differ
    assert result.timing_only == ["metrics/rounds/round-1.json"]
    assert result.files == 2 and result.lock_outs == 2


def test_a_changed_weight_is_named_with_its_size(tmp_path: Path) -> None:
    a = _project(tmp_path / "a")
    b = _project(tmp_path / "b", weight=1.0 + 1e-7)
    result = ct.compare_projects(a, b)
    assert not result.identical
    named = dict(result.differ)
    assert "1 of 1 arrays differ" in named["models/round-1/weights.npz"]
    assert "dvc.lock round@1: models/round-1" in named


@pytest.mark.parametrize("missing", ["models/round-1/weights.npz", "dvc.lock"])
def test_a_file_one_side_lacks_is_a_difference(tmp_path: Path, missing: str) -> None:
    a = _project(tmp_path / "a")
    b = _project(tmp_path / "b")
    (b / missing).unlink()
    assert not ct.compare_projects(a, b).identical


def test_every_variant_lays_params_that_are_accepted() -> None:
    # a misspelt key or a refused value fails here, not after minutes of runs
    import yaml

    from fedpipe.config.params import parse_params
    from fedpipe_app.project import template_text

    template = yaml.safe_load(template_text("params.yaml"))
    laid: dict[str, dict] = {}
    for v in ct.VARIANTS:
        if v.base is None:
            start = ct.merge(template, ct.TINY) if v.tiny else template
            start = ct.merge(start, {"federation": {"rounds": ct.ROUNDS}})
        else:
            start = laid[v.base]
        laid[v.name] = ct.with_overrides(start, v.overrides())
        parse_params(laid[v.name], source=v.name)
    assert laid["krum"]["strategy"]["name"] == "krum"
    assert laid["krum"]["strategy"]["num_byzantine"] == 1
    assert laid["krum"]["federation"]["clients"] == 5
