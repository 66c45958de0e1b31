"""What one process keeps between rounds: the compiled model and the loaded arrays.

Both are keyed by what they were made from (the model spec; the files' identity),
so a change on disk is never served stale, and a process that runs many rounds pays
for TensorFlow graph building and data decoding once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fedpipe.data import prepared_spec
from fedpipe.ingest import FEATURES_FILE, SAMPLES_FILE, open_features, read_samples
from fedpipe.jsonio import read_json
from fedpipe.splits import FederatedData, federated_data
from fedpipe.training import ModelRunner, ModelSpec

_lock = threading.Lock()
_runners: dict[ModelSpec, ModelRunner] = {}
_data: dict[tuple, FederatedData] = {}
_training: set[ModelSpec] = set()


def runner_for(spec: ModelSpec) -> ModelRunner:
    """The process's compiled model for ``spec`` (built on first use)."""
    return cached_runner(spec)[0]


def training_runner(spec: ModelSpec) -> tuple[ModelRunner, bool]:
    """The process's compiled model for client training, and whether this is
    the first client trained with it in this process (to say so once)."""
    runner = runner_for(spec)
    with _lock:
        first = spec not in _training
        _training.add(spec)
    return runner, first


def cached_runner(spec: ModelSpec) -> tuple[ModelRunner, bool]:
    """The process's compiled model for ``spec``, and whether this call built it."""
    with _lock:
        built = spec not in _runners
        if built:
            _runners[spec] = ModelRunner(spec)
        return _runners[spec], built


def where_am_i() -> str:
    """This process, for logs: ``process 4242`` or ``Dask worker tcp://.. (...)``."""
    label = f"process {os.getpid()}"
    if "distributed" in sys.modules:
        from distributed import get_worker

        try:
            return f"Dask worker {get_worker().address} ({label})"
        except ValueError:  # not inside a Dask worker
            pass
    return label


def _identity(path: Path) -> tuple:
    # ctime and inode too: a long-lived process (the warm worker of `dvc repro`)
    # outlives checkouts, and DVC may put back a file with its cached mtime
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def data_for(prepared: Path, manifest: Path) -> FederatedData:
    """The federated arrays for these files (re-read when any of them changes)."""
    files = (prepared / FEATURES_FILE, prepared / SAMPLES_FILE, manifest)
    key = tuple(_identity(f) for f in files)
    with _lock:
        if key not in _data:
            _data.clear()
            _data[key] = federated_data(
                open_features(prepared),
                read_samples(prepared),
                read_json(manifest),
                prepared_spec(prepared),
            )
        return _data[key]


class DaskScheduler:
    """The Dask scheduler client training is sent to, for the length of one run.

    ``address`` names an existing scheduler (``dask scheduler`` somewhere); without
    one, a local cluster of ``workers`` single-threaded processes is started (by
    :meth:`start`, or on first use) and closed when the ``with`` block ends. The
    cluster outlives the round subflows, so each worker keeps its compiled model
    (:func:`runner_for`) from client to client and round to round.
    """

    def __init__(self, *, address: str | None, workers: int) -> None:
        self._address = address
        self._workers = workers
        self._cluster: Any = None
        self._starting: Future[Any] | None = None
        self._announced = False

    def start(self) -> None:
        """Start the local cluster in the background, if this run needs one.

        Its workers import TensorFlow and fedpipe's tasks as they start, while the
        data stages run, instead of when the first round waits for them.
        """
        if self._address is None and self._starting is None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dask-start")
            self._starting = pool.submit(self._local_cluster)
            pool.shutdown(wait=False)

    def _local_cluster(self) -> Any:
        from distributed import LocalCluster

        return LocalCluster(
            n_workers=self._workers,
            threads_per_worker=1,  # one client at a time per compiled model
            processes=True,
            dashboard_address=None,
            preload=["tasks.federation"],
        )

    def address(self) -> str:
        """The scheduler's address (waits for the local cluster to be up)."""
        if self._announced:
            return self._address  # type: ignore[return-value]
        from prefect.logging import get_logger

        # the in-process scheduler logs every client connection (one per round)
        # at INFO; prefect-dask announces each connection, and a dashboard
        for name in ("distributed", "prefect.task_runner.dask"):
            logging.getLogger(name).setLevel(logging.WARNING)
        where = f"the Dask scheduler at {self._address}"
        if self._address is not None:
            where += f" ({check_workers(self._address)} workers)"
        else:
            self.start()
            assert self._starting is not None
            self._cluster = self._starting.result()
            self._address = self._cluster.scheduler_address
            where = (
                f"a local Dask cluster of {self._workers} worker processes "
                f"({self._address})"
            )
        get_logger("fedpipe").info("client training runs on %s", where)
        self._announced = True
        return self._address  # type: ignore[return-value]

    def __enter__(self) -> DaskScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._starting is not None:
            if self._starting.exception() is None:  # waits for a start under way
                self._cluster = self._starting.result()
            self._starting = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def check_workers(address: str) -> int:
    """Number of workers at the scheduler ``address``; each must run one thread.

    A worker process keeps one compiled model (:func:`runner_for`), which trains
    one client at a time: workers are started with ``--nthreads 1``.

    Raises
    ------
    ValueError
        No worker is connected, or one runs several threads.
    """
    from distributed import Client

    with Client(address, timeout=30, set_as_default=False) as client:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        raise ValueError(
            f"runtime.dask_address={address}: no Dask worker is connected; start "
            f"some with `dask worker {address} --nthreads 1`"
        )
    threaded = sorted(w for w, info in workers.items() if info["nthreads"] != 1)
    if threaded:
        raise ValueError(
            f"runtime.dask_address={address}: worker {threaded[0]} runs "
            f"{workers[threaded[0]]['nthreads']} threads; fedpipe needs one thread "
            "per worker process (it keeps one compiled model per process): start "
            f"workers with `dask worker {address} --nthreads 1 --nworkers N`"
        )
    return len(workers)
