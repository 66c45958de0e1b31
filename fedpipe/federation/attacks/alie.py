"""ALIE, "a little is enough": small shifts within the benign spread."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from fedpipe.core.component import Setting
from fedpipe.core.errors import SettingError
from fedpipe.federation.attacks.base import Attack, Weights, stacked

Z = Setting("z", float, help="shift in stds (null: from n and f, as the paper)")


def alie_z(n: int, f: int) -> float:
    """Baruch et al.'s ``z_max`` for ``n`` updates of which ``f`` are malicious.

    .. math:: s = \\lfloor n/2 + 1 \\rfloor - f, \\qquad
        z_{max} = \\Phi^{-1}\\left(\\frac{n - s}{n}\\right)

    ``s`` benign clients must sit farther from the mean than the attackers for a
    majority-based defense to prefer the attackers. ``s`` is kept >= 1 (with a
    malicious majority nothing needs hiding) and ``z`` >= 0. (blades and
    others use ``(n - f - s) / (n - f)`` instead; we follow the paper.)

    Examples
    --------
    >>> round(alie_z(10, 2), 4), round(alie_z(20, 4), 4)
    (0.2533, 0.3853)
    """
    s = max(math.floor(n / 2 + 1) - f, 1)
    cdf = (n - s) / n
    if cdf <= 0.5:
        return 0.0
    return max(statistics.NormalDist().inv_cdf(cdf), 0.0)


class Alie(Attack):
    """Every malicious client sends ``μ - z σ`` (omniscient).

    ``μ`` and ``σ`` are the coordinate-wise mean and (population) standard
    deviation of the round's benign updates. Baruch, Baruch and Goldberg
    (NeurIPS 2019), "A Little Is Enough: Circumventing Defenses For Distributed
    Learning", https://arxiv.org/abs/1902.06156; the attack of Flower's FLANDERS
    baseline.

    Parameters
    ----------
    z : float or None, default None
        ``attack.z``; None computes :func:`alie_z` from the round's ``n`` updates
        and ``f`` malicious ones.
    """

    name = "alie"
    settings = (Z,)
    omniscient = True

    def __init__(self, *, z: float | None = None) -> None:
        if z is not None and not math.isfinite(float(z)):
            raise SettingError(f"attack.z: {z!r} is not finite; allowed: a number")
        self.z = None if z is None else float(z)

    def forge_shared(
        self, benign: Sequence[Weights], *, n_updates: int, n_malicious: int
    ) -> Weights:
        z = alie_z(n_updates, n_malicious) if self.z is None else self.z
        return [s.mean(axis=0) - z * s.std(axis=0) for s in stacked(benign)]
