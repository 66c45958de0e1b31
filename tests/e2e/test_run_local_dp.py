"""Local DP (``privacy.mechanism: local``) through the real CLI (issue 25, item 1).

Each client clips and noises its own reply inside its job, with a key of its own
derived from the project's key file (``.fedpipe/dp.key``, which git and DVC
ignore). A tiny federation (3 clients, 2 a round, 2 rounds) by ``fedpipe run``,
by ``dvc repro`` in a copy holding the same key and by ``fedpipe run`` on Dask
workers (where the clients' jobs, and so their noise, run) gives the same bits;
a copy with a key of its own gives other noise. An attacker holding the
project's git and DVC-tracked files (params.yaml, the weights, the manifest, the
published records), not the key, regenerates the noise every way the code could
without the key and does not recover the noise-free update; the owner, with the
key, does.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main

from fedpipe.client.localdp import client_key
from fedpipe.config import layout
from fedpipe.config.overrides import set_params
from fedpipe.config.params import load_params
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.core.seeds import keyed_rng, rng_for
from fedpipe.core.weights import load_weights
from fedpipe.federation.privacy.mechanism import gaussian_like, global_norm, privacy_rng

pytestmark = [
    pytest.mark.e2e,
]
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
ROUNDS, SIGMA, CLIP = 2, 1.0, 1.0
PRIVACY = {
    "mechanism": "local",
    "noise_multiplier": SIGMA,
    "clip_norm": CLIP,
    "delta": 1e-3,
}


def _local_dp(project: Path) -> None:
    path = project / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params.pop("round_chain", None)
    params["federation"] = {**params["federation"], "rounds": ROUNDS}
    params["privacy"] = {**(params.get("privacy") or {}), **PRIVACY}
    path.write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def runs(tiny_run: dict, tmp_path_factory: pytest.TempPathFactory,
         cli_env: dict[str, str]) -> dict[str, Path]:  # fmt: skip
    base = tmp_path_factory.mktemp("local-dp")
    out = {name: base / name for name in ("run", "repro", "dask", "other")}
    shutil.copytree(tiny_run["project"], out["run"], symlinks=True)
    _local_dp(out["run"])
    load_or_create_key(out["run"] / layout.DP_KEY)  # the key three copies hold
    for name in ("repro", "dask", "other"):
        shutil.copytree(out["run"], out[name], symlinks=True)
    (out["other"] / layout.DP_KEY).unlink()  # a key of its own, made at first use
    set_params(
        out["dask"] / "params.yaml",
        {"runtime.runner": "dask", "runtime.dask_workers": 2},
    )
    run = [FEDPIPE, "run", "--no-server-start", "--no-report"]
    for name in ("run", "other"):
        run_main(run, out[name], cli_env)
    # -v: Prefect's log says which process compiled the model for the clients
    proc = run_cli([FEDPIPE, "run", "-v", *run[2:]], out["dask"], cli_env)
    (out["dask"] / "run.log").write_text(proc.stdout + proc.stderr)
    run_cli([FEDPIPE, "sync"], out["repro"], cli_env)
    run_cli([DVC, "repro"], out["repro"], cli_env)
    return out


def test_run_repro_and_dask_give_the_same_bits_with_the_same_key(
    runs: dict[str, Path],
) -> None:
    models = "models/round-*/**/*.npz"
    hashes = file_hashes(runs["run"], models)
    assert any(f"round-{ROUNDS}" in name for name in hashes)
    # the clients' jobs (and so their noise) ran on the Dask workers
    assert "compiled in Dask worker" in (runs["dask"] / "run.log").read_text()
    records = "metrics/rounds/round-*.json"
    for name in ("repro", "dask"):
        assert file_hashes(runs[name], models) == hashes, name
        assert file_hashes(runs[name], records) == file_hashes(runs["run"], records), (
            name
        )


def test_another_key_gives_other_noise(runs: dict[str, Path]) -> None:
    assert (runs["other"] / layout.DP_KEY).read_bytes() != (
        runs["run"] / layout.DP_KEY
    ).read_bytes()
    for k in range(1, ROUNDS + 1):
        mine = (runs["run"] / layout.model_weights(k)).read_bytes()
        assert (runs["other"] / layout.model_weights(k)).read_bytes() != mine


def _delta(project: Path, k: int) -> list[np.ndarray]:
    """The published round-K update of the global model (float64)."""
    before = load_weights(project / layout.model_weights(k - 1))
    after = load_weights(project / layout.model_weights(k))
    return [
        np.asarray(a, np.float64) - np.asarray(b, np.float64)
        for a, b in zip(after, before, strict=True)
    ]


def _stripped(
    delta: list[np.ndarray],
    shares: dict[int, float],
    rngs: dict[int, np.random.Generator],
) -> list[np.ndarray]:
    """``delta`` minus each client's noise drawn from ``rngs``, weighted as FedAvg
    weighted the client (``w_K = w_{K-1} + sum_k s_k (clip_k + z_k)``)."""
    out = [d.copy() for d in delta]
    for c, share in shares.items():
        noise = gaussian_like(rngs[c], delta, SIGMA * CLIP)
        out = [o - share * z for o, z in zip(out, noise, strict=True)]
    return out


def test_the_published_files_do_not_give_the_local_noise_away(
    runs: dict[str, Path],
) -> None:
    project = runs["run"]
    # what the attacker holds: the git- and DVC-tracked files
    params = load_params(project / "params.yaml")
    manifest = json.loads((project / layout.MANIFEST).read_text())
    n_train = {int(c["client"]): len(c["train"]) for c in manifest["clients"]}
    seed, per_round = params.seed, params.federation.clients_per_round()
    key = (project / layout.DP_KEY).read_bytes()  # what the attacker lacks
    for k in range(1, ROUNDS + 1):
        published = json.loads((project / layout.round_metrics(k)).read_text())
        assert published["privacy"]["mechanism"] == "local"
        assert "clients_selected" not in published  # the sample is the oracle's
        assert "signal_norm" not in published["privacy"]
        oracle = json.loads((project / layout.oracle_record(k)).read_text())["summary"]
        signal = oracle["privacy"]["signal_norm"]
        noise = oracle["privacy"]["noise_norm"]
        assert noise > 5 * signal  # subtracting the noise is the only way in
        delta = _delta(project, k)

        def shares(clients: tuple[int, ...]) -> dict[int, float]:
            total = sum(n_train[c] for c in clients)
            return {c: n_train[c] / total for c in clients}

        # the owner, with the key and the oracle's sample, recovers the
        # noise-free update: the subtraction below can succeed
        sampled = tuple(oracle["clients_selected"])
        clean = _stripped(
            delta,
            shares(sampled),
            {c: privacy_rng(seed, k, c, key=key) for c in sampled},
        )
        assert global_norm(clean) == pytest.approx(signal, rel=1e-3, abs=1e-4)
        # the attacker: every sample it could guess, every key it can form
        attempts = 0
        for clients in itertools.combinations(sorted(n_train), per_round):
            for rngs in (
                {c: rng_for(seed, "privacy", k, c) for c in clients},  # params only
                {c: privacy_rng(seed, k, c, key=None) for c in clients},
                {  # a guessed project key, derived per client as the code does
                    c: keyed_rng(client_key(bytes(32), c), seed, "privacy", k, c)
                    for c in clients
                },
            ):
                got = _stripped(delta, shares(clients), rngs)
                miss = global_norm([g - w for g, w in zip(got, clean, strict=True)])
                assert miss > 0.5 * noise, (k, clients, miss, noise)
                assert abs(global_norm(got) - signal) > 0.5 * noise
                attempts += 1
        assert attempts == 3 * len(list(itertools.combinations(n_train, per_round)))
