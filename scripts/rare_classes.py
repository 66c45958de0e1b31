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
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table_projects import (  # noqa: E402
    FEDPIPE,
    class_names,
    cli_env,
    doctor_codes,
    last_round,
    new_project,
    project_split,
    run,
)

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


def make_project(
    path: Path, table: str, env: dict[str, str], *, rounds: int, **train: Any
) -> Path:
    """A new project on the imbalanced table, committed, not run."""
    build_table(path / "data/table.csv", table)
    return new_project(
        path,
        "data/table.csv",
        env,
        {
            "seed": 7,
            "data": {"label_column": "diagnosis"},
            "federation": {
                "clients": 3, "rounds": rounds, "fraction_fit": 1.0, "min_clients": 1
            },
            "partition": {"method": "iid", "min_samples": 20},
            "model": {"name": "mlp"},
            "train": train,
            "validation": {"min_rows": 50},
        },
    )  # fmt: skip


def fedpipe_figures(project: Path, minority: str, env: dict[str, str]) -> dict:
    """Run the project; the last round's held-out figures and the doctor's codes."""
    table = run([FEDPIPE, "run", "--no-report", "-q"], project, env)
    last = last_round(project)
    label = class_names(project).index(minority)
    return {
        "accuracy": last["global"]["accuracy"],
        "balanced_accuracy": last["global"]["balanced_accuracy"],
        "recall": last["global_classes"]["recall"][label],
        "support": last["global_classes"]["support"][label],
        "doctor": doctor_codes(project, env),
        "table": table,
    }


def central_figures(project: Path, minority: str) -> dict:
    """scikit-learn's balanced logistic regression on the project's own split and
    preprocessing (the pooled client training rows, the held-out rows)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, recall_score

    label = class_names(project).index(minority)
    x, y, x_test, y_test = project_split(project)
    model = LogisticRegression(class_weight="balanced", max_iter=5000)
    pred = model.fit(x, y).predict(x_test)
    return {
        "accuracy": float(accuracy_score(y_test, pred)),
        "balanced_accuracy": float(balanced_accuracy_score(y_test, pred)),
        "recall": float(recall_score(y_test, pred, labels=[label], average=None)[0]),
        "support": int(np.sum(y_test == label)),
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
    env = cli_env()
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
