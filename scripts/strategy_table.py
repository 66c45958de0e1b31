"""The strategy results table: every server strategy on the default data, with IID
and Dirichlet(alpha=0.1) partitions, 20 rounds each.

Each combination is one `fedpipe run` in a scratch fedpipe project, saved as a DVC
experiment (`dvc exp save`), so `dvc exp show` in that project lists them all with
their params and metrics. The table (final global accuracy on the held-out test
set, and the local models' mean accuracy on their own test splits) is printed as
Markdown and written next to this script's output directory.

    python scripts/strategy_table.py [--rounds 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STRATEGIES = (
    "fedavg", "fedprox", "fedavgm", "fedadam", "fedyogi", "fedadagrad",
    "fedmedian", "fedtrimmedavg", "krum", "multikrum", "scaffold",
)  # fmt: skip
PARTITIONS = {"iid": {}, "dirichlet-0.1": {"method": "dirichlet", "alpha": 0.1}}
BIN = Path(sys.executable).parent


def _set(text: str, section: str, key: str, value: object) -> str:
    """Set ``section.key`` in params.yaml text, keeping comments and layout."""
    lines = text.split("\n")
    inside = False
    for n, line in enumerate(lines):
        if not line.startswith(" ") and line.strip():
            inside = line.startswith(f"{section}:")
            continue
        if inside and line.startswith(f"  {key}:"):
            comment = line.find("#")
            tail = "  " + line[comment:] if comment > 0 else ""
            lines[n] = f"  {key}: {value}{tail}"
            return "\n".join(lines)
    raise SystemExit(f"params.yaml: cannot set {section}.{key}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("strategy-table"))
    args = parser.parse_args()
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    project = args.out.resolve() / "project"
    if not project.exists():
        subprocess.run(
            [str(BIN / "fedpipe"), "init", str(project)], check=True, env=env
        )
        git = ["git", "-c", "user.name=fedpipe", "-c", "user.email=fedpipe@invalid"]
        subprocess.run([*git, "add", "-A"], cwd=project, check=True)
        subprocess.run([*git, "commit", "-qm", "baseline"], cwd=project, check=True)
    base = (project / "params.yaml").read_text()
    rows = []
    for part, settings in PARTITIONS.items():
        for strategy in STRATEGIES:
            text = _set(base, "federation", "rounds", args.rounds)
            text = _set(text, "strategy", "name", strategy)
            for key, value in settings.items():
                text = _set(text, "partition", key, value)
            (project / "params.yaml").write_text(text)
            started = time.perf_counter()
            proc = subprocess.run(
                [str(BIN / "fedpipe"), "run"], cwd=project, env=env,
                capture_output=True, text=True,
            )  # fmt: skip
            seconds = time.perf_counter() - started
            if proc.returncode != 0:
                print(f"{strategy} / {part}: failed\n{proc.stderr[-2000:]}")
                rows.append((strategy, part, None, None, seconds))
                continue
            name = f"{strategy}-{part}"
            subprocess.run(
                [str(BIN / "dvc"), "exp", "save", "-f", "-n", name], cwd=project,
                env=env, capture_output=True,
            )  # fmt: skip
            summary = json.loads((project / "metrics/summary.json").read_text())
            rows.append((strategy, part, summary["global"]["accuracy"],
                         summary["local"]["accuracy"], seconds))  # fmt: skip
            print(f"{name}: global {rows[-1][2]:.4f} local {rows[-1][3]:.4f} "
                  f"({seconds:.0f} s)", flush=True)  # fmt: skip
    (project / "params.yaml").write_text(base)
    lines = [
        "| strategy | IID: global acc | IID: local acc | Dirichlet 0.1: global acc "
        "| Dirichlet 0.1: local acc |",
        "|---|---:|---:|---:|---:|",
    ]
    by = {(s, p): (g, lo) for s, p, g, lo, _ in rows}

    def cell(v: float | None) -> str:
        return "failed" if v is None else f"{v:.3f}"

    for strategy in STRATEGIES:
        iid = by[(strategy, "iid")]
        dr = by[(strategy, "dirichlet-0.1")]
        lines.append(
            f"| {strategy} | {cell(iid[0])} | {cell(iid[1])} | {cell(dr[0])} "
            f"| {cell(dr[1])} |"
        )
    table = "\n".join(lines)
    (args.out / "table.md").write_text(table + "\n")
    print()
    print(table)


if __name__ == "__main__":
    main()
