"""What one process keeps between rounds: the compiled model and the opened data,
and clients' jobs trained here on them.

Both are keyed by what they were made from (the model spec; the files' identity),
so a change on disk is never served stale, and a process that runs many rounds pays
for TensorFlow graph building and opening the data once. The data is the library's
(:func:`fedpipe.data.splits.open_federated`): the run's process and every Dask worker
that unpickles a client's data reference share that one cache.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fedpipe.data.splits import FederatedData, open_federated
from fedpipe.model.cohort import cohort_engine, cohort_map
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult
from fedpipe.model.training import ModelRunner, ModelSpec, training_device

_lock = threading.Lock()
_runners: dict[ModelSpec, ModelRunner] = {}
_training: set[ModelSpec] = set()
_spares: dict[ModelSpec, list[ModelRunner]] = {}


@contextmanager
def older_objects_frozen() -> Iterator[None]:
    """Python's cyclic garbage collector leaves the objects that exist when the
    block starts alone until it ends (:func:`gc.freeze`, then
    :func:`gc.unfreeze`): a run starts with TensorFlow's, Keras' and Prefect's
    few hundred thousand objects loaded, and a full collection during the run
    walked them all with every thread stopped (0.35 s; seen in one of five
    default runs measured). They are handed back to the collector after, so
    nothing is kept that it would have freed."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def runner_for(spec: ModelSpec) -> ModelRunner:
    """The process's compiled model for ``spec`` (built on first use)."""
    return cached_runner(spec)[0]


def spare_runners(spec: ModelSpec, n: int) -> list[ModelRunner]:
    """``n`` more compiled models of ``spec``, besides :func:`runner_for`'s, for
    clients trained side by side (``runtime.threads``); kept like it, and made
    :func:`runner_for`'s helpers (its predictions share out over them too)."""
    main = runner_for(spec)
    with _lock:
        spares = _spares.setdefault(spec, [])
        while len(spares) < n:
            spares.append(ModelRunner(spec))
        main.helpers = spares[:n]
        return spares[:n]


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


def data_for(
    prepared: Path, manifest: Path, transform: Path | None = None
) -> FederatedData:
    """The federated data of these files (re-opened when any of them changes),
    read through the ``preprocess`` stage's ``transform`` when given.

    Features stay memory-mapped and are converted per client when used; a
    client's data pickles as a reference to the files
    (:func:`fedpipe.data.splits.open_federated`).
    """
    return open_federated(prepared, manifest, transform)


@contextmanager
def ticks(on_trained: Callable[[int], None] | None) -> Iterator[Callable[[int], None]]:
    """``on_trained``, counted: when the attempt raises, the clients it reported
    are taken back (``on_trained(-n)``), so that the task's retry, which trains
    them again, does not count them twice (the console's ``clients 130/100``)."""
    told = 0

    def tick(n: int) -> None:
        nonlocal told
        told += n
        if on_trained is not None:
            on_trained(n)

    try:
        yield tick
    except BaseException:
        if told and on_trained is not None:
            on_trained(-told)
        raise


def train_group(
    jobs: Sequence[ClientJob],
    cohort_size: int | None,
    on_trained: Callable[[int], None] | None = None,
    *,
    threads: int = 1,
) -> tuple[list[ClientResult | ClientFailure], str | None]:
    """Clients' jobs trained in this process (the run's, or a Dask worker's) on
    its compiled model (and ``threads - 1`` more, side by side), and a line to
    log when this call compiled it."""
    runner, first = training_runner(jobs[0].spec)
    spares = spare_runners(jobs[0].spec, min(threads, len(jobs)) - 1)
    compiled = None
    if first:
        cohorts = cohort_size is not None and cohort_size > 1
        if cohorts and cohort_engine(runner)[0] is not None:
            how = f", clients in vectorized cohorts of {cohort_size}"
        elif spares:
            how = f", {len(spares) + 1} clients at a time"
        else:
            how = ", one client at a time"
        compiled = (
            f"{jobs[0].spec.name} compiled in {where_am_i()}, training on "
            f"{training_device()}{how}; reused for later clients and rounds"
        )
    clients = cohort_map(runner, cohort_size, on_trained=on_trained, spares=spares)
    return list(clients(jobs)), compiled
