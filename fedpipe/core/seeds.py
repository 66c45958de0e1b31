"""Derived seeds: every random choice gets its own seed from the run's ``seed``.

Seeds are derived with :class:`numpy.random.SeedSequence` from the run seed and a
fixed purpose tag plus coordinates (round, client), never from global state, so
a round computed in a fresh process draws exactly what it draws mid-run.

Randomness that must stay secret (differential privacy's noise) is keyed as well
(:func:`keyed_rng`): a secret key's bits enter the ``SeedSequence`` entropy beside
the seed, purpose and coordinates, and the generator is seeded by the whole
sequence (not a 31-bit seed), so whoever lacks the key cannot regenerate it from
the versioned ``params.yaml`` however many seeds they try.
"""

from __future__ import annotations

import numpy as np

PURPOSES = {
    "heldout": 1,
    "partition": 2,
    "local_split": 3,
    "init": 4,
    "sample": 5,
    "train": 6,
    "finetune": 7,
    "ditto": 8,
    "centralized": 9,
    "evaluate": 10,
    # fedpipe.federation.failures (numbers far from the others: merged branches add
    # theirs)
    "dropout": 31,
    "slow": 32,
    "privacy": 11,
    "attack": 33,
    # federation.sampling: poisson (fedpipe.federation.round.PoissonSampling)
    "sample_poisson": 41,
    # fedpipe.data.partition.featureskew: each client's transform and noise
    "feature_skew": 47,
    # privacy.mechanism: dpsgd (fedpipe.model.training.ModelRunner's private fit):
    # each fit's Poisson batches and its Gaussian noise, keyed by the client's key
    "dpsgd_sample": 51,
    "dpsgd_noise": 52,
    # fedpipe.wire: what crosses the wire (secure aggregation's graph and its
    # stochastic rounding, compression's stochastic rounding, distributed DP's
    # integer noise), keyed by the client's key where the draw is the client's
    "secagg_graph": 61,
    "secagg_quantize": 62,
    "compress": 63,
    "skellam": 64,
}


def derive_seed(seed: int, purpose: str, *coords: int) -> int:
    """A 31-bit seed for ``purpose`` at ``coords`` (e.g. round, client)."""
    entropy = [int(seed), PURPOSES[purpose], *(int(c) for c in coords)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] & 0x7FFFFFFF)


def rng_for(seed: int, purpose: str, *coords: int) -> np.random.Generator:
    """A NumPy generator seeded by :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, purpose, *coords))


#: bytes of a secret key (:func:`keyed_rng`): 256 bits
KEY_BYTES = 32


def key_words(key: bytes) -> list[int]:
    """A key's bytes as big-endian 32-bit words (``SeedSequence`` entropy).

    Raises
    ------
    ValueError
        A key of other than :data:`KEY_BYTES` bytes.
    """
    if len(key) != KEY_BYTES:
        raise ValueError(f"a secret key has {KEY_BYTES} bytes, got {len(key)}")
    return [int(w) for w in np.frombuffer(key, dtype=">u4")]


def keyed_rng(key: bytes, seed: int, purpose: str, *coords: int) -> np.random.Generator:
    """A generator for ``purpose`` at ``coords`` that only the holder of ``key``
    can regenerate: seeded by the full ``SeedSequence`` of the key's 256 bits,
    the run seed, the purpose tag and the coordinates (no 31-bit truncation)."""
    entropy = [*key_words(key), int(seed), PURPOSES[purpose], *(int(c) for c in coords)]
    return np.random.default_rng(np.random.SeedSequence(entropy))
