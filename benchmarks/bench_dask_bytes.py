"""Bytes a federation round sends to Dask: client data by reference against by value.

The default workload (the 5,000 MNIST digits, 10 IID clients, small_cnn, every
client each round) runs ``--rounds`` rounds of
:func:`fedpipe.federation.round.run_round` twice on one 2-worker ``LocalCluster``
(single-threaded worker processes, as ``runtime.runner: dask`` starts): once with the
clients' data as :func:`fedpipe.data.splits.open_federated` gives it (a reference to the
prepared files, opened by each worker), once with every client's float32 arrays held in
its job (what a job carried before). Per round it reports

* the pickled jobs' size (``cloudpickle.dumps(job)``, summed over the clients);
* Dask's own counters: bytes the client sent the scheduler (its batched stream:
  the task graphs, arguments included) and bytes the scheduler sent the workers
  (their batched streams);
* how many data sets each worker has opened from the files (none after the
  arrays variant, which runs first; one each after the reference variant).

Both variants, and a plain in-process loop, must give bitwise-identical models.
Run from the repository root::

    python benchmarks/bench_dask_bytes.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedpipe.config.params import Params
    from fedpipe.data.splits import FederatedData
    from fedpipe.model.jobs import MapClients

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _project(prefix: str) -> tuple[Params, FederatedData]:
    """The default params, data and partition in a new temporary folder named
    ``prefix...`` (cwd moves there); the params and the federated data."""
    from fedpipe.config import layout
    from fedpipe.config.params import load_params
    from fedpipe.core.jsonio import write_json
    from fedpipe.data import sources as fdata
    from fedpipe.data.partition.deal import partition_prepared
    from fedpipe.data.sources import prepared_spec
    from fedpipe.model.process import data_for

    root = Path(tempfile.mkdtemp(prefix=prefix))
    repo = Path(__file__).resolve().parents[1]
    (root / "params.yaml").write_text((repo / "params.yaml").read_text())
    os.chdir(root)
    params = load_params()
    fdata.write_table(fdata.load_mnist5k(), Path(params.data.path))
    fdata.ingest(params.data, layout.PREPARED_DIR)
    # the partition stage's own call (tasks/data.py)
    manifest = partition_prepared(
        layout.PREPARED_DIR,
        classes=prepared_spec(layout.PREPARED_DIR).classes,
        **params.partition_arguments(),
    )
    write_json(layout.MANIFEST, manifest)
    return params, data_for(layout.PREPARED_DIR, layout.MANIFEST)


def _by_value(data: FederatedData) -> FederatedData:
    """The same data with every client's float32 arrays held (the old jobs)."""
    from fedpipe.data.splits import ClientData, FederatedData

    clients = [
        ClientData(c.client, c.x_train, c.y_train, c.x_test, c.y_test)
        for c in data.clients
    ]
    return FederatedData(data.spec, data.x_test_lazy, data.y_test, clients)


def _train_on_worker(job: Any) -> Any:
    """One client's job on this worker's compiled model (as train-client does)."""
    from fedpipe.model.process import runner_for
    from fedpipe.model.trainer import run_client

    return run_client(job, runner_for(job.spec))


def _opened_here() -> int:
    from fedpipe.data import splits

    return len(splits._opened)


def _scheduler_sent(dask_scheduler: Any) -> int:
    return sum(bs.byte_count for bs in dask_scheduler.stream_comms.values())


def _rounds(
    params: Params, data: FederatedData, rounds: int, map_clients: MapClients
) -> list[str]:
    """``rounds`` rounds from the initial model; the sha256 of each round's
    weights."""
    from fedpipe.config import layout
    from fedpipe.data.sources import prepared_spec
    from fedpipe.federation.build import model_spec
    from fedpipe.federation.loop import OnRound, first_round, run_federation
    from fedpipe.model.process import runner_for

    spec = model_spec(params, prepared_spec(layout.PREPARED_DIR))
    first = first_round(params, spec=spec, data=data)
    hashes: list[str] = []

    def digest(out: Any) -> None:
        sha = hashlib.sha256()
        for w in out.weights:
            sha.update(w.tobytes())
        hashes.append(sha.hexdigest())

    run_federation(
        first,
        rounds=rounds,
        map_clients=map_clients,
        runner=runner_for(spec),
        callbacks=[OnRound(digest)],
    )
    return hashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import cloudpickle
    from benchkit import dask_client

    from fedpipe.federation.build import model_spec
    from fedpipe.model.process import runner_for
    from fedpipe.model.trainer import run_here

    params, data = _project("bench-dask-bytes-")
    model_bytes = None
    rows: list[dict] = []
    with dask_client() as client:
        results = {}
        for variant, held in (("arrays", _by_value(data)), ("reference", data)):

            def on_dask(jobs: Any, variant: str = variant) -> Any:
                nonlocal model_bytes
                model_bytes = sum(w.nbytes for w in jobs[0].task.global_weights)
                pickled = sum(len(cloudpickle.dumps(j)) for j in jobs)
                sent = client.scheduler_comm.byte_count
                to_workers = client.run_on_scheduler(_scheduler_sent)
                futures = [client.submit(_train_on_worker, j, pure=False) for j in jobs]
                out = client.gather(futures)
                del futures
                rows.append(
                    {
                        "variant": variant,
                        "round": jobs[0].task.round,
                        "jobs": len(jobs),
                        "pickled": pickled,
                        "client->scheduler": client.scheduler_comm.byte_count - sent,
                        "scheduler->workers": client.run_on_scheduler(_scheduler_sent)
                        - to_workers,
                    }
                )
                return out

            results[variant] = _rounds(params, held, args.rounds, on_dask)
            opened = client.run(_opened_here)
            print(f"{variant}: data sets opened per worker {sorted(opened.values())}")
        here = run_here(runner_for(model_spec(params, data.spec)))
        local = _rounds(params, data, args.rounds, here)
    mb = 2**20
    print(f"default run: {len(data.clients)} clients, model {model_bytes / mb:.2f} MiB")
    print(
        f"{'variant':10} {'round':>5} {'jobs':>4} {'pickled MiB':>12} "
        f"{'client->sched MiB':>18} {'sched->workers MiB':>19}"
    )
    for r in rows:
        print(
            f"{r['variant']:10} {r['round']:>5} {r['jobs']:>4} "
            f"{r['pickled'] / mb:>12.2f} {r['client->scheduler'] / mb:>18.2f} "
            f"{r['scheduler->workers'] / mb:>19.2f}"
        )
    same = results["reference"] == results["arrays"] == local
    print(f"models bitwise identical (reference, arrays, local): {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
