"""Secure aggregation in the round: the server holds only the sum, and the sum is
exactly the plain sum of the same quantized updates (also when clients drop out
after sharing their keys); distributed DP's epsilon from an independent
computation; the rules that refuse what needs more than the sum."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers_fl import run_federation, runner_for

from fedpipe.config.params import ParamsError, parse_params
from fedpipe.config.privacy import Privacy
from fedpipe.federation.privacy.accountant import central_epsilon
from fedpipe.federation.secure import HEALTH_NOTE
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult
from fedpipe.model.trainer import run_client
from fedpipe.strategy import ClientUpdate, make_strategy
from fedpipe.wire import secagg
from fedpipe.wire.uplink import secure_vector

SECURE = {"secure_aggregation": {"name": "secagg_plus"}}


class Recorder:
    """Wraps a round's ``map_clients``: keeps the jobs, and drops the replies of
    ``drop`` (clients that shared their keys, trained and never sent)."""

    def __init__(self, drop: Sequence[int] = ()) -> None:
        self.jobs: list[list[ClientJob]] = []
        self.drop = set(drop)

    def __call__(self, mapped: Callable) -> Callable:
        def run(jobs: Sequence[ClientJob]) -> list:
            self.jobs.append(list(jobs))
            out = list(mapped(jobs))
            return [
                ClientFailure(r.client, "dropped after sharing")
                if r.client in self.drop
                else r
                for r in out
            ]

        return run


def plain_round(jobs: Sequence[ClientJob], drop: set[int], before: list) -> list:
    """The plain FedAvg of the same quantized updates: each surviving client's
    job re-run without its uplink (the same bits: training ignores the wire),
    quantized as its job did (:func:`secure_vector`), summed without masks."""
    total = None
    settings = None
    for job in jobs:
        if job.task.client in drop:
            continue
        trained = run_client(replace(job, uplink=None), runner_for(job.spec))
        assert isinstance(trained, ClientResult)
        vector = secure_vector(
            job.uplink, job.task, trained.update.weights, trained.update.n_samples
        )
        total = vector.copy() if total is None else total + vector
        settings = job.uplink.settings
    flat = secagg.dequantize(
        total, clipping_range=settings.clipping_range, bits=settings.quantization_bits
    )
    mean = flat[1:] / flat[0]
    parts = np.split(mean, np.cumsum([w.size for w in before])[:-1])
    synthetic = [
        np.asarray(g, dtype=np.float64) + p.reshape(g.shape)
        for g, p in zip(before, parts, strict=True)
    ]
    weights, _ = make_strategy("fedavg").aggregate_round(
        before, [ClientUpdate(0, synthetic, 1)], {}
    )
    return weights


@pytest.mark.parametrize("drop", [(), (2,), (0, 3)], ids=["all", "one", "two"])
def test_the_secure_sum_is_the_plain_sum_of_the_same_quantized_updates(
    tmp_path: Path, drop: tuple[int, ...]
) -> None:
    recorder = Recorder(drop)
    weights: list = []
    run_federation(
        tmp_path, clients=6, rounds=1, n_samples=600, wire=SECURE,
        map_clients=recorder, weights_out=weights,
    )  # fmt: skip
    expected = plain_round(recorder.jobs[0], set(drop), weights[0])
    got = weights[1]
    assert len(weights) == 2, "the round did not aggregate"
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.tobytes() == e.tobytes()


def test_a_dropout_is_not_the_plain_sum_of_everyone(tmp_path: Path) -> None:
    """The check above can fail: a client that dropped out is not in the sum."""
    recorder = Recorder((2,))
    weights: list = []
    run_federation(
        tmp_path, clients=6, rounds=1, n_samples=600, wire=SECURE,
        map_clients=recorder, weights_out=weights,
    )  # fmt: skip
    everyone = plain_round(recorder.jobs[0], set(), weights[0])
    assert any(
        g.tobytes() != e.tobytes() for g, e in zip(weights[1], everyone, strict=True)
    )


def test_quantization_error_against_float_fedavg_is_within_its_bound(
    tmp_path: Path,
) -> None:
    plain: list = []
    secure: list = []
    (tmp_path / "plain").mkdir()
    (tmp_path / "secure").mkdir()
    run_federation(tmp_path / "plain", clients=6, rounds=1, n_samples=600,
                   weights_out=plain)  # fmt: skip
    recorder = Recorder()
    run_federation(tmp_path / "secure", clients=6, rounds=1, n_samples=600,
                   wire=SECURE, weights_out=secure, map_clients=recorder)  # fmt: skip
    uplink = recorder.jobs[0][0].uplink
    s = secagg.scale(uplink.settings.clipping_range, uplink.settings.quantization_bits)
    n = len(recorder.jobs[0])
    weight_sum = (
        sum(j.data.y_train.size for j in recorder.jobs[0]) * uplink.weight_scale
    )
    step = max(
        float(np.max(np.abs(p - b))) for p, b in zip(plain[1], plain[0], strict=True)
    )
    # each of n roundings moves the weighted sum and the weight sum by < 1/s
    bound = (n / s) * (1 + step) / weight_sum + 1e-6  # + float32 rounding
    error = max(
        float(np.max(np.abs(a.astype(np.float64) - b)))
        for a, b in zip(secure[1], plain[1], strict=True)
    )
    assert 0 < error <= bound, (error, bound)


def test_too_many_dropouts_keep_the_model_naming_the_client(tmp_path: Path) -> None:
    """Three of five dropped after sharing: each survivor's self-mask has two
    shares left, threshold three. Nothing is revealed; the round keeps the
    previous model and says why, and the federation goes on."""
    recorder = Recorder((0, 1, 2))
    weights: list = []
    summaries = run_federation(
        tmp_path, clients=5, rounds=1, n_samples=500, map_clients=recorder,
        weights_out=weights,
        wire={"secure_aggregation": {"name": "secagg_plus", "num_shares": 4,
                                     "reconstruction_threshold": 3}},
    )  # fmt: skip
    kept = summaries[0]["model_kept"]
    assert kept.startswith("secure aggregation: client") and "threshold 3" in kept
    assert summaries[0]["wire"]["secure_aggregation"]["unmasked"] is False
    for before, after in zip(weights[0], weights[1], strict=True):
        assert before.tobytes() == after.tobytes()


def test_a_data_attack_trains_poisoned_and_is_summed_like_any_client(
    tmp_path: Path,
) -> None:
    """A label flip poisons the client's data; its masked reply is summed as
    sent (there is no update for the server to tamper with)."""
    from fedpipe.federation.attacks import AttackPlan, make_attack

    plan = AttackPlan(make_attack("label_flip_all"), (1,), seed=0)
    summaries = run_federation(
        tmp_path, clients=5, rounds=1, n_samples=500, wire=SECURE, attack=plan
    )
    assert summaries[0]["malicious"] == [1]
    assert "model_kept" not in summaries[0]


@pytest.fixture(scope="module")
def secure_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("secure")
    run_federation(root, clients=5, rounds=2, n_samples=500, wire=SECURE,
                   save_models=True)  # fmt: skip
    return root


def test_no_published_file_and_no_oracle_record_holds_one_clients_update(
    secure_run: Path,
) -> None:
    for k in (1, 2):
        health = json.loads((secure_run / f"metrics/health/round-{k}.json").read_text())
        assert "clients" not in health
        oracle = json.loads(
            (secure_run / f".fedpipe/oracle/round-{k}.json").read_text()
        )
        assert oracle["health"]["clients"] == []
        assert oracle["health"]["secure_aggregation"] == HEALTH_NOTE
        text = json.dumps(oracle)
        assert '"cosine_to_mean"' not in text and '"aggregation_weight"' not in text
        assert oracle["health"]["aggregation"]["n_fitted"] == 0
        rows = (secure_run / f"metrics/clients/round-{k}.csv").read_text().splitlines()
        assert rows == ["client"]
        assert list((secure_run / f"models/round-{k}").glob("clients/client-*")) == []


def test_the_doctor_says_what_it_cannot_see_and_every_check_runs(
    secure_run: Path,
) -> None:
    from fedpipe.observe.doctor import diagnose
    from fedpipe.observe.runfiles import SECURE_TEXT, load_run

    run = load_run(secure_run)
    assert SECURE_TEXT in (run.view_text or "")
    findings = diagnose(run)
    unreadable = [f for f in findings if f.code == "records-unreadable"]
    assert unreadable == [], [e for f in unreadable for e in f.evidence]


def test_the_report_shows_the_bytes_and_the_protocol(secure_run: Path) -> None:
    from fedpipe.observe.report import build_report

    page = build_report(secure_run, findings=[])
    assert 'data-plot="wire"' in page
    assert "secure aggregation (secagg_plus): 4 neighbours, 3 shares" in page
    assert "Secure aggregation: the server saw only the sum" in page


def test_the_round_records_the_protocol_and_its_bytes(secure_run: Path) -> None:
    summary = json.loads((secure_run / "metrics/rounds/round-2.json").read_text())
    protocol = summary["wire"]["secure_aggregation"]
    assert protocol["protocol"] == "secagg_plus"
    assert protocol["num_shares"] == 4 and protocol["reconstruction_threshold"] == 3
    assert protocol["key_bytes_per_client"] == 64 + 4 * secagg.CIPHERTEXT_BYTES
    assert summary["wire"]["uplink_bytes_per_client"] == protocol["masked_vector_bytes"]


def test_the_server_receives_masked_payloads_and_no_weights(tmp_path: Path) -> None:
    replies: list[list[ClientResult]] = []

    def spy(mapped: Callable) -> Callable:
        def run(jobs: Sequence[ClientJob]) -> list:
            out = list(mapped(jobs))
            replies.append([r for r in out if isinstance(r, ClientResult)])
            return out

        return run

    run_federation(tmp_path, clients=5, rounds=1, n_samples=500, wire=SECURE,
                   map_clients=spy)  # fmt: skip
    assert len(replies[0]) == 5
    for r in replies[0]:
        assert r.update.weights == [] and r.payload is not None
        assert r.payload.codec == "secagg_plus"
        assert r.payload.arrays[0].dtype == np.uint32


# ---------------------------------------------------------------- distributed DP


def _independent_epsilon(
    *, rounds: int, l1: float, l2: float, mu: float, delta: float
) -> float:
    """Skellam RDP (Agarwal, Kairouz, Liu 2021, Sec. 3; sum's Poisson mean mu)
    composed over rounds and converted to (epsilon, delta) as Balle et al. (2020)
    do, over integer orders: written here apart from the library's code."""
    best = math.inf
    for alpha in range(2, 257):
        rdp = alpha * l2**2 / (4 * mu) + min(
            ((2 * alpha - 1) * l2**2 + 6 * l1) / (16 * mu**2), 3 * l1 / (4 * mu)
        )
        total = rounds * rdp
        eps = (
            total
            + math.log((alpha - 1) / alpha)
            - (math.log(delta) + math.log(alpha)) / (alpha - 1)
        )
        best = min(best, eps)
    return best


def test_distributed_dp_epsilon_matches_an_independent_computation(
    tmp_path: Path,
) -> None:
    z, clip, delta, clients, min_clients = 1.2, 1.0, 1e-3, 5, 5
    weights: list = []
    summaries = run_federation(
        tmp_path, clients=clients, rounds=3, n_samples=500, wire=SECURE,
        privacy={"mechanism": "distributed", "noise_multiplier": z,
                 "clip_norm": clip, "delta": delta},
        min_clients=min_clients, weights_out=weights,
    )  # fmt: skip
    d = sum(w.size for w in weights[0])
    s = ((1 << 19) - 1) / 8.0  # defaults: 20 bits, clipping range 8
    l2 = s * clip + math.sqrt(d)  # one client's contribution, integers
    l1 = min(math.sqrt(d) * l2, l2 * l2)
    mu_client = (z * l2) ** 2 / 2 / clients
    l1, l2 = 2 * l1, 2 * l2  # replace-one, as central DP's rdp-fixed
    for k, summary in enumerate(summaries, start=1):
        p = summary["privacy"]
        assert p["accountant"] == "rdp-skellam" and p["mechanism"] == "distributed"
        expected = _independent_epsilon(
            rounds=k, l1=l1, l2=l2, mu=mu_client * min_clients, delta=delta
        )
        assert p["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert summaries[0]["privacy"]["epsilon"] < summaries[2]["privacy"]["epsilon"]
    # every client every round, every share counted: the Gaussian mechanism's
    # epsilon at the same sigma (central DP, replace-one), within 5 %
    central = Privacy(mechanism="central", clip_norm=clip, noise_multiplier=z,
                      delta=delta, n_clients=clients, per_round=clients)  # fmt: skip
    gaussian = central_epsilon(central, 3)
    assert summaries[2]["privacy"]["epsilon"] == pytest.approx(gaussian, rel=0.05)


# ---------------------------------------------------------------- the rules

BASE = {"federation": {"clients": 6, "rounds": 1}, "round_chain": {1: 0}}


@pytest.mark.parametrize(
    ("settings", "keys"),
    [
        ({"strategy": {"name": "krum", "num_byzantine": 1}}, ("strategy.name=krum",)),
        ({"strategy": {"name": "scaffold"}}, ("strategy.name=scaffold",)),
        ({"compression": {"uplink": "int8"}}, ("compression.uplink=int8",)),
        ({"privacy": {"mechanism": "central"}}, ("privacy.mechanism=central",)),
        ({"privacy": {"mechanism": "local"}}, ("privacy.mechanism=local",)),
        ({"attack": {"name": "sign_flip", "share": 0.2}}, ("attack.name=sign_flip",)),
        ({"federation": {"clients": 2, "rounds": 1}}, ("at least 3 clients",)),
        (
            {"secure_aggregation": {"name": "secagg_plus", "num_shares": 6}},
            ("secure_aggregation.num_shares=6",),
        ),
        (
            {"secure_aggregation": {"name": "secagg_plus", "quantization_bits": 30}},
            ("secure_aggregation.quantization_bits=30",),
        ),
    ],
)
def test_what_needs_more_than_the_sum_is_refused_in_one_line(
    settings: dict, keys: tuple[str, ...]
) -> None:
    raw = {**BASE, **SECURE}
    for section, values in settings.items():
        raw[section] = {**raw.get(section, {}), **values}
    with pytest.raises(ParamsError) as info:
        parse_params(raw)
    message = str(info.value)
    assert len(message.splitlines()) == 1
    for key in keys:
        assert key in message
    assert "secure_aggregation" in message


def test_distributed_dp_without_secure_aggregation_is_refused() -> None:
    with pytest.raises(ParamsError, match="privacy.mechanism=distributed"):
        parse_params({**BASE, "privacy": {"mechanism": "distributed"}})


def test_secure_aggregation_with_a_data_attack_and_distributed_dp_is_accepted() -> None:
    params = parse_params(
        {**BASE, **SECURE, "privacy": {"mechanism": "distributed", "delta": 1e-3},
         "attack": {"name": "label_flip_all", "share": 0.2}}
    )  # fmt: skip
    assert params.split_views()
