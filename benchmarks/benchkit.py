"""What the benchmarks share: the library loop on a project's inputs and
pfl-research's interpreter (``bench_rounds.py``, ``bench_scale.py``), the Dask
cluster of ``runtime.runner: dask`` (``bench_dask_bytes.py``,
``bench_wire_dask.py``), a CPU and wall clock (``bench_feature_skew.py``,
``bench_partition.py``). Imported by bare name, as its siblings are
(``sys.path`` holds this folder)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PEERS = Path(__file__).resolve().parent / "peers"


def pfl_python() -> Path | None:
    """pfl's interpreter (``$PFL_VENV/bin/python``), None when it is not there."""
    venv = Path(os.environ.get("PFL_VENV", ".venv-pfl"))
    python = venv / "bin" / "python"
    return python if python.exists() else None


def library_rounds(project: Path, rounds: int | None = None) -> tuple[Any, Any]:
    """The library loop on ``project`` (cwd moves there): round 1's inputs as
    its ``load-round`` task builds them, then
    :func:`fedpipe.federation.loop.run_federation`, no Prefect, no files, no
    DVC. ``rounds`` defaults to ``federation.rounds``; ``train.cohort_size`` and
    ``runtime.threads`` are honoured, as ``fedpipe run`` does. Returns the
    rounds' :class:`~fedpipe.federation.loop.RoundTimes` (``start``: after the
    set-up, before round 1) and the last round's outputs."""
    os.chdir(project)
    from fedpipe.config.params import load_params
    from fedpipe.federation.loop import RoundTimes, run_federation
    from fedpipe.federation.roundfiles import load_round
    from fedpipe.model.cohort import cohort_map, cohort_size_for
    from fedpipe.model.process import runner_for, spare_runners
    from fedpipe.model.threads import usable_cores

    params = load_params()
    inputs = load_round(params, 1)
    runner = runner_for(inputs.spec)
    threads = params.runtime.threads or usable_cores()
    spares = spare_runners(inputs.spec, threads - 1)
    times = RoundTimes()
    out = run_federation(
        inputs,
        rounds=rounds or params.federation.rounds,
        map_clients=cohort_map(
            runner,
            cohort_size_for(params.cohort_setting(), inputs.spec),
            spares=spares,
        ),
        runner=runner,
        callbacks=[times],
    )
    return times, out


@contextmanager
def dask_client() -> Iterator[Any]:
    """A client of a 2-worker ``LocalCluster`` of single-threaded worker
    processes with ``tasks.federation`` preloaded, as ``runtime.runner: dask``
    starts one; both closed on leaving."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=["tasks.federation"],
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


class Clock:
    """CPU and wall seconds since the last lap (CPU: this process's
    ``time.process_time``, the machine may be shared)."""

    def __init__(self) -> None:
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def lap(self) -> str:
        """``"CPU (wall)"`` seconds since the last lap (or the start)."""
        cpu, wall = time.process_time(), time.perf_counter()
        text = f"{cpu - self.cpu:.2f} ({wall - self.wall:.2f})"
        self.cpu, self.wall = cpu, wall
        return text
