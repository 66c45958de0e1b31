"""Local DP on the client's side: the clip and the noise a client adds to its own
reply before it leaves the client's job (``privacy.mechanism: local``).

The client's job (:func:`fedpipe.model.trainer.run_job`, in this process, in a
cohort or on a Dask worker) trains, then :func:`released` turns its weights into
``w_global + clip(w - w_global, C) + N(0, (sigma C)^2)`` (float64, layer by
layer). The noise is drawn from a generator keyed by the client's own key,
``HMAC-SHA256(project key, "fedpipe/local-dp/client/<id>")``
(:func:`client_key`), derived here, inside the job: the server's aggregation
never receives a key under local DP, and what the rounds record (params.yaml,
the weights, the metrics) does not give the noise away. With
``privacy.noise_key: params_not_private`` (no key) the noise derives from the
seed alone, ``rng_for(seed, "privacy", round, client)``: anyone with
params.yaml regenerates it, and every record says the guarantee does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.client.base import ClientTask, LocalDP
from fedpipe.core.secretkey import derived_key
from fedpipe.core.seeds import keyed_rng, rng_for
from fedpipe.strategy.clipping import clipped_with_norm

Weights = list[np.ndarray]

#: the label of a client's local-DP key (:func:`client_key`)
LOCAL_KEY_LABEL = "fedpipe/local-dp/client"


def client_key(key: bytes, client: int) -> bytes:
    """Client ``client``'s own local-DP key, derived from the project key."""
    return derived_key(key, LOCAL_KEY_LABEL, client)


def local_rng(
    key: bytes | None, seed: int, round_: int, client: int
) -> np.random.Generator:
    """Client ``client``'s local-DP noise generator in ``round_``: keyed by
    :func:`client_key` (``key``: the project's key), or from the seed alone
    (``key`` None: ``privacy.noise_key: params_not_private``)."""
    if key is None:
        return rng_for(seed, "privacy", round_, client)
    return keyed_rng(client_key(key, client), seed, "privacy", round_, client)


def locally_noised(
    before: Sequence[np.ndarray],
    weights: Sequence[np.ndarray],
    *,
    clip_norm: float,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> tuple[Weights, float]:
    """``before + clip(weights - before, clip_norm) + N(0, (sigma C)^2)`` in
    float64, and the delta's norm before clipping."""
    delta = [
        np.asarray(w, dtype=np.float64) - np.asarray(g, dtype=np.float64)
        for w, g in zip(weights, before, strict=True)
    ]
    clipped, norm = clipped_with_norm(delta, clip_norm)
    std = noise_multiplier * clip_norm
    noise = [rng.normal(0.0, std, size=np.shape(g)) for g in before]
    sent = [
        np.asarray(g, dtype=np.float64) + d + z
        for g, d, z in zip(before, clipped, noise, strict=True)
    ]
    return sent, norm


def released(dp: LocalDP, task: ClientTask, weights: Sequence[np.ndarray]) -> Weights:
    """What the client of ``task`` sends under local DP: its ``weights`` clipped
    around the global weights it received and noised with its own key."""
    sent, _ = locally_noised(
        task.global_weights,
        weights,
        clip_norm=dp.clip_norm,
        noise_multiplier=dp.noise_multiplier,
        rng=local_rng(dp.key, task.seed, task.round, task.client),
    )
    return sent
