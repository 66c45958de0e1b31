"""Training on Dask: the run's scheduler, waiting on its workers, TLS.

What one process keeps between rounds (its compiled models and opened data) is the
library's (:mod:`fedpipe.model.process`): every Dask worker keeps its own, from
client to client and round to round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fedpipe.config.params import ParamsError, RuntimeParams
from fedpipe.core.errors import FedpipeError, SettingError


class JobNotLoadable(FedpipeError, RuntimeError):
    """A Dask worker could not load the run's code or a round's jobs
    (:mod:`orchestration.usercode`): retrying cannot help."""


def retry_unless_not_loadable(task: Any, task_run: Any, state: Any) -> bool:
    """A Prefect ``retry_condition_fn``: retry a failed task unless it failed
    with :class:`JobNotLoadable` (the same job fails the same way again)."""
    return not isinstance(getattr(state, "data", None), JobNotLoadable)


class DaskScheduler:
    """The Dask scheduler client training is sent to, for the length of one run.

    ``address`` names an existing scheduler (``dask scheduler`` somewhere); without
    one, a local cluster of ``workers`` single-threaded processes is started (by
    :meth:`start`, or on first use) and closed when the ``with`` block ends. The
    cluster outlives the rounds, so each worker keeps its compiled model
    (:func:`fedpipe.model.process.runner_for`) and its opened data
    (:func:`fedpipe.model.process.data_for`) from client to client and round to
    round; rounds submit through one connection
    (:meth:`run_client`). ``security`` (a ``distributed.Security``, see
    :func:`dask_security`) is used by every connection to the scheduler: the
    worker check and :meth:`client`.
    """

    def __init__(
        self, *, address: str | None, workers: int, security: Any = None
    ) -> None:
        self._address = address
        self._workers = workers
        self._security = security
        self._cluster: Any = None
        self._starting: Future[Any] | None = None
        self._announced = False
        self._client: Any = None
        # its own lock: connecting can wait for the cluster to start
        self._client_lock = threading.Lock()

    @classmethod
    def from_runtime(cls, runtime: RuntimeParams) -> DaskScheduler:
        """The scheduler ``runtime.*`` names (TLS files checked now)."""
        return cls(
            address=runtime.dask_address,
            workers=runtime.dask_workers,
            security=dask_security(runtime),
        )

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every ``distributed.Client`` made for this
        scheduler."""
        return {} if self._security is None else {"security": self._security}

    def client(self) -> Any:
        """A new ``distributed.Client`` connected to the scheduler (close it after)."""
        from distributed import Client

        return Client(
            self.address(), timeout=30, set_as_default=False, **self.client_kwargs()
        )

    def run_client(self) -> Any:
        """The run's one ``distributed.Client`` (connected on first use, closed
        when the ``with`` block ends): every round submits through it, so a round
        pays no connection."""
        with self._client_lock:
            if self._client is None:
                self._client = self.client()
            return self._client

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
            # a job's failure on a worker comes back to the run, which says it
            # in one line; the workers' own tracebacks of it are not printed
            silence_logs=logging.CRITICAL,
        )

    def address(self) -> str:
        """The scheduler's address (waits for the local cluster to be up)."""
        if self._announced:
            return self._address  # type: ignore[return-value]
        from prefect.logging import get_logger

        # the in-process scheduler logs every client connection at INFO
        logging.getLogger("distributed").setLevel(logging.WARNING)
        where = f"the Dask scheduler at {self._address}"
        if self._address is not None:
            workers = check_workers(self._address, security=self._security)
            where += f" ({workers} workers)"
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
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._starting is not None:
            if self._starting.exception() is None:  # waits for a start under way
                self._cluster = self._starting.result()
            self._starting = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


#: Seconds a round waits on a group of clients on Dask between two checks that
#: some worker is connected (:func:`result_or_say`).
WAIT_CHECK_SECONDS = 30.0


def result_or_say(
    future: Any,
    client: Any,
    *,
    where: str,
    say: Callable[[str], None],
    every: float = WAIT_CHECK_SECONDS,
) -> Any:
    """``future``'s result (a Dask future of ``client``), saying why it waits.

    Every ``every`` seconds without the result, the scheduler is asked for its
    workers; with none connected (every worker lost: its machine gone, killed)
    ``say`` gets a line naming the scheduler ``where``. The group is Dask's to
    keep meanwhile: a worker that joins trains it, and the round goes on with the
    same bits.
    """
    started = time.monotonic()
    while True:
        try:
            return future.result(timeout=every)
        except TimeoutError:
            if future.done():  # done meanwhile, or the job's own TimeoutError
                return future.result()
            if not client.scheduler_info(n_workers=-1)["workers"]:
                say(
                    f"no Dask worker is connected to {where}: the round has waited "
                    f"{time.monotonic() - started:.0f} s and waits for one to join "
                    f"(`dask worker {where} --nthreads 1`, with the TLS files)"
                )


def check_workers(address: str, *, security: Any = None) -> int:
    """Number of workers at the scheduler ``address``; each must run one thread.

    A worker process keeps one compiled model
    (:func:`fedpipe.model.process.runner_for`), which trains one client at a time:
    workers are started with ``--nthreads 1``. ``security`` is the connection's
    ``distributed.Security`` (None: plain TCP).

    Raises
    ------
    ValueError
        No worker is connected, or one runs several threads.
    """
    from distributed import Client

    extra = {} if security is None else {"security": security}
    with Client(address, timeout=30, set_as_default=False, **extra) as client:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        raise SettingError(
            f"runtime.dask_address={address}: no Dask worker is connected; start "
            f"some with `dask worker {address} --nthreads 1`"
        )
    threaded = sorted(w for w, info in workers.items() if info["nthreads"] != 1)
    if threaded:
        raise SettingError(
            f"runtime.dask_address={address}: worker {threaded[0]} runs "
            f"{workers[threaded[0]]['nthreads']} threads; fedpipe needs one thread "
            "per worker process (it keeps one compiled model per process): start "
            f"workers with `dask worker {address} --nthreads 1 --nworkers N`"
        )
    return len(workers)


def dask_security(runtime: RuntimeParams) -> Any:
    """The ``distributed.Security`` of ``runtime.dask_tls_*``, or None when unset.

    TLS with the cluster's CA and this client's certificate and key; encryption
    required (no connection falls back to plain TCP).

    Raises
    ------
    ParamsError
        A named file does not exist (relative paths are from the project
        directory, where the run starts).
    """
    files = runtime.tls_files()
    if not files:
        return None
    for key, path in files.items():
        if not Path(path).is_file():
            raise ParamsError(
                f"{key}={path}: file not found (a PEM file; relative paths are "
                f"from the project directory, {Path.cwd()})"
            )
    from distributed.security import Security

    return Security(
        tls_ca_file=runtime.dask_tls_ca,
        tls_client_cert=runtime.dask_tls_cert,
        tls_client_key=runtime.dask_tls_key,
        require_encryption=True,
    )
