"""Suite-wide fixtures."""

from __future__ import annotations

import compileall
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The project's own packages, which every CLI process of the suite imports.
PACKAGES = ("fedpipe", "fedpipe_app", "flows", "tasks", "orchestration")


@pytest.fixture(autouse=True)
def _restore_cwd() -> Iterator[None]:
    """`fedpipe -C DIR ...` (cli.main) changes directory, as a command should;
    tests that call it in-process must not leave the next test elsewhere."""
    before = os.getcwd()
    yield
    os.chdir(before)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the project's packages once, before any test (in the xdist
    controller, or the one process of ``-n 0``).

    An editable install compiles nothing, and an environment with
    ``PYTHONDONTWRITEBYTECODE=1`` (as this machine's) makes every process
    compile the ~180 modules a command imports from source again: about 0.2 s
    of CPU per process, over the suite's ~500 CLI processes. Python reads the
    ``__pycache__`` files whatever that variable says, and recompiles a module
    whose source is newer than its file."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for name in PACKAGES:
        compileall.compile_dir(ROOT / name, quiet=1, workers=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Hand the modules to the workers heaviest first (tests/suite_order.py)."""
    from suite_order import heaviest_first, measured_weights

    order = heaviest_first([item.nodeid for item in items], measured_weights())
    items[:] = [items[i] for i in order]
