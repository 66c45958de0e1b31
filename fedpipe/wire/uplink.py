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
from fedpipe.core.seeds import rng_for
from fedpipe.wire.compression import Codec, Payload, with_error_feedback

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

    def send(self, task: ClientTask, weights: Sequence[np.ndarray], n_samples: int) -> Sent:
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

    def send(self, task: ClientTask, weights: Sequence[np.ndarray], n_samples: int) -> Sent:
        delta = delta_of(task, weights)
        rng = rng_for(task.seed, "compress", task.round, task.client)
        if not self.error_feedback:
            return Sent(self.codec.encode(delta, rng))
        payload, residual = with_error_feedback(
            self.codec, delta, residual_of(task.state, delta), rng
        )
        return Sent(payload, {RESIDUAL: {f"{i:03d}": r for i, r in enumerate(residual)}})


def residual_of(
    state: Mapping[str, Mapping[str, np.ndarray]], like: Sequence[np.ndarray]
) -> Weights | None:
    """Error feedback's residual kept by the client (None before its first
    compressed round), laid out like ``like``."""
    kept = state.get(RESIDUAL)
    if not kept:
        return None
    return [np.asarray(kept[f"{i:03d}"], dtype=np.float64) for i in range(len(like))]
