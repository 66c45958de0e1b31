"""Deliberate faults: the seed question's misweighted aggregation."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.federation.faults import misweighted_aggregate
from fedpipe.federation.health import effective_weights


def test_misweighted_aggregate_scales_every_float_weight() -> None:
    before = [np.ones((2, 2), np.float32), np.zeros(3, np.float32)]
    after = [np.full((2, 2), 2.0, np.float32), np.arange(3, dtype=np.float32)]
    out = misweighted_aggregate(before, after, 1.5)
    assert out[0].dtype == np.float32
    assert np.array_equal(out[0], np.full((2, 2), 3.0, np.float32))
    assert np.array_equal(out[1], np.array([0.0, 1.5, 3.0], np.float32))
    counter = [np.array([7], np.int64)]  # e.g. an optimizer step count: untouched
    assert misweighted_aggregate(counter, counter, 1.5)[0][0] == 7


def test_the_doctor_fit_sees_the_planted_weight_sum() -> None:
    rng = np.random.default_rng(0)
    before = [rng.normal(size=50).astype(np.float32)]
    clients = [[before[0] + rng.normal(size=50).astype(np.float32)] for _ in range(4)]
    fedavg = [np.mean([c[0] for c in clients], axis=0)]
    after = misweighted_aggregate(before, fedavg, 1.8)
    fit = effective_weights(
        np.stack([c[0] - before[0] for c in clients]).astype(np.float64),
        (after[0] - before[0]).astype(np.float64),
        before[0].astype(np.float64),
    )
    assert fit.weight_sum == pytest.approx(1.8, rel=1e-3)
