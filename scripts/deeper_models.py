"""The seed paper's experiment (divergence accumulation in deeper models), run.

Makes a scratch fedpipe project on the default data in ``--out/project`` (once),
then runs the design of ``docs/deeper-models/design.yaml`` there as one
``fedpipe sweep --centralized`` (every run a DVC experiment of that project:
``dvc exp show`` there lists them) and draws its plots: the gap against depth
(one line per width and kernel size), D_l against layer index (one line per
depth), and the gap against the mean D_l. Killed, the same command resumes;
finished runs are not rerun. Results: ``--out`` (``runs.csv``, ``table.md``,
``layers.json``, the plots); ``docs/deeper-models/README.md`` says why the design
is what it is and what it showed.

    python scripts/deeper_models.py --out DIR [-j 2] [--seeds 3] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "deeper-models" / "design.yaml"


def _project(project: Path, env: dict) -> None:
    """A fresh ``fedpipe init`` project, committed (experiments are git refs)."""
    subprocess.run([str(BIN / "fedpipe"), "init", str(project)], check=True, env=env)
    git = ["git", "-c", "user.name=fedpipe", "-c", "user.email=fedpipe@invalid"]
    if not (project / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "baseline"], cwd=project, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("deeper-models"))
    parser.add_argument("--design", type=Path, default=DESIGN)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    project = out / "project"
    if not project.exists():
        _project(project, env)
    fedpipe = str(BIN / "fedpipe")
    sweep = [fedpipe, "-C", str(project), "sweep", "--grid", str(args.design.resolve()),
             "--name", "deeper", "--out", str(out), "--centralized",
             "--seeds", str(args.seeds), "-j", str(args.jobs)]  # fmt: skip
    code = subprocess.run(sweep + (["--dry-run"] if args.dry_run else []), env=env)
    if code.returncode != 0 or args.dry_run:
        sys.exit(code.returncode)
    for x, y, hue in (("model.depth", "gap", "model.width"),
                      ("model.depth", "gap", "model.kernel_size"),
                      ("mean_divergence", "gap", "model.depth")):  # fmt: skip
        plot = [fedpipe, "sweep", "plot", str(out), "--x", x, "--y", y, "--hue", hue]
        subprocess.run(plot, env=env, check=True)


if __name__ == "__main__":
    main()
