"""The label maps of label flipping (every class, or one source to one target),
apart so that the attacks and the poisoned data
(:mod:`~fedpipe.federation.attacks.flipped`) both read them without importing
each other."""

from __future__ import annotations

import numpy as np


def flipped(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Labels ``C - 1 - y`` (same dtype): class 0 becomes C - 1 and so on."""
    y = np.asarray(y)
    return (n_classes - 1 - y).astype(y.dtype)


def flipped_pair(y: np.ndarray, source: int, target: int) -> np.ndarray:
    """Labels with every ``source`` set to ``target`` (same dtype), the rest kept."""
    y = np.asarray(y)
    return np.where(y == source, target, y).astype(y.dtype)
