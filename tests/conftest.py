"""Suite-wide fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_cwd() -> Iterator[None]:
    """`fedpipe -C DIR ...` (cli.main) changes directory, as a command should;
    tests that call it in-process must not leave the next test elsewhere."""
    before = os.getcwd()
    yield
    os.chdir(before)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Hand the modules to the workers heaviest first (tests/suite_order.py)."""
    from suite_order import heaviest_first, measured_weights

    order = heaviest_first([item.nodeid for item in items], measured_weights())
    items[:] = [items[i] for i in order]
