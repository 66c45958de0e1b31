"""Tiny in-memory fixtures shared by the strategy tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.strategy import ClientUpdate

SHAPES = [(3, 2), (2,), (2, 2, 2)]

# what the conformance suite passes to make_strategy: scaffold needs N, the rest
# ignore it
SUITE_SETTINGS = {"total_clients": 16}


def weights(seed: int, *, dtype: type = np.float32, scale: float = 1.0) -> list:
    """One weight list: three layers of different shapes."""
    rng = np.random.default_rng(seed)
    return [(scale * rng.normal(size=s)).astype(dtype) for s in SHAPES]


def updates(
    clients: Sequence[int],
    counts: Sequence[int],
    *,
    dtype: type = np.float32,
    scale: float = 1.0,
) -> list[ClientUpdate]:
    """Updates with distinct weights, a control delta (read only by scaffold) and
    local steps that differ between clients (read only by fednova)."""
    return [
        ClientUpdate(
            client=c,
            weights=weights(100 + c, dtype=dtype, scale=scale),
            n_samples=n,
            extras={"control_delta": weights(500 + c, dtype=dtype)},
            steps=steps_of(c),
        )
        for c, n in zip(clients, counts, strict=True)
    ]


def steps_of(client: int) -> int:
    """The local steps the suite's client ``client`` reports: 2 .. 6."""
    return 2 + client % 5


def same_bits(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    """Equal layer count, shapes, dtypes and bytes."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


def same_state(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Equal names and, per name, the same bits."""
    return set(a) == set(b) and all(same_bits([a[k]], [b[k]]) for k in a)


def deep_copy(items: Sequence[ClientUpdate]) -> list[ClientUpdate]:
    """Independent copies of updates (arrays included)."""
    return [
        ClientUpdate(
            u.client,
            [w.copy() for w in u.weights],
            u.n_samples,
            {k: [a.copy() for a in v] for k, v in u.extras.items()},
            u.steps,
        )
        for u in items
    ]


def planted(seed: int = 0) -> list[ClientUpdate]:
    """5 honest updates near 0 (clients 0-4) and 2 outliers at 100 (clients 5, 6)."""
    rng = np.random.default_rng(seed)
    honest = [
        ClientUpdate(i, [rng.normal(0, 0.01, (3, 2)), rng.normal(0, 0.01, 4)], 10 + i)
        for i in range(5)
    ]
    outliers = [
        ClientUpdate(i, [np.full((3, 2), 100.0), np.full(4, 100.0 + i)], 1000)
        for i in (5, 6)
    ]
    return honest + outliers
