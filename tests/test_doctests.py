"""The package's docstring examples run: every module of ``fedpipe/`` with a
``>>>`` example is collected here (``doctest.testmod``), so an example that
drifts from the code fails the suite."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedpipe"


def _modules_with_examples() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " in path.read_text():
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.append(".".join(p for p in parts if p != "__init__"))
    return found


MODULES = _modules_with_examples()


def test_examples_are_found() -> None:
    assert "fedpipe.federation.attacks.alie" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{name}: '>>> ' found but no example collected"
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed"
