"""Seconds per federation round: ``fedpipe run`` against two plain loops.

Both run the default workload on the same data, partition, model and settings
(10 IID clients, 1 local epoch, batch 32, SGD lr 0.05, small_cnn on the 5,000
MNIST digits): the hand loop is one compiled Keras model with weights swapped per
client, FedAvg in NumPy and a global evaluation per round: the floor to measure
against. fedpipe's figure is the pipeline run for the rounds: a Prefect task run per
round with its clients' training task under it, the evaluations of the global model
on the held-out set and every client, the local models' evaluations, the health
record, the round's versioned outputs, the dvc.lock records, the summary stage, the
doctor and the HTML report.

A third variant runs fedpipe's own library (:func:`fedpipe.federation.round.run_round`,
the same work as fedpipe's rounds) as a plain loop: fedpipe against it is the cost of
orchestration and versioning alone.

Two figures per variant: seconds per round in the steady state (the median of
rounds 2..R: for fedpipe, between the times its round metrics files were
written), and the whole loop or run divided by the rounds (which also carries
the first round's compilation and, for fedpipe, the flow run's start, the
summary, the doctor and the report). Each variant runs in its own fresh process,
alternating, ``--repeats`` times; medians are reported, with the ratios. Run from
the repository root:

    python benchmarks/bench_rounds.py [--rounds 10] [--repeats 2] [--peers]

``--modes ...,command`` adds ``fedpipe run`` as a person types it, timed from
process start to exit after a change of ``train.lr`` (data stages cached, the
report drawn), against which pfl's whole script (process start to its final
evaluation) is the peer's whole command: issue 39's "whole command" figure.
``first`` adds the first ``fedpipe run`` of a fresh ``git clone`` of this
repository (every stage, the data stages too; the Prefect server already up).

``--peers`` adds pfl-research (Apple's simulator built for speed,
``benchmarks/peers/pfl_peer.py``) to the alternation, at fedpipe's training rows
(3,200: fedpipe's clients keep a fifth of their 400 rows for their local test); it
runs in pfl's own virtualenv, ``$PFL_VENV`` (default ``.venv-pfl``), and is left out
with a message when that is missing (docs/benchmarks.md says how to make it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import PEERS, library_rounds, pfl_python  # noqa: E402

# the tools beside this interpreter: works with .venv/bin/python, activated or not
FEDPIPE = str(Path(sys.executable).with_name("fedpipe"))
DVC = str(Path(sys.executable).with_name("dvc"))
ROOT = Path(__file__).resolve().parent.parent  # the repository (a fedpipe project)

for _k, _v in {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "DVC_NO_ANALYTICS": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_k, _v)


def hand_loop(project: Path, rounds: int) -> dict[str, float]:
    """The floor: one Keras model reused, weights swapped, FedAvg in NumPy."""
    os.chdir(project)
    import keras
    import numpy as np

    from fedpipe.config import layout
    from fedpipe.config.params import load_params
    from fedpipe.core.weights import load_weights
    from fedpipe.model.process import data_for
    from fedpipe.model.zoo import build_model

    params = load_params()
    data = data_for(layout.PREPARED_DIR, layout.MANIFEST)
    spec = data.spec
    model = build_model(
        params.model.name,
        spec.input_shape,
        len(spec.classes),
        **params.model.settings(),
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=params.train.lr),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    weights = load_weights(layout.model_weights(0))
    # fedpipe's imports turn on TensorFlow op determinism, under which fit's
    # shuffling needs a seed; a hand loop that wants repeatable runs sets one too
    keras.utils.set_random_seed(params.seed)
    start = time.perf_counter()
    stamps = []
    for _ in range(rounds):
        updates, sizes = [], []
        for client in data.clients:
            model.set_weights(weights)
            model.fit(
                client.x_train,
                client.y_train,
                batch_size=params.train.batch_size,
                epochs=params.train.epochs,
                verbose=0,
            )
            updates.append(model.get_weights())
            sizes.append(len(client.y_train))
        coef = np.asarray(sizes, dtype=np.float64) / sum(sizes)
        weights = [
            sum(c * u[i] for c, u in zip(coef, updates, strict=True)).astype(np.float32)
            for i in range(len(weights))
        ]
        model.set_weights(weights)
        loss, acc = model.evaluate(data.x_test, data.y_test, verbose=0)
        stamps.append(time.perf_counter())
    print(f"hand loop: final accuracy {acc:.4f}", file=sys.stderr)
    return _timing(start, stamps)


def library_loop(project: Path, rounds: int) -> dict[str, float]:
    """The same computation as fedpipe's rounds, as a plain loop over the library.

    :func:`fedpipe.federation.loop.run_federation` on the inputs fedpipe's
    ``load-round`` task builds (same training step, sampling, seeds, FedAvg, every
    evaluation and the health record), the clients side by side in this process as
    ``fedpipe run`` trains them (``runtime.threads``): no Prefect, no files, no
    DVC. The difference to fedpipe is the cost of orchestration and versioning
    alone.
    """
    times, out = library_rounds(project, rounds)
    accuracy = out.record.global_test["accuracy"]
    print(f"library loop: final accuracy {accuracy:.4f}", file=sys.stderr)
    return _timing(times.start, times.ends)


def _timing(start: float, stamps: list[float]) -> dict[str, float]:
    """Seconds per round: the whole loop / rounds, and the median round after the
    first (steady state: no compilation, no start-up)."""
    return {
        "whole": (stamps[-1] - start) / len(stamps),
        "steady": float(statistics.median(np.diff(stamps))),
    }


def fedpipe_rounds(project: Path, rounds: int) -> dict[str, float]:
    """fedpipe's pipeline for the rounds and the summary (data stages already done)."""
    os.chdir(project)
    from orchestration.server import ensure_api

    ensure_api()
    from fedpipe.config.params import load_params
    from flows.pipeline import run_pipeline
    from orchestration.heartbeat import own_heartbeat

    params = load_params()
    start = time.perf_counter()
    with own_heartbeat():  # as `fedpipe run` calls it
        ran = run_pipeline(params, force=False)
    elapsed = time.perf_counter() - start
    n_rounds = sum(s.startswith("round@") for s in ran)
    assert n_rounds == rounds, f"expected {rounds} rounds to run, ran {ran}"
    summary = json.loads(Path("metrics/summary.json").read_text())
    print(
        f"fedpipe: final accuracy {summary['global']['accuracy']:.4f}", file=sys.stderr
    )
    # steady state: between the times the rounds' metrics files were written
    written = [Path(f"metrics/rounds/round-{k}.json") for k in range(1, rounds + 1)]
    stamps = np.array([p.stat().st_mtime for p in written])
    return {
        "whole": elapsed / rounds,
        "steady": float(statistics.median(np.diff(stamps))),
    }


def fedpipe_command(project: Path, rounds: int) -> dict[str, float]:
    """``fedpipe run`` as a person types it, timed from process start to exit
    (report included), after a change of ``train.lr`` (the data stages stay
    cached, every round reruns): issue 39's whole command. Its ``steady`` is
    between the round metrics files' writes, as :func:`fedpipe_rounds`'s."""
    params = project / "params.yaml"
    text = params.read_text()
    lr = 0.05 if "lr: 0.049" in text else 0.049  # a change every time
    params.write_text(re.sub(r"(?m)^  lr: [0-9.e-]+", f"  lr: {lr}", text))
    return _timed_run(project, rounds)


def fedpipe_first(project: Path, rounds: int) -> dict[str, float]:
    """``fedpipe run`` as typed in a fresh clone of this repository (the README's
    first command after the install; the clone is the project): every stage
    runs, the data stages included, timed from process start to exit. The
    Prefect server already runs (issue 39's "first run of a fresh clone")."""
    clone = project.parent / f"clone-{time.time_ns()}"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    params = clone / "params.yaml"
    text = params.read_text()
    params.write_text(re.sub(r"(?m)^  rounds: \d+", f"  rounds: {rounds}", text))
    return _timed_run(clone, rounds)


def _timed_run(project: Path, rounds: int) -> dict[str, float]:
    """``fedpipe -C project run`` timed from process start to exit; ``steady``
    between the round metrics files' writes, as :func:`fedpipe_rounds`'s."""
    start = time.perf_counter()
    subprocess.run(
        [FEDPIPE, "-C", str(project), "run"], check=True, stdout=subprocess.DEVNULL
    )
    wall = time.perf_counter() - start
    written = [project / f"metrics/rounds/round-{k}.json" for k in range(1, rounds + 1)]
    stamps = np.array([p.stat().st_mtime for p in written])
    return {
        "whole": wall / rounds,
        "steady": float(statistics.median(np.diff(stamps))),
        "command": wall,
    }


def pfl_rounds(project: Path, rounds: int) -> dict[str, float]:
    """pfl-research on the same digits, clients, model layout and settings, at
    fedpipe's training rows; its own clock: rounds 2..R, and its training loop
    (not its imports and data set-up) over the rounds."""
    python = pfl_python()
    assert python is not None
    start = time.perf_counter()
    out = subprocess.run(
        [str(python), str(PEERS / "pfl_peer.py")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ROUNDS": str(rounds), "TRAIN": "3200"},
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"pfl: final accuracy {result['final_acc']:.4f}", file=sys.stderr)
    return {
        "steady": result["round_s_median"],
        "whole": result["train_s"] / rounds,
        "command": time.perf_counter() - start,  # the whole script, imports included
    }


def _child(mode: str, project: Path, rounds: int) -> dict[str, float]:
    if mode in ("pfl", "command", "first"):  # its own process, nothing around it
        return VARIANTS[mode](project, rounds)
    start = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--project",
            str(project),
            "--rounds",
            str(rounds),
        ],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    figures = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    return {**figures, "command": time.perf_counter() - start}


def early_stages(project: Path) -> None:
    """The data stages and ``init`` of ``project``, each a ``fedpipe stage``
    (output captured) recorded with ``dvc commit``: only the rounds are left."""
    for stage in ("mnist5k", "ingest", "validate", "partition", "preprocess", "init"):
        subprocess.run(
            [FEDPIPE, "-C", str(project), "stage", stage],
            check=True,
            capture_output=True,
        )
        subprocess.run([DVC, "commit", "-q", "-f", stage], cwd=project, check=True)


def _reset_rounds(project: Path) -> None:
    """Forget the rounds (not the data stages) so fedpipe recomputes them."""
    lock = project / "dvc.lock"
    import yaml

    data = yaml.safe_load(lock.read_text())
    data["stages"] = {
        k: v
        for k, v in data["stages"].items()
        if not (k.startswith("round@") or k == "summary")
    }
    lock.write_text(yaml.safe_dump(data, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--peers", action="store_true", help="add pfl-research ($PFL_VENV)"
    )
    parser.add_argument(
        "--modes",
        default="hand,library,fedpipe",
        help="runners to time, comma-separated (of hand, library, fedpipe, "
        "command: `fedpipe run` as a whole command, first: the first `fedpipe "
        "run` of a fresh clone of this repository)",
    )
    parser.add_argument("--child", choices=list(VARIANTS))
    parser.add_argument("--project", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(VARIANTS[args.child](args.project, args.rounds)))
        return

    workdir = Path(tempfile.mkdtemp(prefix="fedpipe-bench-"))
    project = workdir / "project"
    subprocess.run([FEDPIPE, "init", str(project)], check=True)
    subprocess.run([FEDPIPE, "-C", str(project), "sync"], check=True)
    params = project / "params.yaml"
    text = params.read_text()
    params.write_text(re.sub(r"(?m)^  rounds: \d+", f"  rounds: {args.rounds}", text))
    subprocess.run([FEDPIPE, "-C", str(project), "sync"], check=True)
    early_stages(project)

    modes = [m for m in args.modes.split(",") if m in VARIANTS and m != "pfl"]
    if args.peers and pfl_python() is None:
        print(
            "pfl-research left out: no $PFL_VENV/bin/python (PFL_VENV="
            f"{os.environ.get('PFL_VENV', '.venv-pfl')}); docs/benchmarks.md says "
            "how to make that virtualenv",
            file=sys.stderr,
        )
    elif args.peers:
        modes.append("pfl")
    times: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for i in range(args.repeats):
        for mode in modes:
            if mode == "fedpipe":
                _reset_rounds(project)
            if mode in ("command", "first"):
                _quiet_server()
            t = _child(mode, project, args.rounds)
            times[mode].append(t)
            print(
                f"run {i + 1}: {mode:8s} {t['steady']:.2f} s/round steady, "
                f"{t['whole']:.2f} whole run / rounds",
                flush=True,
            )
    keys = ("steady", "whole", "command")
    med = {
        mode: {k: statistics.median(t[k] for t in ts) for k in keys}
        for mode, ts in times.items()
    }
    print()
    print(
        f"| runner (median of {args.repeats}) | s/round, rounds 2..{args.rounds} "
        "| fedpipe / runner | whole run / rounds | fedpipe / runner "
        "| whole command s (process start to exit) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    fed = med.get("fedpipe", next(iter(med.values())))
    for mode, title in TITLES.items():
        if mode not in med:
            continue
        m = med[mode]
        print(
            f"| {title} | {m['steady']:.2f} | {fed['steady'] / m['steady']:.2f} "
            f"| {m['whole']:.2f} | {fed['whole'] / m['whole']:.2f} "
            f"| {m['command']:.1f} |"
        )
    for mode, what in (("command", "command"), ("first", "first run of a clone")):
        if mode in med and "pfl" in med:
            ratio = med[mode]["command"] / med["pfl"]["command"]
            print(
                f"\nwhole `fedpipe run` ({what}) / pfl's whole script: {ratio:.2f}x "
                f"({med[mode]['command']:.1f} s against {med['pfl']['command']:.1f})"
            )


VARIANTS = {
    "hand": hand_loop,
    "library": library_loop,
    "fedpipe": fedpipe_rounds,
    "command": fedpipe_command,
    "first": fedpipe_first,
    "pfl": pfl_rounds,
}
TITLES = {
    "hand": "hand-written Keras FedAvg loop (`model.fit`, weights swapped)",
    "library": "the same rounds as a plain loop over `fedpipe`'s library",
    "fedpipe": (
        "`fedpipe run` (a task run per round, outputs, dvc.lock, summary, report)"
    ),
    "command": "`fedpipe run` as typed, after a change of train.lr (report included)",
    "first": "`fedpipe run` as typed, first run of a fresh clone (every stage)",
    "pfl": "pfl-research 0.6.0 (SimulatedBackend, FedAvg), 3,200 training rows",
}


def _quiet_server() -> None:
    """The Prefect server the command reports to is up before the clock starts
    (issue 39 measures a first run with "the Prefect server already running")."""
    from orchestration.server import ensure_api

    ensure_api()


if __name__ == "__main__":
    main()
