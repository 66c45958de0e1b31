"""What every check is, and the small readings of a run several checks share.

A check is a function ``check(run: RunFiles) -> list[Finding]``: it reads only
the :class:`~fedpipe.observe.runfiles.RunFiles` it is given, returns ``[]`` when its
symptom is absent, and otherwise one finding (per client, for the outlier
check) whose evidence names rounds, layers, clients and numbers and whose fix
names the ``params.yaml`` keys to change. Its thresholds are named constants in
its own module, each with the reason for its value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles

Check = Callable[[RunFiles], list[Finding]]


def robust_z(values: Sequence[float]) -> np.ndarray:
    """Modified z-scores ``(x - median) / (1.4826 MAD)``; 0 where MAD is 0 and the
    value is the median, +-inf where MAD is 0 and it is not."""
    x = np.asarray(values, dtype=np.float64)
    median = float(np.median(x))
    mad = 1.4826 * float(np.median(np.abs(x - median)))
    if mad == 0.0:
        return np.where(x > median, np.inf, np.where(x < median, -np.inf, 0.0))
    return (x - median) / mad


def global_series(run: RunFiles, key: str) -> dict[int, float | None]:
    """Held-out global ``key`` per round (rounds metrics, else health)."""
    out: dict[int, float | None] = {}
    for k in sorted(set(run.rounds) | set(run.health)):
        if k in run.rounds:
            out[k] = run.rounds[k].get("global", {}).get(key)
        else:
            out[k] = run.health[k].get("global", {}).get(key)
    return out


def param(run: RunFiles, dotted: str, default: Any = None) -> Any:
    """The typed setting ``dotted`` (``"train.lr"``), or ``default`` if unknown."""
    value: Any = run.config
    for part in dotted.split("."):
        if value is None:
            return default
        value = getattr(value, part, None)
    return default if value is None else value


def finite_clients(health: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The round's clients whose update norm is known (their weights were finite)."""
    return [c for c in health.get("clients", []) if c.get("update_norm") is not None]


def norm_layers(health: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The round's normalization layers (batch norm and the like)."""
    return [layer for layer in health.get("layers", []) if layer.get("kind") == "norm"]


_UNKNOWN = object()


def knobs(run: RunFiles, *dotted: str) -> str:
    """``"train.lr = 0.05, train.epochs = 2"``: settings with their current values
    as ``params.yaml`` spells them (``null`` for a setting left unset, ``?`` when
    the run's params are unknown)."""
    return ", ".join(f"{key} = {_value(run, key)}" for key in dotted)


def _value(run: RunFiles, dotted: str) -> str:
    if run.config is None:
        return "?"
    value: Any = run.config
    for part in dotted.split("."):
        value = getattr(value, part, _UNKNOWN)
        if value is _UNKNOWN:
            return "?"
        if value is None:
            return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
