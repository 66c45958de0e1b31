"""Derived seeds: every random choice gets its own seed from the run's ``seed``.

Seeds are derived with :class:`numpy.random.SeedSequence` from the run seed and a
fixed purpose tag plus coordinates (round, client), never from global state, so
a round computed in a fresh process draws exactly what it draws mid-run.
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
}


def derive_seed(seed: int, purpose: str, *coords: int) -> int:
    """A 31-bit seed for ``purpose`` at ``coords`` (e.g. round, client)."""
    entropy = [int(seed), PURPOSES[purpose], *(int(c) for c in coords)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] & 0x7FFFFFFF)


def rng_for(seed: int, purpose: str, *coords: int) -> np.random.Generator:
    """A NumPy generator seeded by :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, purpose, *coords))
