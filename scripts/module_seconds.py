"""Seconds per test module from a pytest JUnit file, for tests/module_seconds.json.

The suite hands its modules to the two workers heaviest first (tests/conftest.py);
the weights come from a measured full run:

    pytest --junitxml=/tmp/suite.xml
    python scripts/module_seconds.py /tmp/suite.xml --min 20 > tests/module_seconds.json

A test's time in the file is its setup, call and teardown, so a module's total
includes its module fixtures (and a session fixture it was the first to use).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Sequence


def module_seconds(junit: str) -> dict[str, float]:
    """Total seconds of each module's tests, keyed by the module's path."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        # classname is the module's dotted path, then any test class
        end = next(i for i, p in enumerate(parts) if p.startswith("test_")) + 1
        totals["/".join(parts[:end]) + ".py"] += float(case.get("time") or 0.0)
    return dict(totals)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="a pytest --junitxml file")
    parser.add_argument(
        "--min", type=float, default=0.0, help="leave out modules under this (s)"
    )
    args = parser.parse_args(argv)
    totals = module_seconds(args.junit)
    kept = {
        path: round(seconds)
        for path, seconds in sorted(totals.items(), key=lambda kv: -kv[1])
        if seconds >= args.min
    }
    json.dump(kept, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
