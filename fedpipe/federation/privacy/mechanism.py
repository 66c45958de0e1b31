"""The privacy mechanisms on a round's updates: clipping, noise, adaptive clip.

Central DP-FedAvg (McMahan et al., 2018, "Learning differentially private
recurrent language models"): each client's update delta ``w_k - w_global`` is
clipped to L2 norm C over all layers; the clipped deltas are summed *unweighted*,
Gaussian noise ``N(0, (sigma C)^2)`` is added to every coordinate of the sum, and
the sum is divided by the expected number of clients per round m (a fixed
denominator, so the sensitivity is C / m whoever was sampled; under Poisson
sampling, ``federation.sampling: poisson``, the sum runs over a random set and
is divided by its expected size q n: sensitivity C / (q n) for one client added
or removed). The strategy's
server step then takes that one mean delta as its only update: FedAvg applies
it, FedAvgM / FedAdam / FedYogi / FedAdagrad use it as their pseudo-gradient.

Local DP: each client clips its delta to C and adds its own ``N(0, (sigma C)^2)``
before sending, inside its own job (:mod:`fedpipe.client.localdp`, on a Dask
worker there); the strategy aggregates the noised updates as received.

Adaptive clipping (Andrew et al., 2021, "Differentially private learning with
adaptive clipping"): each client also reports whether its delta was inside the
clip, *centred*: ``b_i - 1/2`` (+1/2 inside, -1/2 outside), so one client added
or removed moves their sum by 1/2 (TensorFlow Privacy's
``QuantileEstimatorQuery`` and TFF's ``gaussian_adaptive`` do the same). The
server adds ``N(0, (z_b / 2)^2)`` to that sum (noise multiplier z_b on
sensitivity 1/2), takes the noised share inside
``b = (sum_i (b_i - 1/2) + noise) / m + 1/2`` and moves the clip geometrically,
``C <- C exp(-eta (b - gamma))`` with gamma ``privacy.target_quantile``. The clip
lives in the server state (``privacy/clip``), so a round computed in a fresh
process uses the same one.

All arithmetic is float64 in client order. Noise is keyed by a secret
(:func:`privacy_rng`): the project's key file (``privacy.noise_key: secret``,
the default) enters the generator's entropy with the seed and the round, so the
owner of the key reproduces a run bit for bit and nobody with ``params.yaml`` and
the published weights can regenerate (and subtract) the noise. Local DP draws
each client's noise, in the client's job, from a key of that client's own (HMAC
of the project key and its id, :func:`client_key`), which the records and the
other clients' keys do not give away; the server's aggregation holds no key.
``privacy.noise_key: params_not_private`` draws from ``rng_for(seed,
"privacy", round, *client)`` alone, for debugging: then the guarantee does not
hold, and every round record says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpipe.client.localdp import LOCAL_KEY_LABEL, client_key, local_rng
from fedpipe.config.privacy import Privacy
from fedpipe.core.seeds import keyed_rng, rng_for
from fedpipe.strategy.aggregate import Weights
from fedpipe.strategy.clipping import clipped_with_norm, update_norm

__all__ = [
    "CLIP_KEY",
    "COUNT_SENSITIVITY",
    "LOCAL_KEY_LABEL",
    "Clipped",
    "centred_count",
    "client_key",
    "clip_to_norm",
    "clipped_deltas",
    "gaussian_like",
    "global_norm",
    "next_clip",
    "noised_mean",
    "privacy_rng",
]

#: server-state key of the adaptive clip norm (a float64 scalar)
CLIP_KEY = "privacy/clip"


@dataclass(frozen=True)
class Clipped:
    """Client deltas after clipping, with what the doctor reads of them.

    Attributes
    ----------
    deltas : list of Weights
        Each client's clipped delta (float64), in client order.
    norms : list of float
        Each client's delta norm before clipping.
    clip : float
        The clip norm C used.
    """

    deltas: list[Weights]
    norms: list[float]
    clip: float

    @property
    def inside(self) -> int:
        """Clients whose delta was not scaled down (norm <= C)."""
        return sum(n <= self.clip for n in self.norms)


global_norm = update_norm
"""L2 norm over every layer together (float64): the clipping's own norm."""


def clip_to_norm(delta: Sequence[np.ndarray], clip: float) -> tuple[Weights, float]:
    """``delta`` in float64 scaled to L2 norm at most ``clip`` (over all layers),
    and its norm before: ``delta * min(1, clip / ||delta||)``, by the one
    clipping (:func:`fedpipe.strategy.clipping.clipped_with_norm`)."""
    return clipped_with_norm([np.asarray(d, dtype=np.float64) for d in delta], clip)


def clipped_deltas(before: Weights, updates: Sequence[Weights], clip: float) -> Clipped:
    """Every client's ``w_k - w_global``, clipped to ``clip``."""
    deltas, norms = [], []
    for weights in updates:
        delta = [
            np.asarray(w, dtype=np.float64) - np.asarray(g, dtype=np.float64)
            for w, g in zip(weights, before, strict=True)
        ]
        clipped, norm = clip_to_norm(delta, clip)
        deltas.append(clipped)
        norms.append(norm)
    return Clipped(deltas, norms, clip)


def gaussian_like(
    rng: np.random.Generator, layers: Sequence[np.ndarray], std: float
) -> Weights:
    """``N(0, std^2)`` noise shaped like ``layers`` (float64), layer by layer."""
    return [rng.normal(0.0, std, size=np.shape(a)) for a in layers]


def noised_mean(
    clipped: Clipped, privacy: Privacy, rng: np.random.Generator
) -> Weights:
    """``(sum_k clipped_k + N(0, (sigma_Delta C)^2)) / m``: central DP-FedAvg's
    mean delta, over the expected (fixed) number of clients per round m
    (:attr:`Privacy.expected_clients`: m, or q n under Poisson sampling, where
    the sum runs over a random set and the denominator stays q n)."""
    total = [np.zeros_like(d) for d in clipped.deltas[0]]
    for delta in clipped.deltas:
        total = [t + d for t, d in zip(total, delta, strict=True)]
    std = privacy.update_multiplier * clipped.clip
    noise = gaussian_like(rng, total, std)
    m = privacy.expected_clients
    return [(t + z) / m for t, z in zip(total, noise, strict=True)]


#: L2 sensitivity of the centred clipped count under add/remove-one: a client's
#: ``b_i - 1/2`` is +-1/2 (under replace-one it moves by 1: +1/2 to -1/2)
COUNT_SENSITIVITY = 0.5


def centred_count(clipped: Clipped) -> float:
    """``sum_i (b_i - 1/2)``: clients inside the clip less half the sampled
    clients (exact in float64: integers and halves)."""
    return clipped.inside - 0.5 * len(clipped.norms)


def next_clip(clipped: Clipped, privacy: Privacy, rng: np.random.Generator) -> float:
    """Andrew et al.'s geometric step: the clip for the next round, from the
    noised share of clients inside this round's clip, counted centred
    (:func:`centred_count`) so that its noise ``N(0, (z_b / 2)^2)`` has
    multiplier z_b over the sensitivity 1/2 that the accountant composes."""
    noise = rng.normal(0.0, privacy.count_multiplier / 2.0)
    share = (centred_count(clipped) + noise) / privacy.expected_clients + 0.5
    return clipped.clip * math.exp(-privacy.clip_lr * (share - privacy.target_quantile))


def privacy_rng(
    seed: int, round_: int, *client: int, key: bytes | None
) -> np.random.Generator:
    """The round's noise generator (central DP), or client ``client``'s (local
    DP: the generator the client's own job draws from,
    :func:`fedpipe.client.localdp.local_rng`, keyed by :func:`client_key`).

    ``key`` None is ``privacy.noise_key: params_not_private``: the noise then
    derives from the seed alone and anyone with ``params.yaml`` regenerates it.
    """
    if client:
        return local_rng(key, seed, round_, client[0])
    if key is None:
        return rng_for(seed, "privacy", round_)
    return keyed_rng(key, seed, "privacy", round_)
