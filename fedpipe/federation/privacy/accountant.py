"""The privacy accountant: epsilon at ``privacy.delta`` after each round.

Google's ``dp_accounting`` (Rényi DP, Mironov 2017) does the arithmetic; this
module says which mechanism a round is:

* **central, fixed size** (``federation.sampling: fixed``, the default; the
  ``rdp-fixed`` accountant) -- the round samples m of the n clients uniformly *without
  replacement* (what :func:`fedpipe.federation.round.sample_clients` does), then
  releases the sum of clipped updates plus Gaussian noise. That is dp_accounting's
  ``SampledWithoutReplacementDpEvent`` (Wang, Balle and Kasiviswanathan, 2019,
  Theorem 27), which holds for the *replace-one* relation: one client's data
  replaced by another's. Replacing a client moves the clipped sum by up to 2C, so
  the Gaussian event's multiplier (noise std over sensitivity) is sigma / 2. With
  adaptive clipping the round also releases the noised clipped count, whose
  sensitivity under replacement is 1 (a centred bit of 1/2 becomes -1/2): the round
  is the composition of both Gaussians, as Andrew et al. (2021) account it, and
  together they spend exactly what sigma alone does (multipliers sigma_D / 2 and
  z_b / 2 compose to sigma / 2).
* **central, Poisson** (``federation.sampling: poisson``) -- each client joins
  the round independently with probability q; the server releases the sum of
  the sampled clients' clipped updates plus Gaussian noise, divided by the
  expected size q n. Adding or removing one client moves that sum by at most C,
  so under the *add/remove-one* relation the round is dp_accounting's
  ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``, accounted with the
  privacy-loss-distribution (PLD) accountant, which is tight up to its
  (pessimistic) discretization: the ``pld-poisson`` accountant. With adaptive
  clipping the centred clipped count (each client's ``b_i - 1/2``, sensitivity
  1/2, noise std z_b / 2: multiplier z_b) adds a second Gaussian released with
  the same sample; two Gaussians on the same client are one Gaussian of
  multiplier ``(sigma_D^-2 + z_b^-2)^(-1/2)`` (the worst case moves both at
  once), which is sigma itself (Andrew et al., 2021, Sec. 3.1) and is what the
  PLD accountant composes.
* **local** -- each client releases its own noised update to the server, which
  knows who was sampled: no amplification by sampling. A client's epsilon is the
  Gaussian mechanism (multiplier sigma / 2, again replace-one) composed over the
  rounds it took part in; the run reports the worst client's.

Rounds compose: epsilon after round K is that of K rounds' events. Every round
record names its accountant (:attr:`fedpipe.config.privacy.Privacy.accountant`),
and ``target_epsilon`` stops and :func:`noise_for_epsilon` calibrates with the
same one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import dp_accounting
import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon as rdp_epsilon

from fedpipe.config.privacy import Privacy
from fedpipe.core.errors import FederationStopped
from fedpipe.federation.privacy.mechanism import COUNT_SENSITIVITY

NeighborRel = dp_accounting.privacy_accountant.NeighboringRelation

#: replace-one doubles a clipped sum's L2 sensitivity (C -> 2C)
REPLACE_ONE_SENSITIVITY = 2.0


class PrivacyBudgetExceeded(FederationStopped, ValueError):
    """Running the next round would spend more than ``privacy.target_epsilon``
    (the federation stops before it: :class:`FederationStopped`)."""


def round_event(privacy: Privacy) -> dp_event.DpEvent:
    """The DP event of one central round (sampling, then the Gaussian release):
    under fixed-size sampling for replace-one (:func:`_fixed_round_event`), under
    Poisson sampling for add/remove-one (:func:`_poisson_round_event`)."""
    return _ROUND_EVENTS[privacy.sampling](privacy)


def poisson_multiplier(privacy: Privacy) -> float:
    """The Gaussian multiplier of one Poisson round under add/remove-one: sigma
    (the update's noise std sigma_D C over its sensitivity C), or with adaptive
    clipping the update and the centred clipped count together,
    ``(sigma_D^-2 + z_b^-2)^(-1/2)`` (the count's noise std z_b / 2 over its
    sensitivity 1/2, :data:`~fedpipe.federation.privacy.mechanism.COUNT_SENSITIVITY`),
    which equals sigma up to rounding."""
    sigma = privacy.update_multiplier
    if not privacy.adaptive_clip:
        return sigma
    count = privacy.count_multiplier / 2.0 / COUNT_SENSITIVITY
    return float((sigma**-2 + count**-2) ** -0.5)


def _poisson_round_event(privacy: Privacy) -> dp_event.DpEvent:
    return dp_event.PoissonSampledDpEvent(
        privacy.rate, dp_event.GaussianDpEvent(poisson_multiplier(privacy))
    )


def _fixed_round_event(privacy: Privacy) -> dp_event.DpEvent:
    release: dp_event.DpEvent = dp_event.GaussianDpEvent(
        privacy.update_multiplier / REPLACE_ONE_SENSITIVITY
    )
    if privacy.adaptive_clip:
        # the centred count's std z_b / 2 over its replace-one sensitivity 1
        count = dp_event.GaussianDpEvent(
            privacy.count_multiplier
            / 2.0
            / (REPLACE_ONE_SENSITIVITY * COUNT_SENSITIVITY)
        )
        release = dp_event.ComposedDpEvent([release, count])
    return dp_event.SampledWithoutReplacementDpEvent(
        source_dataset_size=privacy.n_clients,
        sample_size=privacy.per_round,
        event=release,
    )


_ROUND_EVENTS: dict[str, Callable[[Privacy], dp_event.DpEvent]] = {
    "fixed": _fixed_round_event,
    "poisson": _poisson_round_event,
}


def composed_epsilon(
    event: dp_event.DpEvent,
    count: int,
    delta: float,
    *,
    relation: NeighborRel = NeighborRel.REPLACE_ONE,
) -> float:
    """Epsilon at ``delta`` of ``event`` composed ``count`` times (RDP)."""
    if count == 0:
        return 0.0
    accountant = RdpAccountant(neighboring_relation=relation)
    accountant.compose(event, count)
    return float(accountant.get_epsilon(delta))


def central_epsilon(privacy: Privacy, rounds: int) -> float:
    """Epsilon after ``rounds`` central rounds (inf without noise).

    The same number as :func:`composed_epsilon` of :func:`round_event` (RDP
    composes by adding): one round's RDP curve is computed once per setting and
    scaled by the rounds, so checking the budget every round costs nothing.
    """
    if privacy.noise_multiplier == 0.0:
        return math.inf if rounds else 0.0
    if rounds == 0:
        return 0.0
    if privacy.sampling == "poisson":
        return _pld_epsilon(privacy, rounds)
    orders, curve = _round_rdp(privacy)
    epsilon, _ = rdp_epsilon(orders, rounds * curve, privacy.delta)
    return float(epsilon)


#: PLD's grid of privacy-loss values (dp_accounting's default); its rounding is
#: pessimistic, so the epsilon is an upper bound
PLD_DISCRETIZATION = 1e-4


def pld_accountant() -> PLDAccountant:
    """The PLD accountant of Poisson rounds (add/remove-one)."""
    return PLDAccountant(
        neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE,
        value_discretization_interval=PLD_DISCRETIZATION,
    )


@functools.lru_cache(maxsize=64)
def _pld_epsilon(privacy: Privacy, rounds: int) -> float:
    """Epsilon of ``rounds`` Poisson rounds at ``privacy.delta`` (PLD)."""
    accountant = pld_accountant()
    accountant.compose(round_event(privacy), rounds)
    return float(accountant.get_epsilon(privacy.delta))


@functools.lru_cache(maxsize=32)
def _round_rdp(privacy: Privacy) -> tuple[np.ndarray, np.ndarray]:
    accountant = RdpAccountant(neighboring_relation=NeighborRel.REPLACE_ONE)
    accountant.compose(round_event(privacy))
    return accountant.orders, accountant.rdp


def local_epsilon(privacy: Privacy, participations: int) -> float:
    """Epsilon of a client that sent ``participations`` locally noised updates."""
    if privacy.noise_multiplier == 0.0:
        return math.inf if participations else 0.0
    release = dp_event.GaussianDpEvent(
        privacy.noise_multiplier / REPLACE_ONE_SENSITIVITY
    )
    return composed_epsilon(release, participations, privacy.delta)


Sampler = Callable[[int], Sequence[int]]
"""The clients sampled in round k (for local DP's participation counts)."""


def epsilon_after(privacy: Privacy, round_: int, sampled: Sampler) -> float:
    """Epsilon at ``privacy.delta`` once rounds 1..``round_`` have run."""
    if privacy.mechanism == "central":
        return central_epsilon(privacy, round_)
    counts = [0] * privacy.n_clients
    for k in range(1, round_ + 1):
        for c in sampled(k):
            counts[c] += 1
    return local_epsilon(privacy, max(counts, default=0))


def check_budget(privacy: Privacy, round_: int, sampled: Sampler) -> float:
    """Epsilon after ``round_``, or :class:`PrivacyBudgetExceeded` if running it
    would pass ``privacy.target_epsilon`` (one line: the round, the budget, the
    rounds kept)."""
    spent = epsilon_after(privacy, round_, sampled)
    target = privacy.target_epsilon
    if target is None or spent <= target:
        return spent
    if round_ == 1:
        kept = "no round kept. Raise privacy.noise_multiplier or privacy.target_epsilon"
    else:
        before = epsilon_after(privacy, round_ - 1, sampled)
        kept = (
            f"rounds 1..{round_ - 1} kept (ε {before:.3g}). Set federation.rounds: "
            f"{round_ - 1} to finish with a summary, or raise "
            "privacy.noise_multiplier / privacy.target_epsilon"
        )
    raise PrivacyBudgetExceeded(
        f"privacy.target_epsilon={target:g} reached: round {round_} would spend "
        f"ε {spent:.3g} at δ {privacy.delta:g}, so the federation stopped before "
        f"it; {kept}",
        round_=round_,
    )


def noise_for_epsilon(
    target: float,
    *,
    rounds: int,
    delta: float,
    n_clients: int,
    per_round: int,
    sampling: str = "fixed",
    rate: float | None = None,
) -> float:
    """The smallest sigma whose central rounds spend at most ``target`` after
    ``rounds`` rounds (fixed clipping; dp_accounting's calibration), with the
    accountant the rounds report: RDP for ``sampling`` ``fixed``, PLD for
    ``poisson`` (``rate``: q)."""

    def event_for(sampling: str) -> Callable[[float], dp_event.DpEvent]:
        def event(sigma: float) -> dp_event.DpEvent:
            p = Privacy(
                "central", 1.0, sigma, delta, n_clients, per_round,
                sampling=sampling, sampling_rate=rate,
            )  # fmt: skip
            return dp_event.SelfComposedDpEvent(round_event(p), rounds)

        return event

    def rdp() -> RdpAccountant:
        if sampling != "poisson":
            return RdpAccountant(neighboring_relation=NeighborRel.REPLACE_ONE)
        # a bracket for PLD: integer orders (the fractional ones of Poisson
        # sampling fail to converge at small sigma, and warn)
        return RdpAccountant(
            orders=list(range(2, 257)),
            neighboring_relation=NeighborRel.ADD_OR_REMOVE_ONE,
        )

    sigma_rdp = float(
        dp_accounting.calibrate_dp_mechanism(
            rdp,
            event_for(sampling),
            target,
            delta,
            bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-2, 1.0),
            tol=1e-4,
        )
    )
    if sampling != "poisson":
        return sigma_rdp
    # PLD is tighter than RDP on the same event (both bound it): its sigma is
    # below RDP's, and searching from there keeps PLD off tiny sigmas, whose
    # loss distributions are huge
    return float(
        dp_accounting.calibrate_dp_mechanism(
            pld_accountant,
            event_for(sampling),
            target,
            delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(
                sigma_rdp / 4.0, sigma_rdp * 1.05
            ),
            tol=1e-4,
        )
    )


# ---------------------------------------------------------------- record level


@functools.lru_cache(maxsize=4096)
def dpsgd_epsilon(
    rate: float, noise_multiplier: float, steps: int, delta: float
) -> float:
    """Epsilon at ``delta`` of ``steps`` DP-SGD steps of one client
    (``privacy.mechanism: dpsgd``, the ``pld-poisson-records`` accountant).

    Each step samples every record with probability ``rate`` (q = batch / n,
    :func:`fedpipe.model.training.poisson_batches`) and releases the sum of the
    sampled records' clipped gradients plus Gaussian noise of std sigma C:
    ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` under add/remove-one
    of a record, composed ``steps`` times with the PLD accountant (as the
    central Poisson rounds; TensorFlow Privacy's and Opacus's DP-SGD event).
    0 steps spend nothing; sigma 0 is no bound (inf).
    """
    if steps == 0:
        return 0.0
    if noise_multiplier == 0.0:
        return math.inf
    accountant = pld_accountant()
    event = dp_event.PoissonSampledDpEvent(
        rate, dp_event.GaussianDpEvent(noise_multiplier)
    )
    accountant.compose(event, steps)
    return float(accountant.get_epsilon(delta))


def dpsgd_noise_for_epsilon(
    target: float, *, rate: float, steps: int, delta: float
) -> float:
    """The smallest sigma whose ``steps`` DP-SGD steps at sampling rate ``rate``
    spend at most ``target`` at ``delta`` (:func:`dpsgd_epsilon`'s PLD
    accountant inverted by dp_accounting's calibration; for planning a run:
    ``privacy.noise_multiplier`` for a client's planned rounds)."""

    def event(sigma: float) -> dp_event.DpEvent:
        step = dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma))
        return dp_event.SelfComposedDpEvent(step, steps)

    return float(
        dp_accounting.calibrate_dp_mechanism(
            pld_accountant,
            event,
            target,
            delta,
            bracket_interval=dp_accounting.LowerEndpointAndGuess(0.3, 1.0),
            tol=1e-4,
        )
    )
