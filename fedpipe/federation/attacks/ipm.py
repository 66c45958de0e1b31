"""Inner product manipulation: the negated, scaled mean of the benign updates."""

from __future__ import annotations

from collections.abc import Sequence

from fedpipe.core.component import Setting
from fedpipe.federation.attacks.base import Attack, Weights, stacked

EPSILON = Setting(
    "epsilon",
    float,
    gt=0.0,
    help="sends -epsilon x the benign mean (null: 2(n-m)/m, reverses an "
    "equally weighted mean)",
)


def reversing_epsilon(n: int, m: int) -> float:
    """The default ``ε = 2 (n - m) / m`` for ``m`` attackers among ``n`` updates.

    With equal weights the mean of ``n - m`` benign updates ``μ`` and ``m``
    copies of ``-ε μ`` is ``μ (n - m - m ε) / n``: its inner product with ``μ``
    turns negative only for ``ε > (n - m) / m`` (Xie et al.'s condition against
    the mean). Twice that bound makes the mean exactly ``-(n - m) / n μ``: the
    benign clients' contribution, reversed.

    Examples
    --------
    >>> reversing_epsilon(20, 4)
    8.0
    """
    return 2.0 * (n - m) / max(m, 1)


class Ipm(Attack):
    """Every malicious client sends ``-ε μ`` (omniscient).

    ``μ`` is the mean of the round's benign updates. Xie, Koyejo and Gupta
    (UAI 2019), "Fall of Empires: Breaking Byzantine-tolerant SGD by Inner
    Product Manipulation", https://arxiv.org/abs/1903.03936: against the mean
    the attack needs ``ε > (n - m) / m`` to turn the aggregate's inner product
    with ``μ`` negative (4 for 4 attackers among 20); a small ε (they use 0.1
    against Krum-like rules) only shrinks FedAvg's update. The default computes
    ε per round from the round's counts (:func:`reversing_epsilon`: 8 for 4
    among 20), which reverses an *equally weighted* mean whatever the share.
    FedAvg weights updates by sample count: where the attackers hold a smaller
    share of the samples than of the clients (quantity skew), their weight can
    fall short of the reversal (measured: 7 of 60 seeds under quantity skew
    σ 1.0 not reversed); set ``attack.epsilon`` for a fixed, larger one.

    Parameters
    ----------
    epsilon : float or None, default None
        ``ε > 0`` (``attack.epsilon``); None: :func:`reversing_epsilon` of the
        round's ``n`` updates and ``m`` attackers.
    """

    name = "ipm"
    settings = (EPSILON,)
    omniscient = True

    def __init__(self, *, epsilon: float | None = None) -> None:
        self.epsilon = self.checked(EPSILON, epsilon)

    def forge_shared(
        self, benign: Sequence[Weights], *, n_updates: int, n_malicious: int
    ) -> Weights:
        epsilon = (
            reversing_epsilon(n_updates, n_malicious)
            if self.epsilon is None
            else self.epsilon
        )
        return [-epsilon * s.mean(axis=0) for s in stacked(benign)]
