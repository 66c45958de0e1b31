"""The results tables: every server strategy and every personalization method on
the default data, with IID and Dirichlet(alpha=0.1) partitions, 20 rounds each,
as one `fedpipe sweep` per table.

Each combination is a run of the sweep in a scratch fedpipe project
(`--out/project`), a DVC experiment there (`dvc exp show` lists them all with
their params and metrics); the sweep's results land in `--out/<table>/` and the
Markdown tables in `--out/<table>.md`: for strategies, the final global accuracy
on the held-out test set and the local models' mean accuracy on their own test
splits; for personalization methods (with FedAvg), the global accuracy and the
personalized models' mean accuracy on their own clients' test splits. FedBN
needs batch normalization, so it runs on `cnn` with batch norm, next to that
model without personalization. Killed, the same command resumes.

    python scripts/strategy_table.py [--rounds 20] [--out DIR]
        [--tables strategies personalization] [-j 1]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

import yaml

STRATEGIES = [
    "fedavg", "fedprox", "fedavgm", "fedadam", "fedyogi", "fedadagrad",
    "fedmedian", "fedtrimmedavg", "krum", "multikrum", "scaffold",
]  # fmt: skip
PARTITIONS = {"iid": "iid", "dirichlet": "dirichlet-0.1"}
BN_CNN = {"model.name": "cnn", "model.depth": 2, "model.width": 32,
          "model.batch_norm": True}  # fmt: skip
METHODS = ["none", "fedper", "finetune", "ditto"]
GRIDS = {
    "strategies": {"strategies": {"strategy.name": STRATEGIES}},
    "personalization": {
        "methods": {"personalization.method": METHODS},
        "batch-norm": {**BN_CNN, "personalization.method": ["none", "fedbn"]},
    },
}
HEADERS = {
    "strategies": ("strategy", "global acc", "local acc", "local"),
    "personalization": ("personalization", "global acc", "personalized acc",
                        "personalized"),
}  # fmt: skip
BIN = Path(sys.executable).parent


def _label(table: str, row: dict) -> str:
    if table == "strategies":
        return row["strategy.name"]
    name = row["personalization.method"]
    return (
        f"{name} (cnn + batch norm)" if row.get("model.batch_norm") == "true" else name
    )


def _markdown(table: str, rows: list[dict]) -> str:
    label, first, second, group = HEADERS[table]
    cells: dict[str, dict[str, tuple[str, str]]] = {}
    for row in rows:
        other = row.get(f"{group}_accuracy") or ""
        cells.setdefault(_label(table, row), {})[row["partition.method"]] = (
            f"{float(row['accuracy']):.3f}",
            f"{float(other):.3f}" if other else "n/a",
        )
    lines = [
        f"| {label} | IID: {first} | IID: {second} | Dirichlet 0.1: {first} "
        f"| Dirichlet 0.1: {second} |",
        "|---|---:|---:|---:|---:|",
    ]
    missing = ("not run", "not run")
    for name, by in cells.items():
        iid, dr = by.get("iid", missing), by.get("dirichlet", missing)
        lines.append(f"| {name} | {iid[0]} | {iid[1]} | {dr[0]} | {dr[1]} |")
    return "\n".join(lines) + "\n"


def scratch_project(out: Path) -> tuple[Path, dict[str, str]]:
    """``out/project``, a fresh fedpipe project committed to git (made once; a
    rerun reuses it, so a killed sweep resumes), and the environment its
    commands run in (this interpreter's tools first on PATH)."""
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    project = out / "project"
    if not project.exists():
        init = [str(BIN / "fedpipe"), "init", str(project)]
        subprocess.run(init, check=True, env=env)
        git = ["git", "-c", "user.name=fedpipe", "-c", "user.email=fedpipe@invalid"]
        subprocess.run([*git, "add", "-A"], cwd=project, check=True)
        subprocess.run([*git, "commit", "-qm", "baseline"], cwd=project, check=True)
    return project, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("strategy-table"))
    parser.add_argument(
        "--tables", nargs="+", choices=sorted(GRIDS), default=sorted(GRIDS)
    )
    parser.add_argument("-j", "--jobs", type=int, default=1)
    args = parser.parse_args()
    out = args.out.resolve()
    project, env = scratch_project(out)
    fedpipe = str(BIN / "fedpipe")
    for table in args.tables:
        design = out / f"{table}.yaml"
        base = {"federation.rounds": args.rounds, "partition.alpha": 0.1}
        design.write_text(yaml.safe_dump({"base": base, "grids": GRIDS[table]}))
        seed = yaml.safe_load((project / "params.yaml").read_text())["seed"]
        sweep = [fedpipe, "-C", str(project), "sweep", "--grid", str(design),
                 "-S", "partition.method=iid,dirichlet", "--name", table,
                 "--out", str(out / table), "--seed-list", str(seed),
                 "-j", str(args.jobs)]  # fmt: skip
        subprocess.run(sweep, env=env, check=False)
        with (out / table / "runs.csv").open(newline="") as f:
            text = _markdown(table, list(csv.DictReader(f)))
        (out / f"{table}.md").write_text(text)
        print()
        print(text)


if __name__ == "__main__":
    main()
