"""Norm clipping (server side): FedAvg of the client updates clipped in L2 norm."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.core.errors import SettingError
from fedpipe.strategy.aggregate import (
    Weights,
    cast_like,
    differences,
    weighted_average,
)
from fedpipe.strategy.base import ClientUpdate, State, Strategy

CLIP_NORM = Setting(
    "clip_norm", float, default=None, gt=0.0, help="fixed L2 bound on each update"
)
CLIP_QUANTILE = Setting(
    "clip_quantile",
    float,
    default=None,
    gt=0.0,
    le=1.0,
    help="adaptive bound: this quantile of the round's update norms (null: 0.5)",
)


def update_norm(delta: Sequence[np.ndarray]) -> float:
    """L2 norm of a delta over all its layers (float64, layer by layer)."""
    return math.sqrt(sum(float(np.sum(np.square(d, dtype=np.float64))) for d in delta))


def clipped_with_norm(
    delta: Sequence[np.ndarray], bound: float
) -> tuple[Weights, float]:
    """``delta · min(1, bound / ||delta||)`` and ``||delta||``: the one L2
    clipping of fedpipe (this strategy's and the privacy mechanisms'). The same
    arrays when the norm is within ``bound``; else each layer times
    ``bound / ||delta||``."""
    norm = update_norm(delta)
    if norm <= bound:
        return list(delta), norm
    factor = bound / norm
    return [d * factor for d in delta], norm


def clipped(delta: Sequence[np.ndarray], bound: float) -> Weights:
    """``delta · min(1, bound / ||delta||)`` (:func:`clipped_with_norm`)."""
    return clipped_with_norm(delta, bound)[0]


class Clipping(Strategy):
    """Clip each update ``Δ_i = w_i - w`` to an L2 bound ``C``, then FedAvg.

    .. math:: w_{t+1} = w_t + \\sum_i \\frac{n_i}{\\sum_j n_j}\\,
        \\Delta_i \\min\\left(1, \\frac{C}{\\lVert \\Delta_i \\rVert}\\right)

    Fixed: ``C = clip_norm``. Adaptive (when ``clip_norm`` is null): ``C`` is the
    ``clip_quantile`` quantile of the round's update norms (0.5: the median), so
    a boosted update is cut to a typical size whatever the model's scale. The
    "norm bound" defense of Sun et al. (2019), "Can You Really Backdoor
    Federated Learning?", https://arxiv.org/abs/1911.07963; the adaptive bound as
    in Flower's ``DifferentialPrivacyServerSideAdaptiveClipping`` without its
    noise (Andrew et al., 2021, https://arxiv.org/abs/1905.03871, track a
    quantile privately). No state.

    Parameters
    ----------
    clip_norm : float or None, default None
        Fixed bound ``C > 0``; None means adaptive.
    clip_quantile : float or None, default None
        Quantile of the round's norms for the adaptive bound, ``0 < q <= 1``;
        None means 0.5. Ignored with ``clip_norm`` set.
    """

    name = "clipping"
    settings = (CLIP_NORM, CLIP_QUANTILE)

    def __init__(
        self, *, clip_norm: float | None = None, clip_quantile: float | None = None
    ) -> None:
        self.clip_norm = self.checked(CLIP_NORM, clip_norm)
        self.clip_quantile = self.checked(CLIP_QUANTILE, clip_quantile)
        if self.clip_quantile is not None and self.clip_quantile > CLIP_QUANTILE.le:
            raise SettingError(
                f"strategy.clip_quantile: {clip_quantile!r} is out of range; "
                "allowed: 0 < clip_quantile <= 1"
            )

    @classmethod
    def check_section(cls, values: Mapping[str, Any]) -> None:
        """Refuse a fixed and an adaptive bound set together."""
        if (
            values.get("clip_norm") is not None
            and values.get("clip_quantile") is not None
        ):
            raise SettingError(
                "strategy.clip_norm and strategy.clip_quantile both set; clipping "
                "uses a fixed bound (clip_norm) or an adaptive one (clip_quantile "
                "of the round's update norms): set one"
            )

    def bound(self, norms: Sequence[float]) -> float:
        """The round's clipping bound ``C`` for these update norms."""
        if self.clip_norm is not None:
            return self.clip_norm
        q = 0.5 if self.clip_quantile is None else self.clip_quantile
        return float(np.quantile(np.asarray(norms, dtype=np.float64), q))

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        deltas = differences([u.weights for u in updates], global_weights)
        bound = self.bound([update_norm(d) for d in deltas])
        mean_delta = weighted_average(
            [clipped(d, bound) for d in deltas],
            [u.n_samples for u in updates],
            cast=False,
        )
        new = [
            np.asarray(w, dtype=np.float64) + d
            for w, d in zip(global_weights, mean_delta, strict=True)
        ]
        return cast_like(new, global_weights), {}
