"""fedpipe.core.concurrency.side_by_side: work shared out over kept threads."""

from __future__ import annotations

import threading

import pytest

from fedpipe.core.concurrency import side_by_side


def test_every_run_happens_once_k0_in_the_callers_thread() -> None:
    seen: dict[int, str] = {}
    lock = threading.Lock()

    def run(k: int) -> None:
        with lock:
            seen[k] = threading.current_thread().name

    side_by_side(run, 4, name="job")
    assert sorted(seen) == [0, 1, 2, 3]
    assert seen[0] == threading.current_thread().name
    assert {seen[k] for k in (1, 2, 3)} == {"job-1", "job-2", "job-3"}


def test_threads_are_kept_between_calls() -> None:
    idents: list[set[int]] = []
    for _ in range(3):
        got: set[int] = set()
        lock = threading.Lock()

        def run(k: int, got: set[int] = got, lock: threading.Lock = lock) -> None:
            if k:
                with lock:
                    got.add(threading.get_ident())

        side_by_side(run, 3)
        idents.append(got)
    assert len(idents[0]) == 2
    assert idents[0] == idents[1] == idents[2]  # the same two threads each time


def test_the_lowest_failing_k_is_raised_after_every_run_ended() -> None:
    ended: list[int] = []
    release = threading.Event()

    def run(k: int) -> None:
        if k == 1:
            release.wait(5)
            ended.append(k)
        if k in (2, 3):
            raise ValueError(f"run {k}")

    def caller_run(k: int) -> None:
        if k == 0:
            release.set()
        run(k)

    with pytest.raises(ValueError, match="run 2"):
        side_by_side(caller_run, 4)
    assert ended == [1]  # run 1 finished before the error came out


def test_a_failing_caller_run_sets_stop_and_waits_for_the_others() -> None:
    stop = threading.Event()
    saw_stop: list[bool] = []

    def run(k: int) -> None:
        if k == 0:
            raise RuntimeError("caller's run")
        saw_stop.append(stop.wait(5))

    with pytest.raises(RuntimeError, match="caller's run"):
        side_by_side(run, 2, stop=stop)
    assert saw_stop == [True]


def test_nested_calls_from_a_kept_thread_do_not_wait_on_themselves() -> None:
    out: list[int] = []
    lock = threading.Lock()

    def inner(k: int) -> None:
        with lock:
            out.append(k)

    def outer(k: int) -> None:
        side_by_side(inner, 3)

    side_by_side(outer, 3)
    assert sorted(out) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
