"""Where each method for heterogeneous clients helps: FedAvg, FedProx, SCAFFOLD,
FedBN, FedPer and Ditto on label skew and on domain feature skew, with a
batch-norm CNN that learns, 3 seeds, mean ± std, as one `fedpipe sweep`.

The model is `cnn` with two batch-normalized conv layers of 32 filters and a
flatten head (FedBN needs batch normalization; the default global-average-pooling
head held the two-conv model near chance, docs/strategies.md). The data are the
default 5,000 digits over 10 clients:

- label skew: Dirichlet(0.1) labels, the inputs as they are;
- domain skew: IID labels, each client's images through its own seeded domain
  transform (`partition.feature_skew: domains`: rotation, contrast, inversion,
  blur, a background texture, ...), a Digits-Five in the small, as FedBN's paper
  sets it.

Each run is a DVC experiment of a scratch project (`--out/project`; `dvc exp
show` there lists them); the sweep's rows land in `--out/heterogeneity/runs.csv`
and the table (mean ± std over seeds of the global model's held-out accuracy and
of each client's own model on its own test split: the personalized model, or
without personalization the one its local training made) in
`--out/heterogeneity.md`. `--central` first trains
the same model on the pooled data (`fedpipe centralized`, IID, no skew) and
prints its accuracy: the bar a federated run is measured against. Killed, the
same command resumes.

    python scripts/heterogeneity_table.py [--rounds 20] [--seeds 3] [--out DIR]
        [--central] [-j 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from strategy_table import BIN, scratch_project  # noqa: E402

BN_CNN = {
    "model.name": "cnn",
    "model.depth": 2,
    "model.width": 32,
    "model.batch_norm": True,
    "model.head": "flatten",
}
SKEWS = {
    "label": {"partition.method": "dirichlet", "partition.feature_skew": "none"},
    "domain": {"partition.method": "iid", "partition.feature_skew": "domains"},
}
STRATEGIES = ["fedavg", "fedprox", "scaffold"]
PERSONAL = ["fedbn", "fedper", "ditto"]


def design(rounds: int) -> dict:
    """The sweep's grid file: each method crossed with each skew."""
    grids = {}
    for skew, keys in SKEWS.items():
        grids[f"{skew}-strategies"] = {**keys, "strategy.name": STRATEGIES}
        grids[f"{skew}-personal"] = {
            **keys,
            "strategy.name": "fedavg",
            "personalization.method": PERSONAL,
        }
    base = {**BN_CNN, "federation.rounds": rounds, "partition.alpha": 0.1}
    return {"base": base, "grids": grids}


def method(row: dict) -> str:
    """The row's method: its personalization when it has one, else its strategy."""
    personal = row.get("personalization.method") or "none"
    return personal if personal != "none" else row["strategy.name"]


def skew(row: dict) -> str:
    return "domain" if row.get("partition.feature_skew") == "domains" else "label"


def _cell(values: list[float]) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def markdown(rows: list[dict]) -> str:
    """Rows per method, the two skews' global and personalized accuracy."""
    cells: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    seeds: set[str] = set()
    for row in rows:
        seeds.add(row["seed"])
        key = (method(row), skew(row))
        cells[(*key, "global")].append(float(row["accuracy"]))
        # a client's own model on its own test split: the personalized model,
        # or (no personalization) the model its local training made this round
        own = row.get("personalized_accuracy") or row.get("local_accuracy")
        if own:
            cells[(*key, "personal")].append(float(own))
    lines = [
        "| method | label skew: global | label skew: own model "
        "| domain skew: global | domain skew: own model |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in [*STRATEGIES, *PERSONAL]:
        out = [
            _cell(cells.get((name, s, view), []))
            for s in SKEWS
            for view in ("global", "personal")
        ]
        lines.append(f"| {name} | " + " | ".join(out) + " |")
    n = len(seeds)
    return "\n".join(lines) + (
        f"\n\nMean ± std over {n} seed(s) ({sorted(seeds)}). Global: the global "
        "model on the held-out digits (untransformed). Own model: each client's "
        "model on its own test split, mean weighted by split size: its "
        "personalized model (FedBN, FedPer, Ditto) or, without personalization, "
        "the model its local training made in the last round.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("heterogeneity-table"))
    parser.add_argument("--central", action="store_true")
    parser.add_argument("-j", "--jobs", type=int, default=1)
    args = parser.parse_args()
    out = args.out.resolve()
    project, env = scratch_project(out)
    fedpipe = str(BIN / "fedpipe")
    if args.central:
        central(project, fedpipe, args.rounds, env)
    grid = out / "heterogeneity.yaml"
    grid.write_text(yaml.safe_dump(design(args.rounds), sort_keys=False))
    sweep = [fedpipe, "-C", str(project), "sweep", "--grid", str(grid),
             "--name", "heterogeneity", "--out", str(out / "heterogeneity"),
             "--seeds", str(args.seeds), "-j", str(args.jobs)]  # fmt: skip
    subprocess.run(sweep, env=env, check=False)
    with (out / "heterogeneity" / "runs.csv").open(newline="") as f:
        text = markdown(list(csv.DictReader(f)))
    (out / "heterogeneity.md").write_text(text)
    print()
    print(text)


def central(project: Path, fedpipe: str, rounds: int, env: dict[str, str]) -> None:
    """The BN CNN on the pooled IID data, in a copy of the project: its data
    stages and initial model (``dvc repro init``), then ``fedpipe centralized``
    (rounds x train.epochs passes)."""
    copy = project.parent / "central"
    if not copy.exists():
        shutil.copytree(project, copy)
    params = yaml.safe_load((copy / "params.yaml").read_text())
    for dotted, value in {**BN_CNN, "federation.rounds": rounds}.items():
        section, key = dotted.split(".")
        params[section][key] = value
    (copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run([fedpipe, "-C", str(copy), "sync"], check=True, env=env)
    subprocess.run([str(BIN / "dvc"), "repro", "init"], cwd=copy, check=True, env=env)
    subprocess.run([fedpipe, "-C", str(copy), "centralized"], check=True, env=env)
    done = json.loads((copy / "metrics/centralized.json").read_text())
    print(f"centralized BN CNN: {json.dumps(done)}", flush=True)


if __name__ == "__main__":
    main()
