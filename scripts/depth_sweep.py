"""The seed paper's sweep (divergence accumulation in deeper models) as one
`fedpipe sweep`.

"Unlocking the Potential of Federated Learning for Deeper Models" (2023) reports
that deeper models lose accuracy under federated learning even with i.i.d.
clients, because client dissimilarity accumulates layer by layer; wider models
and smaller receptive fields reduce it. This script writes that design as a grid
file and runs it with `fedpipe sweep --centralized` in a scratch project
(`--out/project`, made once): depth x width at the first kernel size, the other
kernel sizes at the narrowest width, and the control (one local step per round
against its large-batch centralized counterpart). Each run is a DVC experiment
there (`dvc exp show`); the sweep's results (`runs.csv`, `table.md`,
`layers.json`) and plots (`gap-by-model_depth.png`, `divergence_by_layer.png`)
land in `--out`. Killed, the same command resumes.

    python scripts/depth_sweep.py --out DIR [--model cnn] [--depths 2 4 8]
        [--widths 8 32] [--kernels 3 5] [--rounds 8] [--epochs 2] [--clients 5]
        [--seeds 3] [-j 1] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent


def grid(args: argparse.Namespace) -> dict:
    """The sweep's grid file: fixed settings and three grids."""
    base = {
        "model.name": args.model,
        "federation.rounds": args.rounds,
        "federation.clients": args.clients,
        "federation.fraction_fit": 1.0,
        "train.epochs": args.epochs,
        "partition.method": "iid",
    }
    narrow = min(args.widths)
    return {
        "base": base,
        "grids": {
            "depth-width": {
                "model.depth": args.depths,
                "model.width": args.widths,
                "model.kernel_size": args.kernels[0],
                "train.local_steps": None,
            },
            "kernel": {
                "model.depth": args.depths,
                "model.width": narrow,
                "model.kernel_size": args.kernels,
                "train.local_steps": None,
            },
            "one-step": {
                "model.depth": args.depths,
                "model.width": args.control_width or args.widths[0],
                "model.kernel_size": args.kernels[0],
                "train.local_steps": 1,
            },
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("depth-sweep"))
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--kernels", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--control-width", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    project = out / "project"
    fedpipe = str(BIN / "fedpipe")
    if not project.exists():
        subprocess.run([fedpipe, "init", str(project)], check=True, env=env)
        git = ["git", "-c", "user.name=fedpipe", "-c", "user.email=fedpipe@invalid"]
        subprocess.run([*git, "add", "-A"], cwd=project, check=True)
        subprocess.run([*git, "commit", "-qm", "baseline"], cwd=project, check=True)
    design = out / "depth-sweep.yaml"
    design.write_text(yaml.safe_dump(grid(args), sort_keys=False))
    sweep = [fedpipe, "-C", str(project), "sweep", "--grid", str(design),
             "--name", "depth", "--out", str(out), "--centralized",
             "--seeds", str(args.seeds), "-j", str(args.jobs)]  # fmt: skip
    code = subprocess.run(sweep + (["--dry-run"] if args.dry_run else []), env=env)
    if code.returncode != 0 or args.dry_run:
        sys.exit(code.returncode)
    plot = [fedpipe, "sweep", "plot", str(out), "--x", "model.depth", "--y", "gap",
            "--hue", "model.width"]  # fmt: skip
    sys.exit(subprocess.run(plot, env=env).returncode)


if __name__ == "__main__":
    main()
