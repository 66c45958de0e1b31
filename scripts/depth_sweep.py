"""The seed paper at CPU scale: divergence accumulation in deeper models.

"Unlocking the Potential of Federated Learning for Deeper Models" (2023) reports
that deeper models lose accuracy under federated learning even with i.i.d.
clients, because the dissimilarity between client models accumulates layer by
layer during back-propagation; wider models and smaller receptive fields reduce
it. This sweep measures that on the default data, as a DVC experiment per
configuration:

- a plain CNN (`model.name: cnn`) over depth x width (first kernel size) and
  depth x kernel size (narrowest width), i.i.d. clients, several local epochs
  per round: each run records the per-layer
  divergence D_l of the client updates every round (metrics/health);
- the same model trained centrally (`fedpipe centralized`: same initial model,
  data, optimizer and number of passes over the data); the gap between the two is
  the price of federating;
- the control: one local step per round (`train.local_steps: 1`), where FedAvg is
  large-batch SGD and the gap to its centralized counterpart (as many steps, on
  batches of clients x batch size) should vanish.

Writes, into --out: `sweep.csv` (one row per run), `table.md`,
`divergence_by_layer.png` (mean D_l over rounds against layer index, one line per
depth) and `gap_by_depth.png`; each run is saved with `dvc exp save` in
`--out/project`, so `dvc exp show` there lists params and metrics.

    python scripts/depth_sweep.py --out DIR [--depths 2 4 8] [--widths 8 32]
        [--kernels 3 5] [--rounds 10] [--epochs 2] [--clients 5]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from params_text import set_param

BIN = Path(sys.executable).parent


def _run(cmd: list[str], project: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def _layer_divergence(project: Path, rounds: int) -> list[tuple[str, float]]:
    """Mean D_l over rounds for each trainable conv/dense layer, in model order."""
    sums: dict[str, list[float]] = {}
    order: list[str] = []
    for k in range(1, rounds + 1):
        health = json.loads((project / f"metrics/health/round-{k}.json").read_text())
        for layer in health["layers"]:
            if layer.get("divergence") is None or layer.get("kind") == "norm":
                continue
            if layer["name"] not in sums:
                sums[layer["name"]] = []
                order.append(layer["name"])
            sums[layer["name"]].append(float(layer["divergence"]))
    return [(name, sum(sums[name]) / len(sums[name])) for name in order]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("depth-sweep"))
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--kernels", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument(
        "--control-width",
        type=int,
        default=None,
        help="width of the one-local-step control runs (default: the first width)",
    )
    args = parser.parse_args()
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    args.out.mkdir(parents=True, exist_ok=True)
    project = args.out.resolve() / "project"
    fedpipe, dvc = str(BIN / "fedpipe"), str(BIN / "dvc")
    if not project.exists():
        _run([fedpipe, "init", str(project)], Path("."), env)
        git = ["git", "-c", "user.name=fedpipe", "-c", "user.email=fedpipe@invalid"]
        _run([*git, "add", "-A"], project, env)
        _run([*git, "commit", "-qm", "baseline"], project, env)
    base = (project / "params.yaml").read_text()
    base = set_param(base, "federation", "rounds", args.rounds)
    base = set_param(base, "federation", "clients", args.clients)
    base = set_param(base, "train", "epochs", args.epochs)
    base = set_param(base, "model", "name", "cnn")
    control_width = args.control_width or args.widths[0]
    # depth x width at the first kernel size; the other kernel sizes at the
    # narrowest width (the widest, deepest models dominate the cost on a CPU)
    runs = [(d, w, args.kernels[0], None) for w in args.widths for d in args.depths]
    runs += [
        (d, min(args.widths), k, None) for k in args.kernels[1:] for d in args.depths
    ]
    runs += [(d, control_width, args.kernels[0], 1) for d in args.depths]
    # finished runs are kept in rows.jsonl / curves.json, so an interrupted sweep
    # resumes where it stopped
    done_file, curves_file = args.out / "rows.jsonl", args.out / "curves.json"
    done = [json.loads(line) for line in done_file.open()] if done_file.exists() else []
    curves = json.loads(curves_file.read_text()) if curves_file.exists() else {}
    rows = []
    for depth, width, kernel, steps in runs:
        text = set_param(base, "model", "depth", depth)
        text = set_param(text, "model", "width", width)
        text = set_param(text, "model", "kernel_size", kernel)
        text = set_param(
            text, "train", "local_steps", "null" if steps is None else steps
        )
        (project / "params.yaml").write_text(text)
        name = f"d{depth}-w{width}-k{kernel}" + ("-1step" if steps else "")
        previous = [r for r in done if r["run"] == name and name in curves]
        if previous:
            rows.append(previous[-1])
            continue
        started = time.perf_counter()
        _run([fedpipe, "run"], project, env)
        fed = json.loads((project / "metrics/summary.json").read_text())
        if steps is None:
            central_cmd = [fedpipe, "centralized"]
        else:  # FedAvg with one step: SGD on batches of clients x batch size
            batch = 32 * args.clients
            central_cmd = [
                fedpipe, "centralized", "--steps", str(args.rounds * steps),
                "--batch-size", str(batch),
            ]  # fmt: skip
        _run(central_cmd, project, env)
        central = json.loads((project / "metrics/centralized.json").read_text())
        # the round metrics and health records are cache: false outputs that
        # git does not track yet: include them so each experiment keeps its own
        keep = ["metrics/centralized.json", "metrics/rounds", "metrics/health",
                "metrics/summary.json"]  # fmt: skip
        _run([dvc, "exp", "save", "-f", "-n", name,
              *[a for k in keep for a in ("--include-untracked", k)]],
             project, env)  # fmt: skip
        layers = _layer_divergence(project, args.rounds)
        curves[name] = layers
        row = {
            "run": name,
            "depth": depth,
            "width": width,
            "kernel": kernel,
            "local_steps": steps or "all",
            "federated_acc": fed["global"]["accuracy"],
            "centralized_acc": central["global"]["accuracy"],
            "gap": round(central["global"]["accuracy"] - fed["global"]["accuracy"], 4),
            "mean_divergence": round(sum(v for _, v in layers) / len(layers), 4),
            "first_layer_divergence": round(layers[0][1], 4),
            "last_layer_divergence": round(layers[-1][1], 4),
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        with done_file.open("a") as f:
            f.write(json.dumps(row) + "\n")
        curves_file.write_text(json.dumps(curves, indent=1))
        print(json.dumps(row), flush=True)
    with open(args.out / "sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cols = ["run", "federated_acc", "centralized_acc", "gap", "mean_divergence",
            "first_layer_divergence", "last_layer_divergence"]  # fmt: skip
    lines = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    _plots(args.out, rows, curves)


def _plots(out: Path, rows: list[dict], curves: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, layers in curves.items():
        if name.endswith("1step"):
            continue
        ax.plot(range(1, len(layers) + 1), [v for _, v in layers], marker="o",
                label=name)  # fmt: skip
    ax.set_xlabel("layer index (1 = input side; last = output layer)")
    ax.set_ylabel("D_l, mean over rounds")
    ax.set_title("Divergence of client updates per layer")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "divergence_by_layer.png", dpi=110)
    fig, ax = plt.subplots(figsize=(6, 4))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        key = f"w{r['width']} k{r['kernel']}" + (
            " 1 step" if r["local_steps"] != "all" else ""
        )
        series.setdefault(key, []).append((r["depth"], r["gap"]))
    for key, points in series.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=key, linestyle="--" if "step" in key else "-")  # fmt: skip
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("depth (conv layers)")
    ax.set_ylabel("centralized acc - federated acc")
    ax.set_title("Accuracy gap of federated training")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "gap_by_depth.png", dpi=110)


if __name__ == "__main__":
    main()
