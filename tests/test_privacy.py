"""Differential privacy (fedpipe.federation.privacy): clipping and noise math, seeded
bits, the accountant against a published figure and a direct dp_accounting call, the
budget stop, bad input, and the doctor's finding."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from fedpipe.client.base import ClientTask, LocalDP
from fedpipe.client.localdp import released
from fedpipe.config.params import ParamsError, parse_params, round_chain
from fedpipe.config.privacy import Privacy
from fedpipe.federation.privacy.accountant import (
    NeighborRel,
    PrivacyBudgetExceeded,
    central_epsilon,
    composed_epsilon,
    local_epsilon,
    noise_for_epsilon,
    round_event,
)
from fedpipe.federation.privacy.mechanism import (
    CLIP_KEY,
    clip_to_norm,
    global_norm,
    privacy_rng,
)
from fedpipe.federation.privacy.rounds import aggregate_round
from fedpipe.observe.doctor import codes, diagnose
from fedpipe.observe.history import final_table, progress_line
from fedpipe.observe.report import build_report
from fedpipe.strategy import ClientUpdate, make_strategy

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

BEFORE = [np.zeros((2, 2), np.float32), np.zeros(3, np.float32)]
KEY = bytes(range(32))  # a fixed secret key for the math tests


def _update(client: int, scale: float) -> ClientUpdate:
    rng = np.random.default_rng(client)
    weights = [scale * rng.normal(size=w.shape).astype(np.float32) for w in BEFORE]
    return ClientUpdate(client, weights, n_samples=10 + client)


UPDATES = [_update(0, 5.0), _update(1, 0.01), _update(2, 3.0)]


def _central(sigma: float = 1.0, **kw: object) -> Privacy:
    settings = dict(
        mechanism="central",
        clip_norm=1.0,
        noise_multiplier=sigma,
        delta=1e-5,
        n_clients=10,
        per_round=3,
    )
    settings.update(kw)
    return Privacy(**settings)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the math


def test_clip_scales_the_whole_update_to_the_norm_over_all_layers() -> None:
    big = [np.full((2, 2), 3.0), np.full(3, 4.0)]
    clipped, norm = clip_to_norm(big, 2.0)
    assert norm == pytest.approx(math.sqrt(4 * 9 + 3 * 16))
    assert global_norm(clipped) == pytest.approx(2.0)
    assert clipped[0][0, 0] / clipped[1][0] == pytest.approx(3.0 / 4.0)  # direction
    small = [np.full(3, 0.1)]
    assert clip_to_norm(small, 2.0)[0][0].tolist() == small[0].tolist()


def test_central_mean_is_unweighted_clipped_sum_plus_noise_over_m() -> None:
    privacy = _central(sigma=0.7)
    weights, _, report = aggregate_round(
        privacy, make_strategy("fedavg"), BEFORE, UPDATES, {}, seed=3, round_=2, key=KEY
    )
    clipped = [clip_to_norm(u.weights, 1.0)[0] for u in UPDATES]
    rng = privacy_rng(3, 2, key=KEY)
    noise = [rng.normal(0.0, 0.7 * 1.0, size=w.shape) for w in BEFORE]
    expected = [(sum(c[j] for c in clipped) + noise[j]) / 3 for j in range(len(BEFORE))]
    for got, want in zip(weights, expected, strict=True):
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
        assert got.dtype == np.float32
    assert report["clipped_fraction"] == pytest.approx(2 / 3)  # clients 0 and 2
    d = sum(w.size for w in BEFORE)
    assert report["noise_norm"] == pytest.approx(0.7 * math.sqrt(d) / 3, rel=1e-5)


def test_server_optimizer_takes_the_noised_mean_as_its_pseudo_gradient() -> None:
    privacy = _central()
    avg, _, _ = aggregate_round(
        privacy, make_strategy("fedavg"), BEFORE, UPDATES, {}, seed=1, round_=1, key=KEY
    )
    momentum = make_strategy("fedavgm", server_lr=1.0, server_momentum=0.0)
    state = momentum.init_state(BEFORE)
    plain, new_state, _ = aggregate_round(
        privacy, momentum, BEFORE, UPDATES, state, seed=1, round_=1, key=KEY
    )
    for a, b in zip(avg, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert set(new_state) == set(state)


#: Reddi et al. (2021), Algorithm 2: v_t from v_{t-1} and the squared delta,
#: with each strategy's default betas (FedAdagrad: beta_1 0, tau 1e-9)
SECOND_MOMENT = {
    "fedadam": (0.9, 1e-3, lambda v, d2: 0.99 * v + 0.01 * d2),
    "fedyogi": (0.9, 1e-3, lambda v, d2: v - 0.01 * d2 * np.sign(v - d2)),
    "fedadagrad": (0.0, 1e-9, lambda v, d2: v + d2),
}


@pytest.mark.parametrize("name", sorted(SECOND_MOMENT))
def test_adaptive_server_optimizers_step_on_the_noised_mean(name: str) -> None:
    """Two rounds of FedAdam / FedYogi / FedAdagrad under central DP: each is the
    paper's server step with the noised mean delta as its pseudo-gradient, its
    moments carried between rounds (the moments see only the noised mean)."""
    privacy = _central(sigma=0.7)
    strategy = make_strategy(name, server_lr=0.5)
    beta_1, tau, second = SECOND_MOMENT[name]
    weights, state = BEFORE, strategy.init_state(BEFORE)
    m = [np.zeros(w.shape) for w in BEFORE]
    v = [np.zeros(w.shape) for w in BEFORE]
    for round_ in (1, 2):
        noised, _, _ = aggregate_round(
            privacy, make_strategy("fedavg"), weights, UPDATES, {}, seed=4,
            round_=round_, key=KEY,
        )  # fmt: skip
        delta = [n.astype(np.float64) - w for n, w in zip(noised, weights, strict=True)]
        m = [beta_1 * a + (1 - beta_1) * d for a, d in zip(m, delta, strict=True)]
        v = [second(b, d * d) for b, d in zip(v, delta, strict=True)]
        expected = [
            (w + 0.5 * a / (np.sqrt(b) + tau)).astype(np.float32)
            for w, a, b in zip(weights, m, v, strict=True)
        ]
        weights, state, report = aggregate_round(
            privacy, strategy, weights, UPDATES, state, seed=4, round_=round_, key=KEY
        )
        for got, want in zip(weights, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        assert report is not None and report["clipped_fraction"] > 0
    assert not all(np.allclose(a, b) for a, b in zip(weights, noised, strict=True)), (
        "the adaptive step should differ from the plain noised mean"
    )


def test_same_seed_same_bits_and_rounds_draw_new_noise() -> None:
    def run(round_: int) -> list[np.ndarray]:
        return aggregate_round(
            _central(),
            make_strategy("fedavg"),
            BEFORE,
            UPDATES,
            {},
            seed=5,
            round_=round_,
            key=KEY,
        )[0]

    first, again, other = run(1), run(1), run(2)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, again, strict=True))
    assert any(a.tobytes() != b.tobytes() for a, b in zip(first, other, strict=True))


def test_without_privacy_the_strategy_path_is_unchanged() -> None:
    strategy = make_strategy("fedavg")
    plain, _ = strategy.aggregate_round(BEFORE, UPDATES, {})
    got, _, report = aggregate_round(
        None, strategy, BEFORE, UPDATES, {}, seed=0, round_=1, key=None
    )
    assert report is None
    assert all(a.tobytes() == b.tobytes() for a, b in zip(plain, got, strict=True))


def test_local_dp_noises_in_each_clients_job_and_the_server_weights_as_usual() -> None:
    privacy = _central(sigma=0.5, mechanism="local")
    dp = LocalDP(privacy.clip_norm, privacy.noise_multiplier, key=KEY)
    sent = [
        ClientUpdate(
            u.client,
            released(dp, ClientTask(u.client, 4, BEFORE, seed=2), u.weights),
            u.n_samples,
        )
        for u in UPDATES
    ]
    weights, _, report = aggregate_round(
        privacy, make_strategy("fedavg"), BEFORE, sent, {}, seed=2, round_=4, key=None
    )
    shares = np.array([u.n_samples for u in UPDATES], float)
    shares /= shares.sum()
    want_sent = []
    for u in UPDATES:
        rng = privacy_rng(2, 4, u.client, key=KEY)  # the client's own key
        clipped = clip_to_norm(u.weights, 1.0)[0]
        want_sent.append([c + rng.normal(0, 0.5, size=c.shape) for c in clipped])
    for j, got in enumerate(weights):
        want = sum(s * w[j] for s, w in zip(shares, want_sent, strict=True))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the server cannot know the noise-free figures: without the oracle's copy
    # of the clients' weights the record has none
    assert not {"clipped_fraction", "signal_norm", "update_norm_median"} & set(report)
    _, _, oracle = aggregate_round(
        privacy, make_strategy("fedavg"), BEFORE, sent, {}, seed=2, round_=4,
        key=None, unnoised={u.client: u.weights for u in UPDATES},
    )  # fmt: skip
    assert oracle["clipped_fraction"] == pytest.approx(2 / 3)
    assert oracle["noise_norm"] == report["noise_norm"]


def test_adaptive_clip_moves_geometrically_towards_the_quantile() -> None:
    # every update inside a large clip, no noise (sigma 0) and almost no count
    # noise: the clip shrinks by exp(-lr * (1 - quantile)), kept in the state
    privacy = _central(
        sigma=0.0, clip_norm=100.0, adaptive_clip=True, count_noise_multiplier=1e-9
    )
    _, state, report = aggregate_round(
        privacy, make_strategy("fedavg"), BEFORE, UPDATES, {}, seed=0, round_=1, key=KEY
    )
    assert float(state[CLIP_KEY]) == pytest.approx(100.0 * math.exp(-0.2 * 0.5))
    _, state2, report2 = aggregate_round(
        privacy,
        make_strategy("fedavg"),
        BEFORE,
        UPDATES,
        state,
        seed=0,
        round_=2,
        key=KEY,
    )
    assert report2["clip_norm"] == pytest.approx(float(state[CLIP_KEY]), rel=1e-6)
    assert float(state2[CLIP_KEY]) < float(state[CLIP_KEY])
    # update noise is reduced so update and count together spend sigma
    adaptive = _central(sigma=0.5, adaptive_clip=True, count_noise_multiplier=1.0)
    assert adaptive.update_multiplier == pytest.approx((0.5**-2 - 1.0) ** -0.5)


# ---------------------------------------------------------------- the accountant


def test_rdp_reproduces_tf_privacy_published_dp_sgd_figures() -> None:
    """TensorFlow Privacy, tutorials/README.md ("Select Parameters" table and
    "Using Command-Line Interface for Privacy Budgeting"): DP-SGD on MNIST,
    N = 60000, batch 256 (Poisson rate q = 256/60000), delta = 1e-5, steps =
    ceil(epochs * N / batch): sigma 1.1 for 60 epochs -> eps 3.01; sigma 1.3 for
    15 epochs -> 1.19; sigma 0.7 for 45 epochs -> 7.10. Those figures use the
    classic RDP-to-DP conversion eps = min_a rdp(a) + log(1/delta) / (a - 1) over
    the tutorial's orders; dp_accounting's own conversion is tighter (lower)."""
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
    for sigma, epochs, published in [(1.1, 60, 3.01), (1.3, 15, 1.19), (0.7, 45, 7.10)]:
        steps = math.ceil(epochs * 60000 / 256)
        event = dp_accounting.PoissonSampledDpEvent(
            256 / 60000, dp_accounting.GaussianDpEvent(sigma)
        )
        accountant = RdpAccountant(orders)
        accountant.compose(event, steps)
        a = np.asarray(orders)
        classic = float(np.min(accountant.rdp + math.log(1 / 1e-5) / (a - 1)))
        assert round(classic, 2) == published
        tight = composed_epsilon(
            event, steps, 1e-5, relation=NeighborRel.ADD_OR_REMOVE_ONE
        )
        assert tight <= published


def test_central_epsilon_matches_a_direct_library_call_and_grows() -> None:
    privacy = _central(sigma=1.2, n_clients=50, per_round=5)
    eps = [central_epsilon(privacy, k) for k in range(1, 6)]
    assert all(b > a for a, b in zip(eps, eps[1:], strict=False))
    direct = RdpAccountant(
        neighboring_relation=dp_accounting.privacy_accountant.NeighboringRelation.REPLACE_ONE
    )
    # replace-one: one client's update replaced moves the clipped sum by 2C
    direct.compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            50, 5, dp_accounting.GaussianDpEvent(1.2 / 2)
        ),
        5,
    )
    assert eps[-1] == pytest.approx(direct.get_epsilon(1e-5), rel=1e-9)


def test_full_participation_rdp_bounds_the_pld_figure() -> None:
    # every client every round: no sampling, the Gaussian mechanism composed;
    # PLD (tight) under replace-one with multiplier sigma over C is <= RDP
    privacy = _central(sigma=1.0, n_clients=10, per_round=10)
    rdp = central_epsilon(privacy, 10)
    pld = dp_accounting.pld.PLDAccountant(
        NeighborRel.REPLACE_ONE, value_discretization_interval=1e-3
    )
    pld.compose(dp_accounting.GaussianDpEvent(1.0), 10)
    tight = pld.get_epsilon(1e-5)
    assert tight <= rdp <= 1.2 * tight


def test_adaptive_clip_accounts_the_count_as_andrew_et_al() -> None:
    adaptive = _central(sigma=0.8, adaptive_clip=True, count_noise_multiplier=2.0)
    fixed = _central(sigma=0.8)
    # update at sigma_Delta and count at z_b compose to exactly sigma
    assert central_epsilon(adaptive, 7) == pytest.approx(
        central_epsilon(fixed, 7), rel=1e-9
    )
    assert isinstance(round_event(adaptive).event, dp_accounting.ComposedDpEvent)
    # by hand: 3 of 10 without replacement, replace-one; the update's sum moves
    # by 2C (noise sigma_Delta C), the centred count by 1 (+1/2 to -1/2; noise
    # std z_b / 2)
    z_update = (0.8**-2 - 2.0**-2) ** -0.5
    direct = RdpAccountant(neighboring_relation=NeighborRel.REPLACE_ONE)
    direct.compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            10,
            3,
            dp_accounting.ComposedDpEvent(
                [
                    dp_accounting.GaussianDpEvent(z_update / 2.0),
                    dp_accounting.GaussianDpEvent((2.0 / 2.0) / 1.0),
                ]
            ),
        ),
        7,
    )
    assert central_epsilon(adaptive, 7) == pytest.approx(
        direct.get_epsilon(1e-5), abs=1e-6
    )


def test_calibrated_noise_meets_the_target() -> None:
    sigma = noise_for_epsilon(4.0, rounds=5, delta=1e-5, n_clients=8, per_round=8)
    spent = central_epsilon(_central(sigma, n_clients=8, per_round=8), 5)
    assert spent <= 4.0 + 1e-3
    assert spent > 3.9


def test_no_noise_means_no_bound() -> None:
    assert central_epsilon(_central(sigma=0.0), 1) == math.inf
    assert local_epsilon(_central(sigma=0.0, mechanism="local"), 0) == 0.0


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("privacy", "strategy", "key"),
    [
        ({"noise_multiplier": -0.5}, "fedavg", "privacy.noise_multiplier"),
        ({"delta": 0.1}, "fedavg", "privacy.delta"),
        ({"clip_norm": 0}, "fedavg", "privacy.clip_norm"),
        ({"target_epsilon": 0}, "fedavg", "privacy.target_epsilon"),
        ({}, "krum", "strategy.name='krum'"),
        ({}, "fedmedian", "strategy.name='fedmedian'"),
        ({}, "scaffold", "strategy.name='scaffold'"),
        ({"mechanism": "local", "adaptive_clip": True}, "fedavg", "adaptive_clip"),
        ({"adaptive_clip": True, "noise_multiplier": 2.0}, "fedavg", "count_noise"),
    ],
)
def test_bad_privacy_settings_name_the_key(
    privacy: dict, strategy: str, key: str
) -> None:
    raw = {
        "federation": {"clients": 10, "rounds": 2},
        "strategy": {"name": strategy},
        "privacy": {"mechanism": "central", **privacy},
        "round_chain": round_chain(2),
    }
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert key in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_robust_aggregator_is_fine_without_privacy_and_with_local() -> None:
    base = {"federation": {"rounds": 2}, "round_chain": round_chain(2)}
    parse_params({**base, "strategy": {"name": "krum"}})
    parse_params(
        {**base, "strategy": {"name": "krum"}, "privacy": {"mechanism": "local"}}
    )


# ---------------------------------------------------------------- the round


def test_rounds_record_epsilon_from_the_accountant(tmp_path: Path) -> None:
    summaries = run_federation(
        tmp_path,
        n_samples=300,
        clients=5,
        rounds=2,
        privacy={"mechanism": "central", "noise_multiplier": 1.5},
    )
    privacy = _central(sigma=1.5, n_clients=5, per_round=5)
    eps = [s["privacy"]["epsilon"] for s in summaries]
    assert eps == [pytest.approx(central_epsilon(privacy, k), abs=1e-6) for k in (1, 2)]
    assert eps == sorted(eps) and eps[0] < eps[-1]
    # the final table (reports/summary.md) and the progress line show it
    assert f"ε = {eps[-1]:.3g} at δ = 1e-05" in final_table(summaries[-1])
    assert progress_line(summaries[-1], 2, 1.0).endswith(f"ε {eps[-1]:.3g}")


def test_target_epsilon_stops_before_the_round_that_would_pass_it(
    tmp_path: Path,
) -> None:
    privacy = _central(sigma=2.0, n_clients=5, per_round=5)
    target = (central_epsilon(privacy, 2) + central_epsilon(privacy, 3)) / 2
    with pytest.raises(PrivacyBudgetExceeded) as stop:
        run_federation(
            tmp_path,
            n_samples=300,
            clients=5,
            rounds=5,
            privacy={
                "mechanism": "central",
                "noise_multiplier": 2.0,
                "target_epsilon": target,
            },
        )
    message = str(stop.value)
    assert "round 3" in message and "rounds 1..2 kept" in message
    assert "privacy.target_epsilon" in message and "\n" not in message
    written = sorted(p.name for p in (tmp_path / "metrics/rounds").iterdir())
    assert written == ["round-1.json", "round-2.json"]


def test_local_dp_epsilon_counts_each_clients_rounds(tmp_path: Path) -> None:
    summaries = run_federation(
        tmp_path,
        n_samples=300,
        clients=6,
        rounds=3,
        fraction_fit=0.5,
        privacy={"mechanism": "local", "noise_multiplier": 2.0},
    )
    selected = [set(s["clients_selected"]) for s in summaries]
    worst = max(sum(c in s for s in selected) for c in range(6))
    privacy = _central(sigma=2.0, mechanism="local", n_clients=6, per_round=3)
    assert summaries[-1]["privacy"]["epsilon"] == pytest.approx(
        local_epsilon(privacy, worst), abs=1e-6
    )


def test_doctor_names_the_noise_not_the_learning_rate(tmp_path: Path) -> None:
    (tmp_path / "noisy").mkdir()
    (tmp_path / "plain").mkdir()
    run_federation(
        tmp_path / "noisy",
        n_samples=300,
        clients=5,
        rounds=3,
        privacy={"mechanism": "central", "noise_multiplier": 3.0, "clip_norm": 0.5},
    )
    findings = diagnose(tmp_path / "noisy")
    assert findings[0].code == codes.PRIVACY_NOISE_DOMINATES
    assert findings[0].severity == "warning"
    assert "privacy.noise_multiplier=3.0" in findings[0].fix
    assert "privacy.clip_norm=0.5" in findings[0].fix
    # noised global weights make local losses look like a too-high lr: demoted
    others = {f.code: f for f in findings[1:]}
    if codes.LEARNING_RATE_TOO_HIGH in others:
        assert others[codes.LEARNING_RATE_TOO_HIGH].severity == "info"
        assert (
            codes.PRIVACY_NOISE_DOMINATES in others[codes.LEARNING_RATE_TOO_HIGH].title
        )
    report = build_report(tmp_path / "noisy", findings=None)
    assert "Differential privacy (central, client level): ε = " in report
    plain = run_federation(tmp_path / "plain", n_samples=300, clients=5, rounds=3)
    assert "privacy" not in plain[-1] and "ε" not in final_table(plain[-1])
    assert codes.PRIVACY_NOISE_DOMINATES not in {
        f.code for f in diagnose(tmp_path / "plain")
    }


def test_doctor_under_adaptive_clipping_names_the_quantile_not_the_switch(
    tmp_path: Path,
) -> None:
    run_federation(
        tmp_path,
        n_samples=300,
        clients=5,
        rounds=3,
        privacy={
            "mechanism": "central",
            "noise_multiplier": 3.0,
            "count_noise_multiplier": 30.0,
            "clip_norm": 0.01,
            "adaptive_clip": True,
        },
    )
    [finding] = [
        f for f in diagnose(tmp_path) if f.code == codes.PRIVACY_NOISE_DOMINATES
    ]
    assert "the adaptive clip (now " in finding.fix
    assert "privacy.target_quantile=0.5" in finding.fix
    assert "set privacy.adaptive_clip: true" not in finding.fix
