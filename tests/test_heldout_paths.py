"""The held-out evaluation a round record holds does not depend on where the
project lies, on the process (hash seed, helpers free or busy) or on run order.

Issue 36 saw a central-DP run's held-out loss differ in the 7th digit between two
checkouts at different paths. A model whose logits are large (as a noised global
model's are: losses of tens, where a float32 ulp is 1e-6) is evaluated from a
memory-mapped copy of the same rows in two folders of different path lengths, in
two processes with different ``PYTHONHASHSEED`` and with and without helpers; the
per-sample losses, probabilities and the record's rounded metrics must be the
same bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

EVALUATE = textwrap.dedent(
    """
    import hashlib, json, sys
    import numpy as np
    from fedpipe.federation.records import _rounded
    from fedpipe.model.metrics import classification_metrics
    from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
    helpers = int(sys.argv[1])
    spec = ModelSpec("small_cnn", (16, 16, 1), 10, "sgd", 0.05)
    x = np.load("x.npy", mmap_mode="r")
    y = np.load("y.npy")
    runner = ModelRunner(spec)
    runner.helpers = [ModelRunner(spec) for _ in range(helpers)]
    # large weights: large logits and losses, as after central DP's noise
    weights = [w * np.float32(4) for w in initial_weights(spec, 5)]
    splits = [(x[:600], y[:600]), (x[600:], y[600:])]
    out = runner.predict_splits(weights, splits, batch_size=128)
    probs, losses = out[0]
    metrics = classification_metrics(y[:600], probs, losses)
    print(json.dumps({
        "losses": hashlib.sha256(losses.tobytes()).hexdigest(),
        "probs": hashlib.sha256(probs.tobytes()).hexdigest(),
        "clients": hashlib.sha256(out[1][1].tobytes()).hexdigest(),
        "loss": repr(metrics["loss"]),
        "record": _rounded(metrics),
    }, sort_keys=True))
    """
)


def _evaluate(folder: Path, *, helpers: int, hash_seed: str) -> dict:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONHASHSEED": hash_seed,
        # the project's path, as a checkout would carry it in its environment
        "FEDPIPE_TEST_PROJECT": str(folder),
    }
    out = subprocess.run(
        [sys.executable, "-c", EVALUATE, str(helpers)],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_held_out_evaluation_is_the_same_bytes_at_any_path(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(36)
    x = rng.random((700, 16, 16, 1), dtype=np.float32)
    y = rng.integers(0, 10, 700).astype(np.int64)
    short = tmp_path / "a"
    long = tmp_path / "some" / "much" / "longer" / "path" / "to" / "the" / "project"
    for folder in (short, long):
        folder.mkdir(parents=True)
        np.save(folder / "x.npy", x)
        np.save(folder / "y.npy", y)
    one = _evaluate(short, helpers=0, hash_seed="1")
    two = _evaluate(long, helpers=2, hash_seed="4242")
    assert one == two
    # the model is far from chance: the losses are large, a float32 ulp of them
    # shows in the record's 6 decimals if a sample's loss moves by one
    assert one["record"]["loss"] > 5
