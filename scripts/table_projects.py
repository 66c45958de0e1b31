"""Shared by the scripts that run fedpipe on a table against scikit-learn
(``rare_classes.py``, ``table_corpus.py``): a new project on a CSV as a user makes
it (``fedpipe init``, params, ``fedpipe sync``, a git commit), its run, the last
round's held-out figures, the doctor's findings, ``fedpipe audit``, and the
project's own split and federated preprocessing read back for a central
baseline (the pooled client training rows, the held-out rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

BIN = Path(sys.executable).parent
FEDPIPE = str(BIN / "fedpipe")


def cli_env() -> dict[str, str]:
    """The environment the scripts run fedpipe in (quiet tools, this venv first)."""
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a command; its stdout, or stop with its stderr's tail."""
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def new_project(
    path: Path, csv: str, env: dict[str, str], params: dict[str, Any]
) -> Path:
    """``fedpipe init`` a project around ``path/csv`` (already written), set
    ``params`` (nested sections merged into params.yaml, ``data.source: table``
    and ``data.path`` set here), sync and commit it; not run."""
    run([FEDPIPE, "init", str(path)], Path.cwd(), env)
    current = yaml.safe_load((path / "params.yaml").read_text())
    current.pop("round_chain", None)
    _merge(current, {"data": {"source": "table", "path": csv}})
    _merge(current, params)
    (path / "params.yaml").write_text(yaml.safe_dump(current, sort_keys=False))
    run([FEDPIPE, "sync"], path, env)
    run(["git", "add", "-A"], path, env)
    run(["git", "commit", "-qm", f"table {csv}"], path, env)
    return path


def last_round(project: Path) -> dict:
    """The last round's record (``metrics/rounds/round-K.json``)."""
    rounds = (project / "metrics/rounds").glob("round-*.json")
    last = max(rounds, key=lambda p: int(p.stem.removeprefix("round-")))
    return json.loads(last.read_text())


def class_names(project: Path) -> list[str]:
    return json.loads((project / "data/prepared/schema.json").read_text())[
        "class_names"
    ]


def doctor_codes(project: Path, env: dict[str, str]) -> list[str]:
    """The codes of the doctor's findings on the project's run."""
    doctor = subprocess.run(
        [FEDPIPE, "doctor", "--format", "json", "--fail-on", "never"],
        cwd=project, env=env, capture_output=True, text=True,
    )  # fmt: skip
    findings = json.loads(doctor.stdout or "[]")
    if isinstance(findings, dict):
        findings = findings.get("findings", findings)
    return [f["code"] for f in findings]


def audit(project: Path, env: dict[str, str]) -> tuple[bool, str]:
    """``fedpipe audit``: whether every invariant holds (exit 0), and its output."""
    proc = subprocess.run(
        [FEDPIPE, "audit"], cwd=project, env=env, capture_output=True, text=True
    )
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def project_split(
    project: Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The project's pooled client training rows and its held-out rows (the
    partition manifest's ``heldout`` ids), through the federated preprocessing
    the run used: ``x, y, x_test, y_test``, features flattened."""
    from fedpipe.data.ingest.prepared import open_features, read_samples
    from fedpipe.data.preprocess import read_transform
    from fedpipe.data.sources import prepared_spec
    from fedpipe.data.splits import federated_data

    here = Path.cwd()
    os.chdir(project)
    try:
        data = federated_data(
            open_features(Path("data/prepared")),
            read_samples(Path("data/prepared")),
            json.loads(Path("data/partition/manifest.json").read_text()),
            prepared_spec(Path("data/prepared")),
            transform=read_transform(Path("data/preprocess/transform.json")),
        )
    finally:
        os.chdir(here)
    width = int(np.prod(data.spec.input_shape))
    x = np.concatenate([c.x_train for c in data.clients]).reshape(-1, width)
    y = np.concatenate([c.y_train for c in data.clients])
    x_test = np.asarray(data.x_test).reshape(len(data.y_test), -1)
    return x, y, x_test, np.asarray(data.y_test)
