"""fedpipe stays a pure library: no Prefect or DVC, and a light config import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

MODULES = [
    "fedpipe",
    "fedpipe.config",
    "fedpipe.data",
    "fedpipe.layout",
    "fedpipe.metrics",
    "fedpipe.models",
    "fedpipe.training",
    "fedpipe.weights",
    "fedpipe.seeds",
    "fedpipe.federation",
    "fedpipe.history",
    "fedpipe.partition",
    "fedpipe.partition.diagnostics",
    "fedpipe.ingest",
    "fedpipe.strategy",
    "fedpipe.validation",
    "fedpipe.scaffold",
    "fedpipe.health",
    "fedpipe.doctor",
    "fedpipe.personalization",
    "fedpipe.centralized",
    "fedpipe.faults",
    "fedpipe.overrides",
    "fedpipe.cli",
    "fedpipe.report",
    "fedpipe.lineage",
]

# ---------------------------------------------------------------- helpers


def _imported_after(modules: list[str], watched: list[str]) -> list[str]:
    """Which of ``watched`` (top-level packages) a fresh interpreter has loaded
    after importing ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"watched = {watched!r}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} "
        "& set(watched))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- tests


def test_fedpipe_imports_neither_prefect_nor_dvc() -> None:
    assert _imported_after(MODULES, ["prefect", "dvc", "flows", "tasks"]) == []


def test_the_check_sees_imports() -> None:
    # guards the helper itself: it must report a package that was imported
    assert _imported_after(["fedpipe.data"], ["pandas", "prefect"]) == ["pandas"]


def test_config_import_does_not_load_tensorflow() -> None:
    assert _imported_after(["fedpipe.config"], ["tensorflow", "keras"]) == []


def test_cli_import_loads_neither_matplotlib_nor_pandas() -> None:
    # `fedpipe --help` stays instant: `fedpipe report` imports its module lazily
    watched = ["matplotlib", "pandas", "tensorflow"]
    assert _imported_after(["fedpipe.cli"], watched) == []


def test_report_import_does_not_load_tensorflow() -> None:
    assert _imported_after(["fedpipe.report"], ["tensorflow", "keras"]) == []


def test_lineage_path_stays_light() -> None:
    # `fedpipe lineage` answers in well under a second: no TensorFlow, pandas or GX
    heavy = ["tensorflow", "keras", "pandas", "numpy", "great_expectations"]
    assert _imported_after(["fedpipe.cli", "fedpipe.lineage"], heavy) == []
