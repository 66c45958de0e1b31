"""The client's side of the wire: what its job sends in place of its weights.

A round step (:mod:`fedpipe.federation.wire`, secure aggregation's
:mod:`fedpipe.federation.secure`) gives each client's job an :class:`Uplink`;
the job (:func:`fedpipe.model.trainer.run_job`, here, in a cohort or on a Dask
worker) trains, applies local DP if any, then hands the weights to
:meth:`Uplink.send` and returns its :class:`~fedpipe.wire.compression.Payload`
instead of the weights: that payload is all that travels back (and all that a
Dask worker ships). The server's step decodes it, or, under secure aggregation,
adds it to the masked sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedpipe.client.base import ClientState, ClientTask
from fedpipe.core.secretkey import derived_key
from fedpipe.core.seeds import keyed_rng, rng_for
from fedpipe.strategy.clipping import clipped_with_norm
from fedpipe.wire.compression import Codec, Payload, with_error_feedback
from fedpipe.wire.secagg import (
    CLIENT_KEY_LABEL,
    PublicKeys,
    SecAggSettings,
    client_secrets,
    masked_input,
    quantize,
)
from fedpipe.wire.skellam import skellam_noise

Weights = list[np.ndarray]

#: the client-state namespace of error feedback's residual (``compression/000``)
RESIDUAL = "compression"


@dataclass(frozen=True)
class Sent:
    """What a client's job sends, and what the client keeps.

    Attributes
    ----------
    payload : Payload
        What crosses the wire (its ``nbytes`` are the round's uplink bytes).
    state : ClientState
        Namespaces the client keeps for its next round (error feedback's
        residual), laid over what its algorithm keeps.
    """

    payload: Payload
    state: ClientState = field(default_factory=dict)


class Uplink(Protocol):
    """How a client's reply crosses the wire (picklable: it travels in the job)."""

    def send(
        self, task: ClientTask, weights: Sequence[np.ndarray], n_samples: int
    ) -> Sent:
        """The payload for ``weights`` (trained from ``task.global_weights`` on
        ``n_samples`` records) and what the client keeps."""
        ...


def delta_of(task: ClientTask, weights: Sequence[np.ndarray]) -> Weights:
    """``weights - task.global_weights`` in float64, array by array."""
    return [
        np.asarray(w, dtype=np.float64) - np.asarray(g, dtype=np.float64)
        for w, g in zip(weights, task.global_weights, strict=True)
    ]


def applied(before: Sequence[np.ndarray], delta: Sequence[np.ndarray]) -> Weights:
    """The weights a decoded ``delta`` stands for: ``before + delta`` in float64,
    cast to each array's dtype (the model's float32)."""
    return [
        (np.asarray(g, dtype=np.float64) + d).astype(np.asarray(g).dtype)
        for g, d in zip(before, delta, strict=True)
    ]


@dataclass(frozen=True)
class CompressedUplink:
    """``compression.uplink``: the client's update (its weights less the global
    ones) through ``codec``, with error feedback's residual kept as client state
    (namespace :data:`RESIDUAL`) when ``error_feedback``. Stochastic rounding
    draws from ``rng_for(seed, "compress", round, client)``."""

    codec: Codec
    error_feedback: bool = False

    def send(
        self, task: ClientTask, weights: Sequence[np.ndarray], n_samples: int
    ) -> Sent:
        delta = delta_of(task, weights)
        rng = rng_for(task.seed, "compress", task.round, task.client)
        if not self.error_feedback:
            return Sent(self.codec.encode(delta, rng))
        payload, residual = with_error_feedback(
            self.codec, delta, residual_of(task.state, delta), rng
        )
        return Sent(
            payload, {RESIDUAL: {f"{i:03d}": r for i, r in enumerate(residual)}}
        )


def residual_of(
    state: Mapping[str, Mapping[str, np.ndarray]], like: Sequence[np.ndarray]
) -> Weights | None:
    """Error feedback's residual kept by the client (None before its first
    compressed round), laid out like ``like``."""
    kept = state.get(RESIDUAL)
    if not kept:
        return None
    return [np.asarray(kept[f"{i:03d}"], dtype=np.float64) for i in range(len(like))]


@dataclass(frozen=True)
class SecureUplink:
    """``secure_aggregation: secagg_plus``: the client's update as one masked
    integer vector (:func:`secure_vector`, then
    :func:`fedpipe.wire.secagg.masked_input` with its neighbours' advertised
    keys); its secrets derive from ``key`` inside the job
    (:func:`fedpipe.wire.secagg.client_secrets`).

    Attributes
    ----------
    settings : SecAggSettings
        The round's protocol settings (clipping range, bits).
    neighbour_keys : mapping of int to PublicKeys
        The client's neighbours in the round's graph, with their keys.
    key : bytes
        The project's secret key (each client's own derives from it).
    weight_scale : float or None
        Without DP: the update is weighted by ``n_samples * weight_scale`` (one
        over the federation's largest client) and the weight itself is the
        vector's first value, so the sum gives the weighted mean. None under
        distributed DP: unweighted and clipped to ``clip_norm``.
    clip_norm : float or None
        Distributed DP: the L2 bound C on the update.
    noise_mu : float
        Distributed DP: this client's share of the Skellam noise (mu of each
        Poisson; 0: none).
    keyed_noise : bool
        Whether the noise is keyed by the client's key (``privacy.noise_key:
        secret``) or derives from the seed (``params_not_private``).
    """

    settings: SecAggSettings
    neighbour_keys: Mapping[int, PublicKeys]
    key: bytes = field(repr=False)
    weight_scale: float | None = None
    clip_norm: float | None = None
    noise_mu: float = 0.0
    keyed_noise: bool = True

    def send(
        self, task: ClientTask, weights: Sequence[np.ndarray], n_samples: int
    ) -> Sent:
        vector = secure_vector(self, task, weights, n_samples)
        secrets = client_secrets(self.key, task.client, task.round)
        masked = masked_input(
            task.client, secrets, self.neighbour_keys, vector, task.round
        )
        return Sent(Payload(SECURE_CODEC, (masked,), ((int(masked.size),),)))


#: the codec name of a masked vector's payload
SECURE_CODEC = "secagg_plus"


def secure_vector(
    uplink: SecureUplink,
    task: ClientTask,
    weights: Sequence[np.ndarray],
    n_samples: int,
) -> np.ndarray:
    """The uint32 vector client ``task.client`` masks: its update (weights less
    the global ones, flattened) quantized by unbiased stochastic rounding
    (:func:`fedpipe.wire.secagg.quantize`, drawn from the client's own key), with
    the weight first (no DP) or clipped to C and noised with Skellam integers
    (distributed DP). What the plain, unmasked sum of the same vectors gives is
    what secure aggregation's sum gives, bit for bit.

    Raises
    ------
    ValueError
        The update holds NaN or inf: masked into the sum it would spoil it
        unseen, so the client sends nothing (it is left out as dropped).
    """
    flat = np.concatenate([d.ravel() for d in delta_of(task, weights)])
    if not np.isfinite(flat).all():
        raise ValueError(
            "non-finite values in the update: not masked into the secure sum"
        )
    own = derived_key(uplink.key, CLIENT_KEY_LABEL, task.client)
    rng = keyed_rng(own, task.seed, "secagg_quantize", task.round, task.client)
    if uplink.weight_scale is not None:
        w = n_samples * uplink.weight_scale
        values = np.concatenate([[w], w * flat])
    else:
        assert uplink.clip_norm is not None
        (values,), _ = clipped_with_norm([flat], uplink.clip_norm)
    s = uplink.settings
    q = quantize(
        values, clipping_range=s.clipping_range, bits=s.quantization_bits, rng=rng
    )
    if uplink.noise_mu <= 0.0:
        return q
    noise_rng = (
        keyed_rng(own, task.seed, "skellam", task.round, task.client)
        if uplink.keyed_noise
        else rng_for(task.seed, "skellam", task.round, task.client)
    )
    noise = skellam_noise(noise_rng, q.shape, uplink.noise_mu)
    return ((q.astype(np.int64) + noise) & 0xFFFFFFFF).astype(np.uint32)
