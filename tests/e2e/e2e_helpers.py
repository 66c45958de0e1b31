"""Helpers for the end-to-end tests: tiny projects and CLI calls."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent


TINY = {
    "seed": 7,
    "federation": {"clients": 3, "rounds": 4, "fraction_fit": 0.6, "min_clients": 2},
    "partition": {"method": "iid", "min_samples": 50},
    "train": {"epochs": 1, "batch_size": 32, "lr": 0.05},
    "model": {"name": "mlp"},
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(base.get(key) or {}, value) if isinstance(value, dict) else value
        )
    return out


def run_cli(
    args: list[str], cwd: Path, env: dict[str, str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command in a project; on unexpected failure show its output."""
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def make_project(path: Path, env: dict[str, str], **overrides: dict) -> Path:
    """A new fedpipe project (git + dvc initialised, committed) with tiny params."""
    run_cli([str(BIN / "fedpipe"), "init", str(path)], Path.cwd(), env)
    raw = yaml.safe_load((path / "params.yaml").read_text())
    raw.pop("round_chain")
    params = _merge(_merge(raw, TINY), overrides)
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_cli([str(BIN / "fedpipe"), "sync"], path, env)
    run_cli(["git", "add", "-A"], path, env)
    run_cli(["git", "commit", "-qm", "tiny experiment"], path, env)
    return path


def file_hashes(project: Path, pattern: str) -> dict[str, str]:
    """md5 of every file matching ``pattern`` under ``project``."""
    return {
        str(p.relative_to(project)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(project.glob(pattern))
    }


def write_image_folder(root: Path, *, per_class: int = 60, seed: int = 0) -> Path:
    """Two learnable classes of small images, mixed sizes and formats.

    ``with_mask`` images have a bright lower half, ``without_mask`` a bright upper
    half; sizes vary from 24 to 40 pixels; PNG and JPEG alternate; a few are
    grayscale.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for label, name in enumerate(("with_mask", "without_mask")):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            h, w = (int(v) for v in rng.integers(24, 41, size=2))
            img = rng.integers(0, 60, size=(h, w, 3)).astype(np.uint8)
            half = slice(h // 2, h) if label == 0 else slice(0, h // 2)
            img[half] = rng.integers(180, 256, size=img[half].shape)
            pil = Image.fromarray(img)
            if i % 7 == 0:
                pil = pil.convert("L")
            suffix = "png" if i % 2 == 0 else "jpg"
            pil.save(folder / f"img_{i:03d}.{suffix}")
    return root


def write_table(path: Path, *, rows: int = 300, seed: int = 0) -> Path:
    """Three Gaussian blobs in 8 features, with a hospital column (3 sites)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, size=rows)
    centers = rng.normal(0, 3, size=(3, 8))
    x = centers[labels] + rng.normal(0, 1, size=(rows, 8))
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(8)])
    df["label"] = labels
    df["hospital"] = [f"site-{i % 3}" for i in range(rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path
