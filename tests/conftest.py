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
