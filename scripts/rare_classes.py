"""Rare classes, measured: a public table with a ~8 % minority class, run with
``fedpipe run`` unweighted and with ``train.class_weight: balanced``, against a
central scikit-learn ``LogisticRegression(class_weight="balanced")`` on the same
split (issue 37, item 4).

The table is scikit-learn's breast cancer set (``load_breast_cancer``, installed
with scikit-learn, no download) with the malignant class subsampled to 8 % of the
rows (31 of 388), or ``--table digits``: the 8x8 digits, "nine" against the rest,
nines subsampled to 8 % (so the held-out set holds more of the rare class).
Both runs are real projects (``fedpipe init``, ``fedpipe run``, ``fedpipe
doctor``); the central baseline reads the same held-out split and the same
federated preprocessing from the project (``fedpipe.data.splits``)::

    .venv/bin/python scripts/rare_classes.py                  # breast cancer
    .venv/bin/python scripts/rare_classes.py --table digits --rounds 10

It prints one Markdown table (held-out accuracy, balanced accuracy, the rare
class's recall; the doctor's codes on each run) and exits 1 when the weighted
run's rare-class recall is more than 0.05 below the central baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

BIN = Path(sys.executable).parent
FEDPIPE = str(BIN / "fedpipe")
MINORITY_SHARE = 0.08
TOLERANCE = 0.05


def build_table(path: Path, table: str, *, seed: int = 0) -> tuple[str, str]:
    """Write the imbalanced CSV; its (majority, minority) class names."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer, load_digits

    rng = np.random.default_rng(seed)
    if table == "breast_cancer":
        data = load_breast_cancer()
        names = [str(n) for n in data.target_names]  # malignant, benign
        y = np.array([names[t] for t in data.target])
        minority, majority = "malignant", "benign"
        x, columns = data.data, [c.replace(" ", "_") for c in data.feature_names]
    else:
        data = load_digits()
        y = np.where(data.target == 9, "nine", "other")
        minority, majority = "nine", "other"
        x, columns = data.data, [f"px{i}" for i in range(data.data.shape[1])]
    big = np.flatnonzero(y == majority)
    small = np.flatnonzero(y == minority)
    keep = int(round(MINORITY_SHARE * len(big) / (1 - MINORITY_SHARE)))
    rows = np.sort(np.r_[big, rng.choice(small, size=keep, replace=False)])
    frame = pd.DataFrame(x[rows], columns=columns)
    frame.insert(0, "diagnosis", y[rows])
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return majority, minority


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def make_project(
    path: Path, table: str, env: dict[str, str], *, rounds: int, **train: Any
) -> Path:
    """A new project on the imbalanced table, committed, not run."""
    build_table(path / "data/table.csv", table)
    _run([FEDPIPE, "init", str(path)], Path.cwd(), env)
    params = yaml.safe_load((path / "params.yaml").read_text())
    params.pop("round_chain", None)
    params["seed"] = 7
    params["data"].update(
        source="table", path="data/table.csv", label_column="diagnosis"
    )
    params["federation"].update(
        clients=3, rounds=rounds, fraction_fit=1.0, min_clients=1
    )
    params["partition"].update(method="iid", min_samples=20)
    params["model"]["name"] = "mlp"
    params["train"].update(train)
    params.setdefault("validation", {})["min_rows"] = 50
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _run([FEDPIPE, "sync"], path, env)
    _run(["git", "add", "-A"], path, env)
    _run(["git", "commit", "-qm", "rare classes"], path, env)
    return path


def fedpipe_figures(project: Path, minority: str, env: dict[str, str]) -> dict:
    """Run the project; the last round's held-out figures and the doctor's codes."""
    table = _run([FEDPIPE, "run", "--no-report", "-q"], project, env)
    rounds = (project / "metrics/rounds").glob("round-*.json")
    last_file = max(rounds, key=lambda p: int(p.stem.removeprefix("round-")))
    last = json.loads(last_file.read_text())
    names = json.loads((project / "data/prepared/schema.json").read_text())
    label = names["class_names"].index(minority)
    doctor = subprocess.run(
        [FEDPIPE, "doctor", "--format", "json", "--fail-on", "never"],
        cwd=project, env=env, capture_output=True, text=True,
    )  # fmt: skip
    findings = json.loads(doctor.stdout or "[]")
    findings = (
        findings.get("findings", findings) if isinstance(findings, dict) else findings
    )
    return {
        "accuracy": last["global"]["accuracy"],
        "balanced_accuracy": last["global"]["balanced_accuracy"],
        "recall": last["global_classes"]["recall"][label],
        "support": last["global_classes"]["support"][label],
        "doctor": [f["code"] for f in findings],
        "table": table,
    }


def central_figures(project: Path, minority: str) -> dict:
    """scikit-learn's balanced logistic regression on the project's own split and
    preprocessing (the pooled client training rows, the held-out rows)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, recall_score

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
        names = json.loads(Path("data/prepared/schema.json").read_text())
    finally:
        os.chdir(here)
    label = names["class_names"].index(minority)
    x = np.concatenate([c.x_train for c in data.clients]).reshape(
        -1, int(np.prod(data.spec.input_shape))
    )
    y = np.concatenate([c.y_train for c in data.clients])
    x_test = np.asarray(data.x_test).reshape(len(data.y_test), -1)
    model = LogisticRegression(class_weight="balanced", max_iter=5000)
    pred = model.fit(x, y).predict(x_test)
    return {
        "accuracy": float(accuracy_score(data.y_test, pred)),
        "balanced_accuracy": float(balanced_accuracy_score(data.y_test, pred)),
        "recall": float(
            recall_score(data.y_test, pred, labels=[label], average=None)[0]
        ),
        "support": int(np.sum(data.y_test == label)),
    }


def measure(
    work: Path, table: str, env: dict[str, str], *, rounds: int, epochs: int
) -> dict[str, dict]:
    """The unweighted and the weighted run, and the central baseline."""
    majority, minority = build_table(work / "probe.csv", table)
    out = {}
    for name, train in (
        ("fedpipe, defaults", {}),
        (
            "fedpipe, class_weight balanced",
            {"class_weight": "balanced", "epochs": epochs},
        ),
    ):
        project = make_project(
            work / name.replace(", ", "-").replace(" ", "_"), table, env,
            rounds=rounds, **train,
        )  # fmt: skip
        out[name] = fedpipe_figures(project, minority, env)
    out["scikit-learn LogisticRegression(class_weight=balanced)"] = central_figures(
        project, minority
    )
    out["_names"] = {"majority": majority, "minority": minority}
    return out


def markdown(results: dict[str, dict]) -> str:
    minority = results["_names"]["minority"]
    lines = [
        f"| model | accuracy | balanced accuracy | {minority} recall | doctor |",
        "|---|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        if name.startswith("_"):
            continue
        doctor = ", ".join(r.get("doctor", [])) or (
            "no findings" if "doctor" in r else ""
        )
        lines.append(
            f"| {name} | {r['accuracy']:.3f} | {r['balanced_accuracy']:.3f} | "
            f"{r['recall']:.3f} (of {r['support']}) | {doctor} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table", choices=["breast_cancer", "digits"], default="breast_cancer"
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--epochs",
        type=int,
        default=5,
        help="train.epochs of the weighted run (default 5)",
    )
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)  # fmt: skip
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        results = measure(work, args.table, env, rounds=args.rounds, epochs=args.epochs)
    print(results["fedpipe, class_weight balanced"]["table"])
    print(markdown(results))
    weighted = results["fedpipe, class_weight balanced"]["recall"]
    central = results["scikit-learn LogisticRegression(class_weight=balanced)"][
        "recall"
    ]
    return 0 if weighted >= central - TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
