"""Work shared out over a few threads, the caller's among them.

The threads are kept between calls (idle ones wait for the next call's work):
starting a thread waits until it runs, which on a busy interpreter (training
threads holding the GIL) took about 3 ms a start, twice a round (the clients,
the global evaluation), before the caller's own share could begin.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable

__all__ = ["side_by_side"]


class _Worker(threading.Thread):
    """A kept thread running the calls put in its queue, one at a time."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="fedpipe-worker")
        self.calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.start()

    def run(self) -> None:
        while True:
            self.calls.get()()


_idle: list[_Worker] = []
_idle_lock = threading.Lock()


def _borrow(name: str) -> _Worker:
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    worker = worker or _Worker()
    worker.name = name
    return worker


def _give_back(worker: _Worker) -> None:
    with _idle_lock:
        _idle.append(worker)


def side_by_side(
    run: Callable[[int], None],
    n: int,
    *,
    stop: threading.Event | None = None,
    name: str = "fedpipe-worker",
) -> None:
    """``run(k)`` for k in 0..n-1: k > 0 each in a thread of its own (named
    ``name-k`` while it runs; kept for later calls), 0 in the caller's, so that
    an interrupt (Ctrl-C, SIGTERM) lands in work as it would without threads.
    Every run has ended when this returns; an exception is raised here, the
    lowest k's. When ``run(0)`` raises, ``stop`` (if given) is set at once, so
    that the other runs can end early."""
    errors: dict[int, BaseException] = {}
    done = [threading.Event() for _ in range(1, n)]

    def guarded(k: int) -> None:
        try:
            run(k)
        except BaseException as exc:  # raised by the caller
            errors[k] = exc
        finally:
            done[k - 1].set()

    workers = [_borrow(f"{name}-{k}") for k in range(1, n)]
    for k, worker in enumerate(workers, start=1):
        worker.calls.put(functools.partial(guarded, k))
    try:
        run(0)
    except BaseException:
        if stop is not None:
            stop.set()
        raise
    finally:
        for event, worker in zip(done, workers, strict=True):
            event.wait()
            _give_back(worker)
    if errors:
        raise errors[min(errors)]
