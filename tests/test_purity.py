"""fedpipe stays a pure library: no Prefect or DVC, and a light config import.

One exception: ``fedpipe.observe.lineage`` is the reader of DVC's record (it audits
dvc.lock through DVC's own API), so it may import DVC - and only it, and never
Prefect.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DVC_READER = "fedpipe.observe.lineage"  # the one package allowed to import DVC


def _package_modules() -> list[str]:
    """Every module of the fedpipe package (``fedpipe/**/*.py``), by name."""
    names = []
    for path in sorted((ROOT / "fedpipe").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _in_reader(name: str) -> bool:
    return name == DVC_READER or name.startswith(f"{DVC_READER}.")


LINEAGE = [m for m in _package_modules() if _in_reader(m)]
MODULES = [m for m in _package_modules() if not _in_reader(m)]

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


def test_every_package_is_covered() -> None:
    # a new module or package is checked without being listed here
    for name in (
        "fedpipe.observe.runfiles",
        "fedpipe.observe.doctor.drift",
        "fedpipe.data.validation.gx",
    ):
        assert name in MODULES
    assert {"fedpipe.observe.lineage", "fedpipe.observe.lineage.dvcstate"} <= set(
        LINEAGE
    )


def test_lineage_reads_dvc_but_not_prefect() -> None:
    watched = ["prefect", "dvc", "dvc_data", "flows", "tasks"]
    assert _imported_after(LINEAGE, watched) == ["dvc", "dvc_data"]


def test_only_the_lineage_package_imports_dvc() -> None:
    # every module, not only those listed above: a DVC import outside
    # fedpipe/observe/lineage/ (even a lazy one inside a function) is caught here
    pattern = re.compile(r"^\s*(from|import)\s+(dvc|dvc_data|dvc_objects)\b", re.M)
    package = ROOT / "fedpipe"
    reader = package / DVC_READER.split(".")[1]
    found = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if reader not in path.parents and pattern.search(path.read_text())
    ]
    assert found == []


def test_the_check_sees_imports() -> None:
    # guards the helper itself: it must report a package that was imported
    assert _imported_after(["fedpipe.data.sources"], ["pandas", "prefect"]) == [
        "pandas"
    ]


def test_config_import_does_not_load_tensorflow() -> None:
    assert _imported_after(["fedpipe.config.params"], ["tensorflow", "keras"]) == []


def test_cli_import_loads_neither_matplotlib_nor_pandas() -> None:
    # `fedpipe --help` stays instant: `fedpipe report` imports its module lazily
    watched = ["matplotlib", "pandas", "tensorflow"]
    assert _imported_after(["fedpipe_app.cli"], watched) == []


def test_round_types_import_does_not_load_tensorflow() -> None:
    # a client's job and what comes back, without the Keras trainer
    watched = ["tensorflow", "keras", "pandas"]
    assert _imported_after(["fedpipe.model.jobs"], watched) == []


def test_report_import_does_not_load_tensorflow() -> None:
    assert _imported_after(["fedpipe.observe.report"], ["tensorflow", "keras"]) == []


def test_runfiles_import_stays_light() -> None:
    # the lineage (which must stay light) can share its git and params helpers
    heavy = ["tensorflow", "keras", "pandas", "numpy", "pydantic", "matplotlib"]
    assert _imported_after(["fedpipe.observe.runfiles"], heavy) == []


def test_lineage_path_stays_light() -> None:
    # `fedpipe lineage` loads DVC, but no TensorFlow, pandas, NumPy or GX
    heavy = ["tensorflow", "keras", "pandas", "numpy", "great_expectations"]
    assert _imported_after(["fedpipe_app.cli", "fedpipe.observe.lineage"], heavy) == []


def test_status_path_loads_neither_tensorflow_nor_prefect() -> None:
    # `fedpipe status` reads DVC (lineage) and runs the doctor: nothing heavier
    heavy = ["tensorflow", "keras", "prefect", "great_expectations", "flows"]
    modules = [
        "fedpipe_app.cli",
        "fedpipe.observe.status",
        "fedpipe.observe.lineage",
        "fedpipe.observe.doctor",
    ]
    assert _imported_after(modules, heavy) == []
