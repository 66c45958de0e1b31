"""The label map of label flipping, apart so that the attack and the poisoned data
(:mod:`~fedpipe.federation.attacks.flipped`) both read it without importing each
other."""

from __future__ import annotations

import numpy as np


def flipped(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Labels ``C - 1 - y`` (same dtype): class 0 becomes C - 1 and so on."""
    y = np.asarray(y)
    return (n_classes - 1 - y).astype(y.dtype)
