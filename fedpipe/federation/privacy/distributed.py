"""The distributed-DP accountant: epsilon of rounds released as a Skellam sum.

Each client adds ``Sk(mu / n)`` (:mod:`fedpipe.wire.skellam`) to its integer
update before secure aggregation masks it; the server only learns the masked
sum, which carries ``Sk(mu)`` per coordinate. Convention: ``Sk(mu) =
Poisson(mu) - Poisson(mu)``, variance ``2 mu`` per coordinate; ``mu``, ``l1`` and
``l2`` are in the integer (quantized) units the noise is added in.

One round is the multidimensional Skellam mechanism, whose Rényi DP of integer
order ``alpha > 1`` is bounded by (Agarwal, Kairouz and Liu, "The Skellam
Mechanism for Differentially Private Federated Learning", NeurIPS 2021, arXiv
2110.04995, Sec. 3, the multidimensional Skellam mechanism)::

    eps(alpha) <= alpha l2^2 / (4 mu)
                  + min(((2 alpha - 1) l2^2 + 6 l1) / (16 mu^2), 3 l1 / (4 mu))

with ``l1``, ``l2`` the L1 and L2 sensitivities of the sum. The first term is the
Gaussian mechanism's RDP at the same variance ``2 mu``; the second is what the
discreteness costs, and vanishes as ``mu`` grows. The same bound is implemented
as ``_skellam_rdp`` in google-research/federated's ``distributed_dp`` accounting
utilities (read here in the copy the Dordis project carries), stated in terms of
the sum's variance ``v = 2 mu``: ``alpha l2^2 / (2 v) + min(((2 alpha - 1) l2^2 +
6 l1) / (4 v^2), 3 l1 / (2 v))``, for integer orders. It is checked in
``tests/test_distributed_dp.py`` against the exact Rényi divergence of shifted
one-dimensional Skellam distributions, computed from the pmf.

Rounds compose by adding RDP; dp_accounting converts the total to (epsilon,
delta) (``rdp_privacy_accountant.compute_epsilon``). There is **no
amplification by sampling**: under secure aggregation the server knows which
clients took part in a round, so a client is accounted for every round it joined
as if released unsampled. ``l1`` and ``l2`` are those of the relation accounted:
one client's contribution for add/remove-one
(:func:`fedpipe.wire.skellam.integer_sensitivity`), twice that for replace-one.
Reducing the sum modulo secure aggregation's modulus is post-processing: it
costs accuracy when it wraps, not privacy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon as rdp_epsilon

__all__ = ["ACCOUNTANT", "DEFAULT_ORDERS", "skellam_epsilon", "skellam_rdp"]

#: the accountant a round record names for Skellam rounds
ACCOUNTANT = "rdp-skellam"

#: integer RDP orders (the bound holds for integers > 1): 2..64 and the tail of
#: dp_accounting's default orders
DEFAULT_ORDERS: tuple[int, ...] = (*range(2, 65), 128, 256, 512, 1024)


def _check_orders(orders: Sequence[float]) -> np.ndarray:
    alphas = np.asarray(orders, dtype=float)
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError("orders must be a non-empty sequence of integers > 1")
    bad = (alphas <= 1.0) | (alphas != np.floor(alphas)) | ~np.isfinite(alphas)
    if bad.any():
        raise ValueError(
            "the Skellam RDP bound holds for integer orders > 1; got "
            f"{alphas[bad].tolist()}"
        )
    return alphas


def skellam_rdp(
    orders: Sequence[float], *, l1: float, l2: float, mu: float
) -> np.ndarray:
    """The RDP of one release of a sum noised with ``Sk(mu)`` per coordinate.

    Parameters
    ----------
    orders
        Integer Rényi orders alpha > 1.
    l1, l2
        The L1 and L2 sensitivities of the sum, in integer units (>= 0):
        :func:`fedpipe.wire.skellam.integer_sensitivity` for add/remove-one.
    mu
        The sum's Skellam parameter (each Poisson's mean; variance ``2 mu`` per
        coordinate), in integer units. 0 is no noise: no bound (inf).

    Returns
    -------
    numpy.ndarray
        ``eps(alpha)`` (nats) at each order: the bound of Agarwal et al.
        (2021, Sec. 3) stated in the module docstring.

    Raises
    ------
    ValueError
        An order not an integer > 1, or a negative ``l1``, ``l2`` or ``mu``.
    """
    alphas = _check_orders(orders)
    if l1 < 0.0 or l2 < 0.0 or mu < 0.0:
        raise ValueError(f"l1, l2 and mu must be >= 0, got {l1!r}, {l2!r}, {mu!r}")
    if mu == 0.0:
        return np.full(alphas.shape, math.inf)
    l2_sq = l2 * l2
    gaussian = alphas * l2_sq / (4.0 * mu)
    discrete = np.minimum(
        ((2.0 * alphas - 1.0) * l2_sq + 6.0 * l1) / (16.0 * mu * mu),
        3.0 * l1 / (4.0 * mu),
    )
    return gaussian + discrete


def skellam_epsilon(
    *,
    rounds: Sequence[float],
    l1: float,
    l2: float,
    delta: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> tuple[float, float]:
    """Epsilon at ``delta`` of the rounds' Skellam releases, composed.

    Each round's RDP is :func:`skellam_rdp` at that round's ``mu``; the rounds'
    RDP add up and dp_accounting converts the total (no amplification by
    sampling: see the module docstring).

    Parameters
    ----------
    rounds
        The ``mu`` of each round's released sum, in integer units (one entry per
        round the accounted client took part in).
    l1, l2
        The sum's L1 and L2 sensitivities, in integer units, the same every round.
    delta
        The target delta (0 < delta < 1).
    orders
        Integer Rényi orders > 1 (default :data:`DEFAULT_ORDERS`).

    Returns
    -------
    tuple of float
        ``(epsilon, order)``: epsilon (nats) and the order that attains it.
        No rounds spend nothing: ``(0.0, nan)``; a round without noise
        (``mu`` 0): ``(inf, nan)``.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    alphas = _check_orders(orders)
    if len(rounds) == 0:
        return 0.0, math.nan
    total = np.zeros(alphas.shape)
    for mu in rounds:
        total += skellam_rdp(alphas, l1=l1, l2=l2, mu=mu)
    if not np.isfinite(total).any():
        return math.inf, math.nan
    epsilon, order = rdp_epsilon(alphas, total, delta)
    return float(epsilon), float(order)
