"""The suite hands its modules out heaviest first (tests/suite_order.py)."""

from __future__ import annotations

from pathlib import Path

from suite_order import heaviest_first, measured_weights

ROOT = Path(__file__).resolve().parents[1]


def test_heaviest_module_first_and_each_module_keeps_its_order() -> None:
    nodeids = [
        "tests/test_a.py::test_1",
        "tests/test_a.py::test_2",
        "tests/e2e/test_new.py::test_1",
        "tests/e2e/test_slow.py::test_1",
        "tests/e2e/test_slow.py::test_2[x]",
        "tests/test_b.py::test_1",
    ]
    weights = {"tests/e2e/test_slow.py": 300, "tests/test_b.py": 5}
    order = [nodeids[i] for i in heaviest_first(nodeids, weights)]
    assert order == [
        "tests/e2e/test_slow.py::test_1",
        "tests/e2e/test_slow.py::test_2[x]",
        "tests/e2e/test_new.py::test_1",  # unmeasured e2e: among the heavy
        "tests/test_b.py::test_1",
        "tests/test_a.py::test_1",  # unmeasured: last, in collection order
        "tests/test_a.py::test_2",
    ]


def test_every_weighed_module_exists() -> None:
    weights = measured_weights()
    assert weights, "tests/module_seconds.json is empty"
    missing = [path for path in weights if not (ROOT / path).is_file()]
    assert not missing, f"remeasure (scripts/module_seconds.py): {missing}"
