"""The order the suite hands its modules to the workers: heaviest first.

With ``--dist loadfile`` a worker takes the next module whenever it runs low, so
the modules that start last bound the end of the run. xdist's own order
(``--loadscope-reorder``: most tests first) left the end-to-end modules, few tests
and minutes each, for the end. Longest first (LPT) leaves the short ones there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Seconds each slow module took in a measured full run (how to remeasure:
#: scripts/module_seconds.py).
MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")
#: The weight of an end-to-end module not measured yet: among the heavy ones.
NEW_E2E_SECONDS = 60.0


def module_of(nodeid: str) -> str:
    """``tests/x/test_y.py`` of ``tests/x/test_y.py::test_z[1]``."""
    return nodeid.split("::", 1)[0]


def heaviest_first(nodeids: Sequence[str], weights: Mapping[str, float]) -> list[int]:
    """Positions of ``nodeids`` reordered module by module, heaviest module first
    (ties and unweighted modules in collection order); a module's tests keep
    their order. An unlisted module under ``tests/e2e/`` weighs
    :data:`NEW_E2E_SECONDS`, any other unlisted module nothing."""

    def weight(module: str) -> float:
        if module in weights:
            return float(weights[module])
        return NEW_E2E_SECONDS if module.startswith("tests/e2e/") else 0.0

    first: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first.setdefault(module_of(nodeid), i)
    return sorted(
        range(len(nodeids)),
        key=lambda i: (-weight(module_of(nodeids[i])), first[module_of(nodeids[i])]),
    )


def measured_weights() -> dict[str, float]:
    """tests/module_seconds.json."""
    return {k: float(v) for k, v in json.loads(MODULE_SECONDS.read_text()).items()}
