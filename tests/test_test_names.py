"""Test modules have unique file names: the test folders are not packages, so two
modules of one name in different folders stop pytest's collection ("import file
mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert not [name for name, n in names.items() if n > 1]
