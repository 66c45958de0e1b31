"""Skellam noise: the client's side of distributed differential privacy.

Under secure aggregation the server only ever holds the sum of the clients'
(masked) integer updates, so the noise is added by the clients: each one adds
integer noise to its quantized update before masking it, and the sum of the
clients' noise is the noise of the released sum (Agarwal, Kairouz and Liu, "The
Skellam Mechanism for Differentially Private Federated Learning", NeurIPS 2021,
arXiv 2110.04995).

Convention, per coordinate: ``Sk(mu) = Poisson(mu) - Poisson(mu)`` (two
independent Poisson variables of mean ``mu``), of mean 0 and variance ``2 mu``.
Independent Skellam variables add: the sum of ``n`` clients' ``Sk(mu / n)`` is
``Sk(mu)`` exactly, so the released sum carries the noise the accountant
(:mod:`fedpipe.federation.privacy.distributed`) is told about, whoever took part.

A client's update is L2-clipped to ``C``, multiplied by the quantization scale
``s`` and stochastically rounded to integers; :func:`integer_sensitivity` bounds
what that integer vector can add to the sum, :func:`skellam_mu` turns a Gaussian
noise multiplier into the sum's ``mu`` and :func:`client_mu` splits it among the
clients. Draws come from a generator passed in (``fedpipe.core.seeds`` purpose
``skellam``, keyed by the client's key): nothing here touches global state.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["client_mu", "integer_sensitivity", "skellam_mu", "skellam_noise"]


def skellam_noise(
    rng: np.random.Generator, shape: int | tuple[int, ...], mu: float
) -> np.ndarray:
    """Symmetric Skellam noise ``Sk(mu)`` of ``shape``, one draw per coordinate.

    Parameters
    ----------
    rng
        The generator to draw from (a client's, seeded for purpose ``skellam``).
    shape
        Shape of the noise (that of the integer update it is added to).
    mu
        The mean of each of the two Poisson variables, in integer (quantized)
        units; the noise's variance per coordinate is ``2 mu``. 0 draws zeros.

    Returns
    -------
    numpy.ndarray
        ``int64`` noise ``Poisson(mu) - Poisson(mu)``, independent per coordinate.

    Raises
    ------
    ValueError
        ``mu`` negative or not finite.
    """
    if not (math.isfinite(mu) and mu >= 0.0):
        raise ValueError(f"Skellam mu must be finite and >= 0, got {mu!r}")
    plus = rng.poisson(mu, size=shape).astype(np.int64)
    minus = rng.poisson(mu, size=shape).astype(np.int64)
    return plus - minus


def integer_sensitivity(
    clip_norm: float, scale: float, dim: int
) -> tuple[float, float]:
    """The L1 and L2 norms one client's integer update can reach.

    The update is L2-clipped to ``clip_norm`` (C), multiplied by ``scale`` (s)
    and stochastically rounded: rounding moves each coordinate by less than 1,
    so the rounding error has L2 norm below ``sqrt(dim)`` and

    * ``l2 <= s C + sqrt(dim)`` (triangle inequality);
    * ``l1 <= sqrt(dim) l2`` (Cauchy-Schwarz), and ``l1 <= l2 ** 2`` because the
      vector is integer (``|x| <= x ** 2`` for every integer ``x``); the smaller
      of the two is returned.

    Both bound what adding or removing one client moves the integer sum by (the
    add/remove-one relation). For replace-one, the difference of two such
    vectors, double both (still an integer vector, so ``l1 <= l2 ** 2`` holds).

    Parameters
    ----------
    clip_norm
        C, the L2 clipping norm of an update, in model units (>= 0).
    scale
        s, integer units per model unit (> 0).
    dim
        d, the number of coordinates (>= 1).

    Returns
    -------
    tuple of float
        ``(l1, l2)``, in integer units.

    Raises
    ------
    ValueError
        A negative or non-finite ``clip_norm``, a ``scale`` not > 0, or a
        ``dim`` below 1.
    """
    if not (math.isfinite(clip_norm) and clip_norm >= 0.0):
        raise ValueError(f"clip_norm must be finite and >= 0, got {clip_norm!r}")
    if not (math.isfinite(scale) and scale > 0.0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    root_d = math.sqrt(dim)
    l2 = scale * clip_norm + root_d
    l1 = min(root_d * l2, l2 * l2)
    return float(l1), float(l2)


def skellam_mu(noise_multiplier: float, l2: float) -> float:
    """The ``mu`` of the released sum's noise for a Gaussian noise multiplier.

    ``Sk(mu)`` has standard deviation ``sqrt(2 mu)``; this is the ``mu`` at which
    it equals ``noise_multiplier * l2``, so ``noise_multiplier`` (z) means what it
    means for the Gaussian mechanism: noise std over L2 sensitivity.

    Parameters
    ----------
    noise_multiplier
        z, the noise std over ``l2`` (>= 0, dimensionless).
    l2
        The L2 sensitivity of the sum, in integer units (>= 0).

    Returns
    -------
    float
        ``(z l2) ** 2 / 2``, in integer units (variance ``2 mu`` per coordinate).
    """
    if noise_multiplier < 0.0 or l2 < 0.0:
        raise ValueError(
            f"noise_multiplier and l2 must be >= 0, got {noise_multiplier!r}, {l2!r}"
        )
    std = noise_multiplier * l2
    return float(std * std / 2.0)


def client_mu(mu: float, clients: int) -> float:
    """Each client's share of the sum's ``mu``: ``mu / clients``.

    ``clients`` independent ``Sk(mu / clients)`` add up to ``Sk(mu)``. If fewer
    clients' noise reaches the sum (a dropped client's masked update and noise
    are both absent), the sum holds less noise than ``mu``: account with the
    ``mu`` that was actually summed.

    Parameters
    ----------
    mu
        The released sum's ``mu``, in integer units (>= 0).
    clients
        The number of clients whose noise is summed (>= 1).

    Returns
    -------
    float
        ``mu / clients``, in integer units.
    """
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients!r}")
    if mu < 0.0:
        raise ValueError(f"mu must be >= 0, got {mu!r}")
    return float(mu) / clients
