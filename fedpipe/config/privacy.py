"""What a run's differential privacy is: :class:`Privacy`, and the checks that
refuse settings that make no sense, before any work.

With ``central`` and ``local`` the unit of privacy is a **client** (client-level
DP, as DP-FedAvg of McMahan et al., 2018): neighbouring federations differ in one
client's whole data, so ``privacy.delta`` must be below ``1 / federation.clients``.
With ``dpsgd`` it is a **record** of a client (DP-SGD on every client, Abadi et
al., 2016): ``privacy.delta`` must be below ``1 / n`` for each client's n training
records (checked by the round, which knows n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fedpipe.core import registry
from fedpipe.core.errors import SettingError

#: Andrew et al. (2021): clipped-count noise std sigma_b = m / 20 for m clients a
#: round, i.e. a count noise multiplier z_b = 2 sigma_b = m / 10
DEFAULT_COUNT_NOISE_PER_CLIENT = 0.1


def count_multiplier(count_noise_multiplier: float | None, expected: float) -> float:
    """z_b: ``privacy.count_noise_multiplier``, or by default a tenth of the
    ``expected`` clients per round (m, or q n under Poisson sampling)."""
    if count_noise_multiplier is not None:
        return count_noise_multiplier
    return DEFAULT_COUNT_NOISE_PER_CLIENT * expected


@dataclass(frozen=True)
class Privacy:
    """A run's differential privacy (``privacy.*``), resolved for its federation.

    Attributes
    ----------
    mechanism : str
        ``central`` (the server clips each client's update delta to
        ``clip_norm``, sums them unweighted and adds Gaussian noise of std
        ``noise_multiplier * clip_norm`` to the sum) or ``local`` (each client
        clips and noises its own delta before sending).
    clip_norm : float
        L2 bound C on a client's update delta (over all layers); with
        ``adaptive_clip`` the value before round 1.
    noise_multiplier : float
        sigma: noise std over C. With ``adaptive_clip`` the effective
        multiplier of the update and the clipped count together (as TFF and
        Flower define it).
    delta : float
        The delta at which epsilon is reported.
    n_clients, per_round : int
        Clients in the federation (n) and sampled per round (m, without
        replacement: the sampling rate is q = m / n; with Poisson sampling m is
        only the federation's nominal count).
    target_epsilon : float or None
        Stop before the round that would spend more.
    adaptive_clip : bool
        Geometric clip update towards ``target_quantile`` of the update norms
        (Andrew et al., 2021) with learning rate ``clip_lr``.
    count_noise_multiplier : float or None
        z_b: noise multiplier of the clipped count (its std is z_b / 2 on the
        centred count ``sum_i (b_i - 1/2)``, whose sensitivity is 1/2); None:
        a tenth of the expected clients per round (m, or q n under Poisson
        sampling).
    noise_key : str
        ``secret``: the noise is keyed by the project's secret key (nobody
        without it can regenerate it); ``params_not_private``: derived from the
        seed alone, so the guarantee does not hold (debugging only).
    sampling : str
        ``federation.sampling``: ``fixed`` (m of n without replacement) or
        ``poisson`` (each client joins a round with probability
        ``sampling_rate``).
    sampling_rate : float or None
        q of Poisson sampling (``federation.fraction_fit``); None with ``fixed``.
    """

    mechanism: str
    clip_norm: float
    noise_multiplier: float
    delta: float
    n_clients: int
    per_round: int
    target_epsilon: float | None = None
    adaptive_clip: bool = False
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    count_noise_multiplier: float | None = None
    noise_key: str = "secret"
    sampling: str = "fixed"
    sampling_rate: float | None = None

    @property
    def rate(self) -> float:
        """q, the chance that a given client is in a round's sample."""
        if self.sampling == "poisson":
            assert self.sampling_rate is not None
            return self.sampling_rate
        return self.per_round / self.n_clients

    @property
    def expected_clients(self) -> float:
        """The fixed denominator of central DP's mean: m with fixed-size
        sampling, the expected sample size q n with Poisson sampling (so the
        mean's sensitivity is C / m, or C / (q n), whoever was sampled)."""
        if self.sampling == "poisson":
            return self.rate * self.n_clients
        return self.per_round

    @property
    def accountant(self) -> str:
        """Which accountant bounds epsilon: ``pld-poisson`` (central DP under
        Poisson sampling, add/remove-one, PLD), ``rdp-fixed`` (central DP under
        fixed-size sampling without replacement, replace-one, RDP) or
        ``rdp-local`` (local DP, each client's Gaussian releases, RDP)."""
        if self.mechanism == "local":
            return "rdp-local"
        if self.mechanism == "dpsgd":
            return "pld-poisson-records"
        if self.mechanism == "distributed":
            return "rdp-skellam"
        return "pld-poisson" if self.sampling == "poisson" else "rdp-fixed"

    @property
    def level(self) -> str:
        """``client`` (``central``, ``local``: one client's whole data is the
        unit of privacy) or ``record`` (``dpsgd``: one record of a client)."""
        return "record" if self.mechanism == "dpsgd" else "client"

    @property
    def keyed(self) -> bool:
        """Whether the noise is keyed by a secret (the guarantee can hold)."""
        return self.noise_key == "secret"

    @property
    def noised_by_clients(self) -> bool:
        """Whether each client noises its own update inside its job (``local``:
        the server aggregates what it receives and holds no key) rather than
        the server the aggregate (``central``) or the clients their gradients
        (``dpsgd``, :attr:`level` ``record``)."""
        return self.mechanism == "local"

    @property
    def count_multiplier(self) -> float:
        """z_b, the clipped count's noise multiplier (adaptive clipping)."""
        return count_multiplier(self.count_noise_multiplier, self.expected_clients)

    @property
    def update_multiplier(self) -> float:
        """The update's own noise multiplier sigma_Delta: sigma itself, or with
        adaptive clipping ``(sigma^-2 - z_b^-2)^(-1/2)``, so that update and the
        centred count (multiplier z_b) together spend exactly what sigma alone
        would (Andrew et al., Sec. 3.1; TFF's ``gaussian_adaptive``)."""
        sigma = self.noise_multiplier
        if not self.adaptive_clip or sigma == 0.0:
            return sigma
        return (sigma**-2 - self.count_multiplier**-2) ** -0.5


def check_privacy(
    *,
    mechanism: str | None,
    noise_multiplier: float,
    delta: float,
    adaptive_clip: bool,
    count_noise_multiplier: float | None,
    strategy: str,
    n_clients: int,
    per_round: int,
    cohort_size: int | str | None = None,
    personalization: str = "none",
    expected_clients: float | None = None,
) -> None:
    """Raise ValueError naming the ``privacy.*`` key when settings do not fit.

    Parameters
    ----------
    mechanism : str or None
        ``privacy.mechanism``; None: no privacy, nothing to check.
    strategy : str
        ``strategy.name``.
    n_clients, per_round : int
        ``federation.clients`` and the clients sampled per round.
    cohort_size : int, "auto" or None
        ``train.cohort_size`` (vectorized cohorts have no DP-SGD step: a number
        above 1 is refused, ``auto`` trains one by one).
    personalization : str
        ``personalization.method``.
    expected_clients : float or None
        The expected clients per round (:attr:`Privacy.expected_clients`: q n
        under Poisson sampling); None: ``per_round``.
    """
    if mechanism is None:
        return
    if mechanism == "dpsgd":
        _check_dpsgd(adaptive_clip, cohort_size, personalization)
        return
    if delta >= 1.0 / n_clients:
        raise SettingError(
            f"privacy.delta={delta:g} must be < 1/federation.clients = "
            f"{1.0 / n_clients:g} (client-level DP: the unit of privacy is a client, "
            "and a delta of 1/n lets one client's data leak outright)"
        )
    never = _trait(strategy, "no_privacy")
    summed = mechanism in ("central", "distributed")  # the server sees one sum
    if never is not None or (summed and not _trait(strategy, "linear")):
        allowed = central_strategies() if summed else _any_but()
        raise SettingError(
            f"privacy.mechanism={mechanism} does not fit strategy.name={strategy!r}: "
            + _why_not(strategy)
            + f"; with privacy use strategy.name in {allowed}"
        )
    if adaptive_clip and mechanism != "central":
        raise SettingError(
            "privacy.adaptive_clip needs privacy.mechanism=central (the server "
            "counts the clipped updates); set privacy.adaptive_clip: false"
        )
    if adaptive_clip and noise_multiplier > 0.0:
        expected = per_round if expected_clients is None else expected_clients
        z_b = count_multiplier(count_noise_multiplier, expected)
        if not z_b > noise_multiplier:
            raise SettingError(
                f"privacy.count_noise_multiplier={z_b:g} (default: expected "
                f"clients per round / 10 = "
                f"{DEFAULT_COUNT_NOISE_PER_CLIENT * expected:g}) must exceed "
                f"privacy.noise_multiplier={noise_multiplier:g}: the clipped count "
                "spends part of the budget sigma stands for; raise it, or lower "
                "sigma, or use privacy.adaptive_clip: false"
            )


#: personalization methods that train on a client's records outside its round's
#: accounted fits (``finetune`` fine-tunes every scored client at evaluation)
DPSGD_UNACCOUNTED = ("finetune",)
#: personalization methods that need batch statistics (BatchNormalization), which
#: DP-SGD refuses: a record's gradient through them depends on the other records
DPSGD_BATCH_STATISTICS = ("fedbn",)
DPSGD_PERSONALIZATION = ("none", "fedper", "ditto")


def _check_dpsgd(
    adaptive_clip: bool, cohort_size: int | str | None, personalization: str
) -> None:
    """What record-level DP-SGD refuses (one line naming the keys).

    Every strategy fits: whatever a client sends is computed from its DP-SGD
    output (post-processing), so no server step can weaken the guarantee.
    """
    if adaptive_clip:
        raise SettingError(
            "privacy.adaptive_clip needs privacy.mechanism=central (the server "
            "counts the clipped updates); with privacy.mechanism=dpsgd each "
            "record's gradient is clipped to privacy.clip_norm: set "
            "privacy.adaptive_clip: false"
        )
    if isinstance(cohort_size, int) and cohort_size > 1:  # auto: one by one
        raise SettingError(
            f"privacy.mechanism=dpsgd does not fit train.cohort_size={cohort_size}: "
            "vectorized cohorts train without the per-record clipping and noise; "
            "set train.cohort_size: null"
        )
    if personalization in DPSGD_UNACCOUNTED:
        raise SettingError(
            f"privacy.mechanism=dpsgd does not fit personalization.method="
            f"{personalization}: it fine-tunes every scored client on its records "
            "at evaluation, outside the rounds' accounted steps; use "
            f"personalization.method in {', '.join(DPSGD_PERSONALIZATION)}"
        )
    if personalization in DPSGD_BATCH_STATISTICS:
        raise SettingError(
            f"privacy.mechanism=dpsgd does not fit personalization.method="
            f"{personalization}: it keeps BatchNormalization layers local, and "
            "DP-SGD cannot clip one record's gradient through batch statistics; "
            f"use personalization.method in {', '.join(DPSGD_PERSONALIZATION)}"
        )


def central_strategies() -> tuple[str, ...]:
    """The built-in strategies central DP fits: those whose server step is
    ``linear`` (it can take one noised mean update; FedAvg applies it, the server
    optimizers use it as their pseudo-gradient)."""
    return tuple(n for n, cls in registry.classes("strategy").items() if cls.linear)


def _any_but() -> str:
    """``any but scaffold``: the built-ins no mechanism covers (``no_privacy``)."""
    never = [n for n, cls in registry.classes("strategy").items() if cls.no_privacy]
    return "any but " + ", ".join(never)


def _trait(strategy: str, trait: str) -> Any:
    """A trait of the built-in strategy (None for the user's own: fedpipe does not
    load the user's code to check params)."""
    if not registry.is_builtin("strategy", strategy):
        return None
    return getattr(registry.get("strategy", strategy), trait)


def _why_not(strategy: str) -> str:
    never = _trait(strategy, "no_privacy")
    if never is not None:
        return str(never)
    if ":" in strategy:
        return "fedpipe cannot tell what your strategy does with the noised update"
    return (
        "a robust aggregator ranks or trims individual updates, which central DP "
        "never shows the server (it sees one noised sum)"
    )


def finite_or_inf(value: float) -> float | None:
    """``value`` for JSON: None for infinity (no privacy spent bound)."""
    return None if math.isinf(value) else value
