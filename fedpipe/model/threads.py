"""Clients trained side by side on the machine's cores, with the bits of one by one.

A small client's step is many small TensorFlow ops, which one core runs about as
fast as two (the second core mostly waits), so a round trains its clients in
``runtime.threads`` threads, each on a compiled model of its own, every op on one
core (``TF_NUM_INTRAOP_THREADS=1``, set by :mod:`fedpipe`)::

    runners = [ModelRunner(spec) for _ in range(2)]
    outputs = run_round(inputs, map_clients=threaded_map(runners), runner=runners[0])

**Same bits, whoever trains whom.** A fit resets everything it reads (weights,
optimizer slots, the layers' random state: :meth:`ModelRunner.fit`), so a client's
result depends on its job alone, not on which model or thread ran it, nor on
what ran before; and every compiled step runs one graph whatever batch sizes
its model saw first (:class:`fedpipe.model.training.OpenBatches`: a graph traced
for a first client's exact shapes gave a convolution's gradients other last bits
than the open-shaped one, so which client a thread took first once changed a
run's bits). The results come back in job order. One op on one core is also
what makes a model's bits independent of the machine: with TensorFlow's default
(one intra-op thread per core) the same fit gives other bits on 2 cores than on
1 (``tests/test_threads.py``).

Jobs are taken in order from a shared queue (a slow client does not hold up the
others). The calling thread trains too, so an interrupt (Ctrl-C, SIGTERM) lands
in a fit as it would one by one; the other threads finish the client they hold
and stop. A job that raises stops the others after their current client and is
raised in the caller (the first such job in job order); guarded jobs never raise
(:func:`fedpipe.model.trainer.run_job`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from fedpipe.core.concurrency import side_by_side
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult, MapClients
from fedpipe.model.trainer import run_client
from fedpipe.model.training import ModelRunner

__all__ = ["threaded_map", "usable_cores"]


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. under ``taskset``
    or a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def threaded_map(
    runners: Sequence[ModelRunner],
    *,
    on_trained: Callable[[int], None] | None = None,
) -> MapClients:
    """A :data:`fedpipe.model.jobs.MapClients` training jobs on
    ``len(runners)`` threads, one compiled model each (all of the jobs' spec);
    results in job order, the bits of
    :func:`fedpipe.model.trainer.run_here` on any one of them. ``on_trained(1)``
    after each client (from the thread that trained it): progress only."""
    if not runners:
        raise ValueError("threaded_map needs at least one compiled model")
    tell = on_trained or (lambda n: None)

    def map_clients(jobs: Sequence[ClientJob]) -> list[ClientResult | ClientFailure]:
        jobs = list(jobs)
        results: list[ClientResult | ClientFailure | None] = [None] * len(jobs)
        errors: dict[int, BaseException] = {}
        lock, stop = threading.Lock(), threading.Event()
        queue = iter(range(len(jobs)))

        def work(k: int) -> None:
            runner = runners[k]
            with runner.lock:  # not a helper of predictions meanwhile
                take(runner)

        def take(runner: ModelRunner) -> None:
            while not stop.is_set():
                with lock:
                    i = next(queue, None)
                if i is None:
                    return
                try:
                    results[i] = run_client(jobs[i], runner)
                except Exception as exc:  # raised below, in job order
                    with lock:
                        errors[i] = exc
                    stop.set()
                    return
                with lock:
                    tell(1)

        n = min(len(runners), max(1, len(jobs)))
        # an interrupt in this thread's client stops the others after theirs
        side_by_side(work, n, stop=stop, name="fedpipe-client")
        if errors:
            raise errors[min(errors)]
        done = [r for r in results if r is not None]
        assert len(done) == len(jobs), "a client's job was not run"
        return done

    return map_clients
