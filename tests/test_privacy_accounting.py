"""Tight accounting (issue 25, item 3): Poisson client sampling accounted with
dp_accounting's PLD accountant, pinned against values computed here directly with
dp_accounting (not through fedpipe's accountant) for published settings; fixed-size
sampling keeps its RDP bound; every round record names its accountant."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import RdpAccountant

from fedpipe.config.params import ParamsError, parse_params, round_chain
from fedpipe.config.privacy import Privacy
from fedpipe.federation.privacy.accountant import central_epsilon, noise_for_epsilon
from fedpipe.federation.privacy.mechanism import Clipped, next_clip
from fedpipe.federation.privacy.rounds import aggregate_round
from fedpipe.federation.round import FixedSampling, PoissonSampling, sample_clients
from fedpipe.strategy import ClientUpdate, make_strategy

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
KEY = bytes(range(32))  # a fixed secret key


def _poisson(sigma: float, n: int, q: float, delta: float = 1e-5) -> Privacy:
    return Privacy(
        "central", 1.0, sigma, delta, n, max(1, round(q * n)),
        sampling="poisson", sampling_rate=q,
    )  # fmt: skip


def _direct_pld(q: float, sigma: float, steps: int, delta: float) -> float:
    """Epsilon of ``steps`` Poisson-sampled Gaussians, dp_accounting alone."""
    accountant = PLDAccountant(neighboring_relation=ADD_REMOVE)
    event = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    accountant.compose(event, steps)
    return float(accountant.get_epsilon(delta))


def _direct_rdp(q: float, sigma: float, steps: int, delta: float) -> float:
    accountant = RdpAccountant(neighboring_relation=ADD_REMOVE)
    event = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    accountant.compose(event, steps)
    return float(accountant.get_epsilon(delta))


# ------------------------------------------------- published settings, pinned

#: TensorFlow Privacy's MNIST DP-SGD tutorial (after Abadi et al. 2016): N =
#: 60000, batch 256 (q = 256/60000, Poisson), noise multiplier 1.1, 60 epochs,
#: delta 1e-5. Its README reports epsilon 3.01 with the classic RDP conversion;
#: dp_accounting's RDP conversion and the PLD accountant are tighter.
TF_PRIVACY = {"n": 60000, "q": 256 / 60000, "sigma": 1.1, "epochs": 60}
TF_PRIVACY_DOCS_EPSILON = 3.01


def test_poisson_epsilon_equals_pld_computed_directly_for_the_tf_privacy_setting():
    q, sigma = TF_PRIVACY["q"], TF_PRIVACY["sigma"]
    steps = TF_PRIVACY["epochs"] * TF_PRIVACY["n"] // 256
    ours = central_epsilon(_poisson(sigma, TF_PRIVACY["n"], q), steps)
    pld = _direct_pld(q, sigma, steps, 1e-5)
    rdp = _direct_rdp(q, sigma, steps, 1e-5)
    assert ours == pytest.approx(pld, rel=1e-9)
    # tight below the RDP bound, which is below the docs' classic-conversion 3.01
    assert ours < rdp < TF_PRIVACY_DOCS_EPSILON
    assert ours == pytest.approx(2.38, abs=0.01)  # the docs' "about 3", tightened
    assert rdp == pytest.approx(2.60, abs=0.01)


@pytest.mark.parametrize(
    ("sigma", "epochs", "docs"),
    [(1.3, 15, 1.19), (0.7, 45, 7.10)],  # TF Privacy's other two tutorial rows
)
def test_other_tf_privacy_rows_are_pld_of_the_same_events(sigma, epochs, docs):
    q = 256 / 60000
    steps = epochs * 60000 // 256
    ours = central_epsilon(_poisson(sigma, 60000, q), steps)
    assert ours == pytest.approx(_direct_pld(q, sigma, steps, 1e-5), rel=1e-9)
    assert ours < _direct_rdp(q, sigma, steps, 1e-5) < docs


# ------------------------------------------------- the issue's federation


#: docs/privacy.md's table: 100 clients, 20 a round, 20 rounds; sigma 14.775 is
#: what the fixed-size (RDP, replace-one) accountant needs for epsilon 1
SIGMA_FOR_1_FIXED = 14.775


def test_poisson_pld_epsilon_is_well_below_the_old_fixed_size_figure():
    fixed = Privacy("central", 1.0, SIGMA_FOR_1_FIXED, 1e-5, 100, 20)
    poisson = _poisson(SIGMA_FOR_1_FIXED, 100, 0.2)
    old = central_epsilon(fixed, 20)
    tight = central_epsilon(poisson, 20)
    assert old == pytest.approx(1.00, abs=0.005)
    assert tight == pytest.approx(_direct_pld(0.2, SIGMA_FOR_1_FIXED, 20, 1e-5))
    assert tight < 0.5 * old  # the issue: 0.44 (replace-one pair) vs 1.00
    assert tight == pytest.approx(0.20, abs=0.01)
    assert (fixed.accountant, poisson.accountant) == ("rdp-fixed", "pld-poisson")


def test_calibration_uses_the_accountant_the_rounds_report():
    sigma = noise_for_epsilon(
        1.0, rounds=20, delta=1e-5, n_clients=100, per_round=20,
        sampling="poisson", rate=0.2,
    )  # fmt: skip
    assert sigma < SIGMA_FOR_1_FIXED / 3  # the tight accountant needs far less noise
    assert central_epsilon(_poisson(sigma, 100, 0.2), 20) <= 1.0
    assert central_epsilon(_poisson(sigma * 0.99, 100, 0.2), 20) > 1.0
    assert _direct_pld(0.2, sigma, 20, 1e-5) == pytest.approx(1.0, abs=1e-3)


#: issue 36, defect 3: 100 clients, q 0.2, 20 rounds, sigma 1, default z_b =
#: q n / 10 = 2. With the uncentred count (sensitivity 1) the round was one
#: Gaussian of multiplier 0.756 and spent epsilon 11.00 against sigma's 6.62.
ISSUE_36 = {"n": 100, "q": 0.2, "sigma": 1.0, "rounds": 20}


def _adaptive_poisson(sigma: float, n: int, q: float, **kw: object) -> Privacy:
    return Privacy(
        "central", 1.0, sigma, 1e-5, n, max(1, round(q * n)), adaptive_clip=True,
        sampling="poisson", sampling_rate=q, **kw,
    )  # fmt: skip


def _direct_adaptive_pld(
    q: float, z_update: float, count_std: float, steps: int, delta: float
) -> float:
    """Epsilon of ``steps`` Poisson rounds that release, from the same sample,
    the update sum (sensitivity 1, noise std ``z_update``) and the centred
    clipped count (sensitivity 1/2, noise std ``count_std``), dp_accounting
    alone. Whitening each release by its noise makes the pair one Gaussian of
    std 1 whose sensitivity is the norm of the whitened sensitivities (the
    worst client moves both at once)."""
    whitened = float(np.hypot(1.0 / z_update, 0.5 / count_std))
    pld = from_gaussian_mechanism(
        standard_deviation=1.0,
        sensitivity=whitened,
        sampling_prob=q,
        value_discretization_interval=1e-4,
        neighboring_relation=ADD_REMOVE,
    )
    return float(pld.self_compose(steps).get_epsilon_for_delta(delta))


def test_adaptive_clip_under_poisson_spends_exactly_sigma():
    """The documented claim: update and centred count together spend what sigma
    alone does. Each side is built by hand from the mechanism's two releases;
    the RDP accountant composes the two Gaussian events itself."""
    q, sigma, rounds = ISSUE_36["q"], ISSUE_36["sigma"], ISSUE_36["rounds"]
    p = _adaptive_poisson(sigma, ISSUE_36["n"], q)
    z_b = 0.1 * q * ISSUE_36["n"]  # the default: expected clients / 10
    assert p.count_multiplier == pytest.approx(z_b)
    z_update = (sigma**-2 - z_b**-2) ** -0.5  # Andrew et al., Sec. 3.1
    composed = _direct_adaptive_pld(q, z_update, z_b / 2, rounds, 1e-5)
    assert central_epsilon(p, rounds) == pytest.approx(composed, abs=1e-6)
    assert composed == pytest.approx(_direct_pld(q, sigma, rounds, 1e-5), abs=1e-6)
    assert composed == pytest.approx(6.62, abs=0.005)  # not the uncentred 11.00
    rdp = RdpAccountant(neighboring_relation=ADD_REMOVE)
    rdp.compose(
        dp_event.PoissonSampledDpEvent(
            q,
            dp_event.ComposedDpEvent(
                [
                    dp_event.GaussianDpEvent(z_update),
                    dp_event.GaussianDpEvent((z_b / 2) / 0.5),  # std / sensitivity
                ]
            ),
        ),
        rounds,
    )
    assert rdp.get_epsilon(1e-5) == pytest.approx(
        _direct_rdp(q, sigma, rounds, 1e-5), rel=1e-9
    )


def test_adaptive_poisson_rounds_record_the_composed_epsilon(tmp_path: Path):
    """What the round records say equals epsilon of the update and the centred
    count composed under the same Poisson sample, computed here by hand."""
    summaries = run_federation(
        tmp_path,
        n_samples=400,
        clients=8,
        rounds=3,
        fraction_fit=0.5,
        sampling="poisson",
        privacy={
            "mechanism": "central",
            "noise_multiplier": 1.0,
            "adaptive_clip": True,
            "count_noise_multiplier": 2.0,
        },  # fmt: skip
        dp_key=KEY,
    )
    z_update = (1.0**-2 - 2.0**-2) ** -0.5
    eps = [s["privacy"]["epsilon"] for s in summaries]
    assert eps == [
        pytest.approx(_direct_adaptive_pld(0.5, z_update, 1.0, k, 1e-5), abs=1e-6)
        for k in (1, 2, 3)
    ]
    assert {s["privacy"]["accountant"] for s in summaries} == {"pld-poisson"}


def _share_after(clipped: Clipped, privacy: Privacy) -> float:
    """The noised share inside that moved the clip, read back from the clip."""
    new = next_clip(clipped, privacy, np.random.default_rng(0))
    return privacy.target_quantile - np.log(new / clipped.clip) / privacy.clip_lr


def test_the_released_count_moves_by_its_sensitivity_one_half():
    """Adding one client, inside the clip or outside, moves the count the clip
    step releases by exactly 1/2 (Andrew et al.'s centred b_i - 1/2): the
    sensitivity the accountant composes. Uncentred, an outside client moved it
    by 0 and an inside one by 1."""
    p = _adaptive_poisson(0.0, 8, 0.5, count_noise_multiplier=1e-12)
    m = p.expected_clients  # q n = 4, whoever came
    zero = [np.zeros(2)]
    norms = [0.1, 0.2, 5.0]
    base = _share_after(Clipped([zero] * 3, norms, 1.0), p)
    inside = _share_after(Clipped([zero] * 4, [*norms, 0.3], 1.0), p)
    outside = _share_after(Clipped([zero] * 4, [*norms, 9.0], 1.0), p)
    assert m * (inside - base) == pytest.approx(0.5, abs=1e-9)
    assert m * (outside - base) == pytest.approx(-0.5, abs=1e-9)
    # 2 of 3 inside, 4 expected: (2 - 3/2) / 4 + 1/2
    assert base == pytest.approx(0.625, abs=1e-9)


def test_count_noise_default_is_checked_against_the_expected_clients():
    """Poisson with q n = 4.5 (per_round rounds up to 5): the default z_b is
    0.45, below sigma 0.47, which left the update's multiplier complex."""
    raw = {
        "federation": {
            "clients": 45, "rounds": 1, "fraction_fit": 0.1, "sampling": "poisson",
        },
        "privacy": {
            "mechanism": "central", "noise_multiplier": 0.47, "adaptive_clip": True,
        },
        "round_chain": round_chain(1),
    }  # fmt: skip
    with pytest.raises(ParamsError, match="privacy.count_noise_multiplier=0.45"):
        parse_params(raw)


# ------------------------------------------------- the sampling


def test_poisson_sampling_is_seeded_per_round_and_joins_at_rate_q():
    sampling = PoissonSampling(rate=0.2)
    draws = [
        sampling.clients(n_clients=500, per_round=100, seed=7, round_=k)
        for k in range(1, 41)
    ]
    again = sampling.clients(n_clients=500, per_round=100, seed=7, round_=1)
    assert draws[0] == again and draws[0] != draws[1]
    assert all(d == sorted(set(d)) for d in draws)
    sizes = [len(d) for d in draws]
    assert len(set(sizes)) > 1  # the size is random ...
    assert np.mean(sizes) == pytest.approx(100, abs=6)  # ... around q n (±3 s.e.)
    other = PoissonSampling(rate=0.2).clients(
        n_clients=500, per_round=100, seed=8, round_=1
    )
    assert other != draws[0]


def test_fixed_sampling_is_the_old_sample_and_keyed_under_dp():
    plain = [
        FixedSampling().clients(n_clients=20, per_round=5, seed=3, round_=k)
        for k in range(1, 5)
    ]
    old = [
        sample_clients(n_clients=20, per_round=5, seed=3, round_=k) for k in range(1, 5)
    ]
    assert plain == old
    keyed = [
        FixedSampling(key=KEY).clients(n_clients=20, per_round=5, seed=3, round_=k)
        for k in range(1, 5)
    ]
    assert keyed != old and all(len(s) == 5 for s in keyed)


def test_central_mean_under_poisson_divides_by_the_expected_size():
    before = [np.zeros(4, np.float32)]
    updates = [
        ClientUpdate(c, [np.full(4, 0.1 * (c + 1), np.float32)], 10) for c in (0, 1)
    ]
    privacy = Privacy(
        "central", 10.0, 0.0, 1e-5, 10, 5, sampling="poisson", sampling_rate=0.4,
        noise_key="params_not_private",
    )  # fmt: skip
    weights, _, _ = aggregate_round(
        privacy, make_strategy("fedavg"), before, updates, {}, seed=0, round_=1,
        key=None,
    )  # fmt: skip
    # two clients came, four were expected (q n = 0.4 * 10): the sum over four
    np.testing.assert_allclose(weights[0], np.full(4, 0.3 / 4.0), rtol=1e-6)


def test_sampling_setting_is_checked():
    base = {"federation": {"clients": 4, "rounds": 1}, "round_chain": round_chain(1)}
    ok = parse_params(
        {**base, "federation": {**base["federation"], "sampling": "poisson"}}
    )
    assert ok.federation.sampling == "poisson"
    with pytest.raises(ParamsError, match="federation.sampling"):
        parse_params({**base, "federation": {**base["federation"], "sampling": "coin"}})


# ------------------------------------------------- through the round


def test_poisson_rounds_record_the_pld_epsilon_and_their_accountant(tmp_path: Path):
    summaries = run_federation(
        tmp_path,
        n_samples=400,
        clients=8,
        rounds=3,
        fraction_fit=0.5,
        sampling="poisson",
        privacy={"mechanism": "central", "noise_multiplier": 1.5},
        dp_key=KEY,
    )
    privacy = _poisson(1.5, 8, 0.5)
    eps = [s["privacy"]["epsilon"] for s in summaries]
    assert eps == [
        pytest.approx(central_epsilon(privacy, k), abs=1e-6) for k in (1, 2, 3)
    ]
    assert {s["privacy"]["accountant"] for s in summaries} == {"pld-poisson"}
    # the sample is keyed by the secret key: not recomputable from params.yaml
    selected = [s["clients_selected"] for s in summaries]
    keyed = PoissonSampling(0.5, key=KEY)
    public = PoissonSampling(0.5)
    assert selected == [
        keyed.clients(n_clients=8, per_round=4, seed=0, round_=k) for k in (1, 2, 3)
    ]
    assert selected != [
        public.clients(n_clients=8, per_round=4, seed=0, round_=k) for k in (1, 2, 3)
    ]


def test_fixed_rounds_record_the_rdp_accountant(tmp_path: Path):
    summaries = run_federation(
        tmp_path,
        n_samples=300,
        clients=5,
        rounds=1,
        privacy={"mechanism": "central", "noise_multiplier": 1.5},
    )
    assert summaries[0]["privacy"]["accountant"] == "rdp-fixed"


# ------------------------------------------------- what the fixed-size bound costs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "privacy.md"
REPLACE = NeighboringRelation.REPLACE_ONE


def _rdp_replace(event: dp_event.DpEvent, steps: int) -> float:
    accountant = RdpAccountant(neighboring_relation=REPLACE)
    accountant.compose(event, steps)
    return float(accountant.get_epsilon(1e-5))


def _pld(event: dp_event.DpEvent, relation: NeighboringRelation, steps: int) -> float:
    accountant = PLDAccountant(relation, value_discretization_interval=1e-4)
    accountant.compose(event, steps)
    return float(accountant.get_epsilon(1e-5))


@pytest.mark.parametrize("sigma", [4.0, SIGMA_FOR_1_FIXED])
def test_docs_state_what_the_fixed_size_bound_costs(sigma: float):
    """docs/privacy.md's table "What this bound costs" (100 clients, 20 rounds):
    each row recomputed here with dp_accounting alone; the recorded epsilon is
    its first column; the claims beside it (at q 0.5 above the tight figure of
    no sampling; at q 0.2 over twice the pair's) hold."""
    docs = DOCS.read_text()
    gauss = dp_event.GaussianDpEvent(sigma / 2)  # replace-one: the sum moves 2C
    full_rdp = _rdp_replace(dp_event.SelfComposedDpEvent(gauss, 20), 1)
    full_pld = _pld(dp_event.GaussianDpEvent(sigma), REPLACE, 20)  # 2C inside
    for m in (50, 20):
        q = m / 100
        fixed = _rdp_replace(
            dp_event.SampledWithoutReplacementDpEvent(100, m, gauss), 20
        )
        recorded = central_epsilon(Privacy("central", 1.0, sigma, 1e-5, 100, m), 20)
        assert recorded == pytest.approx(fixed, abs=1e-6)
        pair = _pld(dp_event.PoissonSampledDpEvent(q, gauss), ADD_REMOVE, 20)
        row = (
            f"| {sigma:g} | {q:g} | {fixed:.2f} | {full_rdp:.2f} / {full_pld:.2f} "
            f"| {pair:.2f} |"
        )
        assert row in docs, row
        if q == 0.5:
            assert full_pld < fixed < full_rdp
        else:
            assert 2.05 <= fixed / pair <= 2.35  # the docs: 2.1 to 2.3 times
