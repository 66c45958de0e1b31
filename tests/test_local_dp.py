"""Local DP inside the client's job (issue 25, item 1): the job clips and noises
its own reply with a key of the client's own before it leaves; the server
aggregates what it received, holds no key, and publishes no noise-free figure."""

from __future__ import annotations

import json
import os
import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedpipe.client import ClientTask, LocalSGD, LocalTraining
from fedpipe.client.base import LocalDP
from fedpipe.client.localdp import client_key, local_rng, released
from fedpipe.config import layout
from fedpipe.config.privacy import Privacy
from fedpipe.core.seeds import rng_for
from fedpipe.core.weights import load_weights
from fedpipe.data.splits import ClientData
from fedpipe.federation.build import private_strategy
from fedpipe.federation.privacy.mechanism import global_norm
from fedpipe.model.cohort import cohort_map
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec
from fedpipe.strategy import ClientUpdate, make_strategy

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

FEATURES, KEY = 6, bytes(range(32))
DP = LocalDP(clip_norm=0.5, noise_multiplier=1.3, key=KEY)
_runner: list[ModelRunner] = []


def _model() -> ModelRunner:
    if not _runner:
        _runner.append(ModelRunner(ModelSpec("mlp", (FEATURES,), 3, "sgd", 0.05)))
    return _runner[0]


def _jobs(
    runner: ModelRunner, dp: LocalDP | None, weights: list[np.ndarray]
) -> list[ClientJob]:
    jobs = []
    for c, n in enumerate((9, 20)):
        rng = np.random.default_rng(100 + c)
        x = rng.normal(size=(n, FEATURES)).astype(np.float32)
        y = rng.integers(0, 3, size=n).astype(np.int64)
        jobs.append(
            ClientJob(
                runner.spec,
                LocalSGD(),
                ClientTask(client=c, round=2, global_weights=weights, seed=3),
                ClientData(c, x, y, x[:5], y[:5]),
                LocalTraining(2, 8, runner.spec.lr, local_dp=dp),
            )
        )
    return jobs


def _bits(weights: list[np.ndarray]) -> list[tuple[str, bytes]]:
    return [(str(w.dtype), w.tobytes()) for w in weights]


@pytest.mark.parametrize("cohort", [False, True])
def test_the_clients_job_clips_and_noises_its_own_reply(cohort: bool) -> None:
    runner = _model()
    start = [np.array(w) for w in runner.model.get_weights()]
    run = cohort_map(runner, 2) if cohort else run_here(runner)
    plain = run(_jobs(runner, None, start))
    private = run(_jobs(runner, DP, start))
    jobs = _jobs(runner, DP, start)
    for job, bare, sent in zip(jobs, plain, private, strict=True):
        assert isinstance(bare, ClientResult) and isinstance(sent, ClientResult)
        assert bare.unnoised is None
        # the job trained as without DP, then released its weights noised
        assert sent.unnoised is not None
        assert _bits(sent.unnoised) == _bits(bare.update.weights)
        assert _bits(sent.update.weights) == _bits(
            released(DP, job.task, bare.update.weights)
        )
        assert sent.local == bare.local and sent.state == bare.state
        # clip 0.5 plus noise of std 0.65 per coordinate: far from the clean reply
        before = job.task.global_weights
        noised = [a - b for a, b in zip(sent.update.weights, before, strict=True)]
        assert global_norm(noised) > 5 * DP.clip_norm


def test_the_noise_comes_from_the_clients_own_key() -> None:
    task = ClientTask(client=4, round=3, global_weights=[np.zeros(50)], seed=9)
    zeros = [np.zeros(50)]  # no update: what is sent is the noise alone
    (noise,) = released(DP, task, zeros)
    std = DP.noise_multiplier * DP.clip_norm
    own = local_rng(KEY, 9, 3, 4).normal(0.0, std, size=50)
    assert noise.tobytes() == own.tobytes()
    assert client_key(KEY, 4) != client_key(KEY, 5) != KEY
    # another key, the seed alone, or the project key itself: other noise
    for other in (
        released(replace(DP, key=os.urandom(32)), task, zeros)[0],
        released(replace(DP, key=None), task, zeros)[0],
        rng_for(9, "privacy", 3, 4).normal(0.0, std, size=50),
    ):
        assert not np.allclose(noise, other)
    # without a key (params_not_private) the seed alone gives it, as documented
    (bare,) = released(replace(DP, key=None), task, zeros)
    assert bare.tobytes() == rng_for(9, "privacy", 3, 4).normal(0, std, 50).tobytes()


def test_the_job_carries_the_key_to_the_client_but_never_prints_it() -> None:
    (job, _) = _jobs(_model(), DP, [np.zeros(3)])
    assert KEY.hex() not in repr(job) and str(KEY) not in repr(job.training)
    assert pickle.loads(pickle.dumps(job.training)).local_dp.key == KEY


def test_a_local_dp_run_publishes_only_what_the_server_received(
    tmp_path: Path,
) -> None:
    summaries = run_federation(
        tmp_path,
        n_samples=300,
        clients=4,
        rounds=2,
        seed=7,
        fraction_fit=0.75,
        privacy={"mechanism": "local", "noise_multiplier": 1.0},
        dp_key=KEY,
    )
    oracle_keys = {"clipped_fraction", "update_norm_median", "signal_norm"}
    for k, full in enumerate(summaries, start=1):
        published = json.loads((tmp_path / layout.round_metrics(k)).read_text())
        block = published["privacy"]
        assert block["mechanism"] == "local" and block["view"] == "server"
        assert not oracle_keys & set(block)
        # the oracle view keeps the noise-free figures (from the clients'
        # weights before their jobs noised them)
        assert oracle_keys <= set(full["privacy"])
        assert full["privacy"]["noise_norm"] > 10 * full["privacy"]["signal_norm"]
        health = json.loads((tmp_path / layout.oracle_record(k)).read_text())
        # the health record describes what the server received: FedAvg's fit
        # to the received (noised) updates is exact
        assert health["health"]["aggregation"]["weight_sum"] == pytest.approx(1.0)


def test_the_debug_mode_draws_the_local_noise_from_the_params_alone(
    tmp_path: Path,
) -> None:
    sigma = 1.0
    summaries = run_federation(
        tmp_path,
        n_samples=300,
        clients=3,
        rounds=2,
        seed=5,
        privacy={
            "mechanism": "local",
            "noise_multiplier": sigma,
            "noise_key": "params_not_private",
        },
        save_models=True,
    )
    assert not (tmp_path / layout.DP_KEY).exists()  # no key made or read
    for k, full in enumerate(summaries, start=1):
        block = full["privacy"]
        assert "epsilon does not hold" in block["guarantee"]
        oracle = json.loads((tmp_path / layout.oracle_record(k)).read_text())
        n_train = {c["client"]: c["n_train"] for c in oracle["health"]["clients"]}
        total = sum(n_train.values())
        before = load_weights(tmp_path / layout.model_weights(k - 1))
        after = load_weights(tmp_path / layout.model_weights(k))
        stripped = [
            np.asarray(a, np.float64) - np.asarray(b, np.float64)
            for a, b in zip(after, before, strict=True)
        ]
        for c, n in n_train.items():  # the seed alone regenerates each noise
            rng = rng_for(5, "privacy", k, c)
            noise = [rng.normal(0.0, sigma, size=np.shape(b)) for b in before]
            stripped = [s - n / total * z for s, z in zip(stripped, noise, strict=True)]
        assert global_norm(stripped) == pytest.approx(
            block["signal_norm"], rel=1e-3, abs=1e-4
        )


def test_a_reply_not_noised_in_its_job_is_refused_under_local_dp() -> None:
    privacy = Privacy("local", 1.0, 1.0, 1e-5, 10, 2)
    server = private_strategy(make_strategy("fedavg"), privacy, seed=1, key=None)
    bound = server.start(1, lambda k: [0, 1])  # type: ignore[union-attr]
    weights = [np.zeros(3)]
    update = ClientUpdate(0, weights, 5)
    noised = ClientResult(update, 2, {}, unnoised=weights)
    assert bound.on_results(1, weights, [noised]) == [noised]
    with pytest.raises(RuntimeError, match="client 1's reply was not noised"):
        bound.on_results(
            1, weights, [noised, ClientResult(replace(update, client=1), 2, {})]
        )
