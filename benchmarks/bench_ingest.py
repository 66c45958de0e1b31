"""Images per second and peak memory of ``ingest_image_folder`` on generated images.

Generates (seeded) a folder of ``--n`` images with random sizes 80..140 px per
side, RGB, JPEG and PNG mixed, in two classes (``with_mask/``, ``without_mask/``),
in a temporary directory; the generation is timed separately. Then ingests it at
``--size`` x ``--size`` RGB in a fresh subprocess and reports the wall time (of
the whole child process, interpreter start and imports included, and of the ingest
call alone), images per second, the peak RSS of the ingest process, and the size
of ``features.npy`` next to the size of the uint8 array it holds: a peak RSS well
below the array size shows the features are streamed to disk, not held in memory
(let alone several times).

The generated files are read warm from the page cache (they were just written).
Run from the repository root:

    python benchmarks/bench_ingest.py [--n 20000] [--size 100] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CLASSES = ("with_mask", "without_mask")
MIN_SIDE, MAX_SIDE = 80, 140  # pixels, inclusive
REPO = Path(__file__).resolve().parents[1]


def generate(folder: Path, n: int, *, seed: int) -> None:
    """Write ``n`` smooth random RGB images (JPEG or PNG) into class subfolders.

    Each image is a 6 x 6 random colour grid upscaled bilinearly to a random
    size in [80, 140] px per side, plus mild noise, so files compress like
    photos rather than like pure noise.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in CLASSES:
        (folder / name).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        height, width = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, 2))
        grid = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        smooth = np.asarray(
            Image.fromarray(grid).resize((width, height), Image.Resampling.BILINEAR),
            dtype=np.int16,
        )
        noise = rng.integers(-8, 9, smooth.shape, dtype=np.int16)
        pixels = np.clip(smooth + noise, 0, 255).astype(np.uint8)
        label = CLASSES[int(rng.integers(0, len(CLASSES)))]
        image = Image.fromarray(pixels)
        if rng.random() < 0.5:
            image.save(folder / label / f"img_{i:06d}.jpg", quality=90)
        else:
            image.save(folder / label / f"img_{i:06d}.png")


def _status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def child(data: Path, out: Path, size: int) -> None:
    """The measured process: import, ingest, print one JSON line."""
    from fedpipe.data.ingest import ingest_image_folder

    rss_before_kb = _status_kb("VmRSS")
    result = ingest_image_folder(
        data, out_dir=out, image_size=(size, size), color_mode="rgb"
    )
    report = {
        "ingest_seconds": result.seconds,
        "n_samples": result.n_samples,
        "n_problems": result.n_problems,
        "rss_before_ingest_kb": rss_before_kb,
        "vm_hwm_kb": _status_kb("VmHWM"),
    }
    print(json.dumps(report))


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:,.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="number of images")
    parser.add_argument("--size", type=int, default=100, help="output side, px")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.data, args.out, args.size)
        return

    workdir = Path(tempfile.mkdtemp(prefix="fedpipe-bench-ingest-"))
    data, out = workdir / "data", workdir / "prepared"
    try:
        start = time.perf_counter()
        generate(data, args.n, seed=args.seed)
        gen_seconds = time.perf_counter() - start
        data_bytes = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
        print(
            f"generated {args.n:,} images ({_mb(data_bytes)}) in {gen_seconds:.1f} s",
            flush=True,
        )

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, __file__, "--child", "--data", str(data)]
        command += ["--out", str(out), "--size", str(args.size)]
        start = time.perf_counter()
        done = subprocess.run(
            command, check=True, stdout=subprocess.PIPE, text=True, env=env
        )
        wall = time.perf_counter() - start
        report = json.loads(done.stdout.strip().splitlines()[-1])
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: kB

        features = out / "features.npy"
        array_bytes = args.n * args.size * args.size * 3
        seconds = report["ingest_seconds"]
        n_done = report["n_samples"]
        rows = [
            ("wall time, child process (start + imports + ingest)", f"{wall:.1f} s"),
            ("ingest call (`IngestResult.seconds`)", f"{seconds:.1f} s"),
            ("images/s (ingest call)", f"{n_done / seconds:,.0f}"),
            ("images/s (child wall time)", f"{n_done / wall:,.0f}"),
            ("problems (non-ok rows)", str(report["n_problems"])),
            (
                "RSS after imports, before ingest",
                _mb(report["rss_before_ingest_kb"] * 1024),
            ),
            ("peak RSS of the ingest process (ru_maxrss)", _mb(peak_kb * 1024)),
            ("peak RSS (VmHWM, read by the child)", _mb(report["vm_hwm_kb"] * 1024)),
            (
                "peak RSS minus RSS before ingest",
                _mb((report["vm_hwm_kb"] - report["rss_before_ingest_kb"]) * 1024),
            ),
            ("features.npy on disk", _mb(features.stat().st_size)),
            (
                f"uint8 array {n_done:,} x {args.size} x {args.size} x 3",
                _mb(array_bytes),
            ),
            ("peak RSS / array size", f"{peak_kb * 1024 / array_bytes:.2f}"),
        ]
        print()
        print(f"| ingest of {args.n:,} images at {args.size}x{args.size} RGB | |")
        print("|---|---:|")
        for label, value in rows:
            print(f"| {label} | {value} |")
    finally:
        if args.keep:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
