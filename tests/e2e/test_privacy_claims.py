"""What docs/privacy.md promises about a DP run, checked through the real tools:
the adaptive clip is kept with the round's model so that ``dvc repro`` of one
round gives the same bits, the budget stop holds under ``dvc repro`` too, and ε is
in each round's Prefect table artifact."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from e2e_helpers import BIN, TINY, file_hashes, run_cli, run_main

from fedpipe.config.privacy import Privacy
from fedpipe.federation.privacy.accountant import central_epsilon

pytestmark = [
    pytest.mark.e2e,
]
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
ADAPTIVE = {
    "mechanism": "central",
    "noise_multiplier": 0.1,  # below the count's default multiplier, 2 / 10
    "delta": 1e-3,
    "clip_norm": 0.5,
    "adaptive_clip": True,
}


def _with_privacy(source: Path, project: Path, privacy: dict) -> Path:
    shutil.copytree(source, project)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["privacy"] = privacy
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return project


@pytest.fixture(scope="module")
def adaptive_run(
    tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """The session's tiny run again under central DP with adaptive clipping."""
    project = _with_privacy(
        tiny_run["project"], tmp_path_factory.mktemp("adaptive") / "p", ADAPTIVE
    )
    proc = run_main([FEDPIPE, "run", "--no-server-start"], project, cli_env)
    return {"project": project, "proc": proc}


def _clips(project: Path) -> list[float]:
    rounds = TINY["federation"]["rounds"]
    return [
        float(np.load(project / f"models/round-{k}/server_state.npz")["privacy/clip"])
        for k in range(1, rounds + 1)
    ]


def test_dvc_repro_of_one_round_reuses_the_adapted_clip(
    adaptive_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = tmp_path / "p"
    shutil.copytree(adaptive_run["project"], project)
    clips = _clips(project)
    # the clip moved from round to round: a recomputed round 3 that started
    # from the configured clip instead of round 2's would not give the same bits
    assert len(set(clips)) == len(clips), clips
    before = file_hashes(project, "models/round-3/*.npz")
    assert {"models/round-3/weights.npz", "models/round-3/server_state.npz"} <= set(
        before
    )
    before_lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]

    run_cli([DVC, "repro", "--force", "--single-item", "round@3"], project, cli_env)

    assert file_hashes(project, "models/round-3/*.npz") == before
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert lock["round@3"]["outs"] == before_lock["round@3"]["outs"]


def test_the_budget_stop_holds_under_dvc_repro(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    federation = TINY["federation"]  # 3 clients, 2 a round, 4 rounds
    privacy = Privacy("central", 1.0, 2.0, 1e-3, federation["clients"], 2)
    target = (central_epsilon(privacy, 2) + central_epsilon(privacy, 3)) / 2
    project = _with_privacy(
        tiny_run["project"],
        tmp_path / "p",
        {
            "mechanism": "central",
            "noise_multiplier": 2.0,
            "delta": 1e-3,
            "target_epsilon": round(target, 4),
        },
    )
    before = yaml.safe_load((project / "dvc.lock").read_text())["stages"]

    proc = run_cli([DVC, "repro"], project, cli_env, check=False)

    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "privacy.target_epsilon" in out and "round 3" in out, out[-3000:]
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    # rounds 1 and 2 recomputed under DP and recorded; round 3 on not run
    assert lock["round@2"] != before["round@2"]
    assert lock["round@3"] == before["round@3"]
    spent = json.loads((project / "metrics/rounds/round-2.json").read_text())
    assert spent["privacy"]["epsilon"] == pytest.approx(
        central_epsilon(privacy, 2), abs=1e-6
    )
    # DVC removed round 3's outputs as the stage started (they stay in its cache,
    # named by the unchanged dvc.lock entry); nothing under DP was written for it
    third = project / "metrics/rounds/round-3.json"
    assert not third.exists() or "privacy" not in json.loads(third.read_text())
    # nor is the earlier run's round 4 (without DP) left published beside them
    assert not (project / "metrics/rounds/round-4.json").exists()
    assert not (project / "metrics/clients/round-4.csv").exists()
    assert not (project / "metrics/history.csv").exists()
    assert "Traceback" not in out, out[-3000:]


def test_epsilon_is_in_every_rounds_prefect_artifact(
    adaptive_run: dict, cli_env: dict[str, str]
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )
    from prefect.settings import PREFECT_API_URL, temporary_settings

    proc = adaptive_run["proc"]
    ids = re.findall(r"runs/flow-run/([0-9a-f-]{36})", proc.stdout + proc.stderr)
    assert len(ids) == 1, proc.stdout + proc.stderr
    project = adaptive_run["project"]
    rounds = TINY["federation"]["rounds"]
    keys = [f"fedpipe-round-{k}" for k in range(1, rounds + 1)]
    with (
        temporary_settings({PREFECT_API_URL: cli_env["PREFECT_API_URL"]}),
        get_client(sync_client=True) as client,
    ):
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=keys),
                flow_run_id=ArtifactFilterFlowRunId(any_=ids),
            )
        )
    by_key = {a.key: a.description for a in artifacts}
    assert sorted(by_key) == sorted(keys)
    for k in range(1, rounds + 1):
        record = json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        eps = record["privacy"]["epsilon"]
        assert f"ε = {eps:.3g} at δ = 0.001 after round {k}" in by_key[keys[k - 1]]
