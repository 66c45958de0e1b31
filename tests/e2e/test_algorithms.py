"""Every strategy and every model of the zoo, end to end through the pipeline.

The strategies and models run in-process (one TensorFlow start for all) through
`run_pipeline`, the flow `fedpipe run` calls, against the session's Prefect
server. SCAFFOLD with Ditto, which carry state on the server and on every client
(control variates, personal models) from round to round, also run through
`dvc repro` and must give the same bits.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from e2e_helpers import BIN, file_hashes, make_project, run_cli

from fedpipe.config.params import STRATEGY_NAMES
from fedpipe.federation.clientstate import load_client_states

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
TWO_ROUNDS = {"federation": {"clients": 4, "rounds": 2, "fraction_fit": 0.75}}


def _set(project: Path, **sections: dict) -> None:
    path = project / "params.yaml"
    head, marker, chain = path.read_text().partition("# --- generated")
    params = yaml.safe_load(head)
    for section, values in sections.items():
        params[section] = {**(params.get(section) or {}), **values}
    path.write_text(yaml.safe_dump(params, sort_keys=False) + "\n" + marker + chain)


@pytest.fixture(scope="module")
def base(
    tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str], prefect_api: str
) -> Path:
    """A tiny project whose data stages already ran (so variants only train): run
    in-process like the variants (no CLI start of its own)."""
    project = make_project(
        tmp_path_factory.mktemp("algos") / "base", cli_env, **TWO_ROUNDS
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        _run_in_process(project, {}, prefect_api, monkeypatch)
    return project


def _run_in_process(
    project: Path, variant: dict, prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> dict:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from fedpipe.config.params import load_params, sync_round_chain
    from flows.pipeline import run_pipeline

    monkeypatch.chdir(project)
    sync_round_chain("params.yaml")
    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
        ran = run_pipeline(load_params(), report=False)
    unchanged = {"strategy": {"name": "fedavg"}}  # the base project's own settings
    assert ("round@2" in ran and "summary" in ran) or variant == unchanged
    return yaml.safe_load((project / "metrics/summary.json").read_text())


# each personalization method rides along with a strategy (or the batch-norm
# model, for FedBN): every method and every strategy still runs end to end, in
# fewer runs
WITH_PERSONALIZATION = {
    "fedprox": "fedper",
    "fedmedian": "finetune",
    "fedadam": "ditto",
}
# strategies whose new global model is a linear combination of this round's
# updates (momentum and adaptive ones carry earlier rounds; robust ones select)
LINEAR = ("fedavg", "fedprox", "scaffold")
VARIANTS = [
    {"strategy": {"name": name}}
    | (
        {"personalization": {"method": WITH_PERSONALIZATION[name]}}
        if name in WITH_PERSONALIZATION
        else {}
    )
    for name in STRATEGY_NAMES
] + [
    {"model": {"name": "deep_mlp", "depth": 3, "width": 16}},
    {
        "model": {
            "name": "cnn",
            "depth": 2,
            "width": 8,
            "kernel_size": 3,
            "batch_norm": True,
        },
        "personalization": {"method": "fedbn"},
    },
    {"model": {"name": "resnet", "blocks_per_stage": 1, "width_multiplier": 0.5}},
    {"model": {"name": "seed_cnn"}},
]


@pytest.mark.parametrize(
    "variant",
    VARIANTS,
    ids=lambda v: "-".join(str(x) for section in v.values() for x in section.values()),
)
def test_variant_runs_end_to_end(
    variant: dict,
    base: Path,
    tmp_path: Path,
    prefect_api: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = tmp_path / "project"
    shutil.copytree(base, project, symlinks=True)
    _set(project, **variant)
    summary = _run_in_process(project, variant, prefect_api, monkeypatch)
    params = yaml.safe_load((project / "params.yaml").read_text())
    batch_norm = params["model"]["name"] == "resnet" or params["model"].get(
        "batch_norm"
    )
    if batch_norm:
        # batch-norm statistics barely move in 2 short rounds (momentum 0.99), so
        # the model's inference accuracy says little yet; check it learned at all
        assert summary["global"]["loss"] is not None
        with (
            np.load(project / "models/round-0/weights.npz") as w0,
            np.load(project / "models/round-2/weights.npz") as w2,
        ):
            assert any(not np.array_equal(w0[k], w2[k]) for k in w0.files)
    else:
        # 2 rounds of a small model on 4 clients: clearly better than chance (0.1)
        assert summary["global"]["accuracy"] > 0.3
    health = yaml.safe_load((project / "metrics/health/round-2.json").read_text())
    if params["strategy"]["name"] in LINEAR and not batch_norm:
        # what the round really applied (a least-squares fit of the new global
        # model on the updates), not what it meant to apply
        fitted = health["aggregation"]["weight_sum"]
        assert summary["aggregation_weight_sum"] == pytest.approx(fitted, abs=1e-3)
        assert fitted == pytest.approx(1.0, abs=1e-3)
    assert (project / "models/round-2/server_state.npz").is_file()
    method = params.get("personalization", {}).get("method", "none")
    if method != "none":
        _check_personalized(project, method, summary, batch_norm=bool(batch_norm))
    else:
        assert "personalized" not in summary


def _check_personalized(
    project: Path, method: str, summary: dict, *, batch_norm: bool
) -> None:
    """Personalized metrics side by side with the global ones, per client and as
    mean ± std; what the method keeps really persists in the round's outputs."""
    for group in ("personalized", "personalized_std"):
        assert set(summary[group]) >= {"loss", "accuracy", "precision", "recall", "auc"}
    if not batch_norm:
        assert summary["personalized"]["accuracy"] > 0.3
    table = (project / "metrics/clients/round-2.csv").read_text().splitlines()
    assert "personalized_accuracy" in table[0] and "global_accuracy" in table[0]
    assert len(table) == 1 + 4  # every client has a personalized model
    states = load_client_states(project / "models/round-2/clients")
    with (
        np.load(project / "models/round-1/weights.npz") as w1,
        np.load(project / "models/round-2/weights.npz") as w2,
    ):
        names = sorted(w1.files)
        kept_files = [k for s in states.values() for k in s.get(method, {})]
        if method == "finetune":
            assert kept_files == []  # fine-tuning keeps nothing between rounds
            return
        assert kept_files
        positions = {int(f.rsplit("/", 1)[1]) for f in kept_files}
        if method == "ditto":
            assert positions == set(range(len(names)))
            return
        # fedper / fedbn: the global model's personal layers are never averaged
        for j in positions:
            assert np.array_equal(w1[names[j]], w2[names[j]])
        assert any(
            not np.array_equal(w1[names[j]], w2[names[j]])
            for j in range(len(names))
            if j not in positions
        )


def test_client_state_reproduces_through_dvc_repro(
    base: Path, tmp_path: Path, cli_env: dict[str, str], prefect_api: str
) -> None:
    by_run, by_repro = tmp_path / "run", tmp_path / "repro"
    shutil.copytree(base, by_run, symlinks=True)
    _set(by_run, strategy={"name": "scaffold"}, personalization={"method": "ditto"})
    shutil.copytree(by_run, by_repro, symlinks=True)
    with pytest.MonkeyPatch.context() as monkeypatch:  # what `fedpipe run` runs
        _run_in_process(by_run, {}, prefect_api, monkeypatch)
    run_cli([FEDPIPE, "sync"], by_repro, cli_env)
    run_cli([DVC, "repro"], by_repro, cli_env)
    pattern = "models/round-*/**/*.npz"
    hashes = file_hashes(by_run, pattern)
    # 3 rounds x (weights + server state) + a file per client that trained
    assert len(hashes) > 6
    assert hashes == file_hashes(by_repro, pattern)
    # the clients' control variates and personal models are really carried
    states = load_client_states(by_run / "models/round-2/clients")
    for namespace in ("scaffold", "ditto"):
        arrays = [a for s in states.values() for a in s.get(namespace, {}).values()]
        assert any(np.abs(a).sum() > 0 for a in arrays), namespace
