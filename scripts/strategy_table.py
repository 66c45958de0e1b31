"""The results tables: every server strategy and every personalization method on
the default data, with IID and Dirichlet(alpha=0.1) partitions, 20 rounds each.

Each combination is one `fedpipe run` in a scratch fedpipe project, saved as a DVC
experiment (`dvc exp save`), so `dvc exp show` in that project lists them all with
their params and metrics. The tables are printed as Markdown and written to the
output directory: for strategies, the final global accuracy on the held-out test
set and the local models' mean accuracy on their own test splits; for
personalization methods (with FedAvg), the global accuracy and the personalized
models' mean accuracy on their own clients' test splits. FedBN needs batch
normalization, so it runs on `cnn` with batch norm, next to that model without
personalization.

    python scripts/strategy_table.py [--rounds 20] [--out DIR]
        [--tables strategies personalization]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from params_text import set_param

STRATEGIES = (
    "fedavg", "fedprox", "fedavgm", "fedadam", "fedyogi", "fedadagrad",
    "fedmedian", "fedtrimmedavg", "krum", "multikrum", "scaffold",
)  # fmt: skip
PARTITIONS = {"iid": {}, "dirichlet-0.1": {"method": "dirichlet", "alpha": 0.1}}
BN_CNN = {"name": "cnn", "depth": 2, "width": 32, "batch_norm": "true"}
# label -> {section: {key: value}}
VARIANTS = {
    "strategies": {name: {"strategy": {"name": name}} for name in STRATEGIES},
    "personalization": {
        "none": {},
        "fedper": {"personalization": {"method": "fedper"}},
        "finetune": {"personalization": {"method": "finetune"}},
        "ditto": {"personalization": {"method": "ditto"}},
        "none (cnn + batch norm)": {"model": BN_CNN},
        "fedbn (cnn + batch norm)": {
            "model": BN_CNN,
            "personalization": {"method": "fedbn"},
        },
    },
}
HEADERS = {
    "strategies": ("strategy", "global acc", "local acc", "local"),
    "personalization": ("personalization", "global acc", "personalized acc",
                        "personalized"),
}  # fmt: skip
BIN = Path(sys.executable).parent


def _run(project: Path, env: dict, name: str) -> tuple[dict, float] | None:
    """One `fedpipe run` saved as DVC experiment ``name``: (summary, seconds)."""
    started = time.perf_counter()
    proc = subprocess.run(
        [str(BIN / "fedpipe"), "run"], cwd=project, env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        print(f"{name}: failed\n{proc.stderr[-2000:]}")
        return None
    subprocess.run(
        [str(BIN / "dvc"), "exp", "save", "-f", "-n", name], cwd=project,
        env=env, capture_output=True,
    )  # fmt: skip
    summary = json.loads((project / "metrics/summary.json").read_text())
    return summary, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("strategy-table"))
    parser.add_argument(
        "--tables", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS)
    )
    args = parser.parse_args()
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    project = args.out.resolve() / "project"
    if not project.exists():
        subprocess.run(
            [str(BIN / "fedpipe"), "init", str(project)], check=True, env=env
        )
        git = ["git", "-c", "user.name=fedpipe", "-c", "user.email=fedpipe@invalid"]
        subprocess.run([*git, "add", "-A"], cwd=project, check=True)
        subprocess.run([*git, "commit", "-qm", "baseline"], cwd=project, check=True)
    base = (project / "params.yaml").read_text()
    for table in args.tables:
        label, first, second, group = HEADERS[table]
        cells: dict[tuple[str, str], tuple[str, str]] = {}
        for part, settings in PARTITIONS.items():
            for name, variant in VARIANTS[table].items():
                text = set_param(base, "federation", "rounds", args.rounds)
                for key, value in settings.items():
                    text = set_param(text, "partition", key, value)
                for section, values in variant.items():
                    for key, value in values.items():
                        text = set_param(text, section, key, value)
                (project / "params.yaml").write_text(text)
                slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
                exp = f"{table}-{slug}-{part}".replace("--", "-")
                done = _run(project, env, exp)
                if done is None:
                    cells[(name, part)] = ("failed", "failed")
                    continue
                summary, seconds = done
                g = summary["global"]["accuracy"]
                other = summary.get(group, {}).get("accuracy")
                cells[(name, part)] = (
                    f"{g:.3f}",
                    "n/a" if other is None else f"{other:.3f}",
                )
                print(f"{exp}: global {g:.4f} {group} {other} ({seconds:.0f} s)",
                      flush=True)  # fmt: skip
        (project / "params.yaml").write_text(base)
        lines = [
            f"| {label} | IID: {first} | IID: {second} | Dirichlet 0.1: {first} "
            f"| Dirichlet 0.1: {second} |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in VARIANTS[table]:
            iid, dr = cells[(name, "iid")], cells[(name, "dirichlet-0.1")]
            lines.append(f"| {name} | {iid[0]} | {iid[1]} | {dr[0]} | {dr[1]} |")
        text = "\n".join(lines)
        (args.out / f"{table}.md").write_text(text + "\n")
        print()
        print(text)


if __name__ == "__main__":
    main()
