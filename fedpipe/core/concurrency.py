"""Work shared out over a few threads, the caller's among them."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["side_by_side"]


def side_by_side(
    run: Callable[[int], None],
    n: int,
    *,
    stop: threading.Event | None = None,
    name: str = "fedpipe-worker",
) -> None:
    """``run(k)`` for k in 0..n-1: k > 0 each in a thread of its own (``name-k``),
    0 in the caller's, so that an interrupt (Ctrl-C, SIGTERM) lands in work as it
    would without threads. Every run has ended when this returns; an exception
    is raised here, the lowest k's. When ``run(0)`` raises, ``stop`` (if given)
    is set at once, so that the other runs can end early."""
    errors: dict[int, BaseException] = {}

    def guarded(k: int) -> None:
        try:
            run(k)
        except BaseException as exc:  # raised by the caller
            errors[k] = exc

    threads = [
        threading.Thread(target=guarded, args=(k,), daemon=True, name=f"{name}-{k}")
        for k in range(1, n)
    ]
    for t in threads:
        t.start()
    try:
        run(0)
    except BaseException:
        if stop is not None:
            stop.set()
        raise
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[min(errors)]
