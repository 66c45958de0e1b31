"""How a round's client jobs become Prefect task runs (``flows/stages.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedpipe.config.params import RuntimeParams
from fedpipe.model.threads import usable_cores
from flows import stages
from flows.stages import client_groups


@pytest.mark.parametrize(
    ("n_jobs", "per_task", "spread", "sizes"),
    [
        (3, None, False, [3]),  # local: the round's clients in one call
        (100, None, False, [100]),
        (3, None, True, [1, 1, 1]),  # Dask: a task per client up to 10 a round
        (10, None, True, [1] * 10),
        (100, None, True, [10] * 10),  # else 10 tasks
        (25, None, True, [3] * 8 + [1]),
        (25, 7, False, [7, 7, 7, 4]),
        (25, 7, True, [7, 7, 7, 4]),
        (100, 100, True, [100]),
        (0, None, False, []),
    ],
)
def test_groups_are_consecutive_and_cover_every_job(
    n_jobs: int, per_task: int | None, spread: bool, sizes: list[int]
) -> None:
    jobs = list(range(n_jobs))
    groups = client_groups(jobs, per_task, spread=spread)  # type: ignore[arg-type]
    assert [len(g) for g in groups] == sizes
    assert [j for g in groups for j in g] == jobs


def _params(runtime: RuntimeParams, cohort_size: int | None) -> SimpleNamespace:
    """What _map_clients reads of Params."""
    return SimpleNamespace(runtime=runtime, cohort_setting=lambda: cohort_size)


class _Job(int):
    """A job as _map_clients sees it: its model spec (not read for a number)."""

    spec = None


def test_clients_per_task_n_makes_a_task_run_per_n_clients_with_their_cohorts(
    monkeypatch,
) -> None:
    from prefect.utilities.annotations import quote

    calls: list[tuple[list[int], int | None]] = []
    threads: list[int] = []

    def fake_task(group):  # the train-clients task, as _train returns it
        def run(jobs, cohort_size=None, on_trained=None, n_threads=1):
            assert isinstance(jobs, quote)  # Prefect does not walk the arrays
            jobs = jobs.unquote()  # as Prefect hands them to the task
            calls.append((list(jobs), cohort_size))
            threads.append(n_threads)
            for _ in jobs:
                on_trained(1)
            return list(jobs)

        return run

    ticks: list[int] = []
    monkeypatch.setattr(stages, "_train", fake_task)
    monkeypatch.setattr(stages.console, "client_finished", ticks.append)
    jobs = [_Job(i) for i in range(30)]
    whole = RuntimeParams(clients_per_task=30)  # the round's clients in one task
    out = stages._map_clients(_params(whole, 15), None)(jobs)  # type: ignore[arg-type]
    assert out == jobs
    assert calls == [(jobs, 15)]  # one task; the cohorts of 15 are made inside it
    assert ticks == [1] * 30

    calls.clear()
    per_task = RuntimeParams(clients_per_task=10, threads=3)
    stages._map_clients(_params(per_task, None), None)(jobs)  # type: ignore[arg-type]
    assert [(len(g), c) for g, c in calls] == [(10, None)] * 3
    # runtime.threads reaches the task; null is the process's usable cores
    assert threads == [usable_cores()] + [3] * 3

    calls.clear()  # groups hold whole cohorts: 4 a task with cohorts of 10 -> 10
    stages._map_clients(_params(RuntimeParams(clients_per_task=4), 10), None)(jobs)  # type: ignore[arg-type]
    assert [(len(g), c) for g, c in calls] == [(10, 10)] * 3


@pytest.mark.parametrize(
    ("per_task", "cohort", "whole"),
    [
        (None, 10, None),
        (4, None, 4),
        (4, 1, 4),
        (4, 10, 10),
        (25, 10, 30),
        (20, 10, 20),
    ],
)
def test_groups_are_rounded_up_to_whole_cohorts(
    per_task: int | None, cohort: int | None, whole: int | None
) -> None:
    assert stages.whole_cohorts(per_task, cohort) == whole


def test_a_failing_attempt_gives_back_only_what_it_told(monkeypatch) -> None:
    from tasks import federation

    told: list[int] = []

    def broken(jobs, cohort_size, on_trained=None, threads=1):  # type: ignore[no-untyped-def]
        on_trained(2)
        raise RuntimeError("bug")

    monkeypatch.setattr(federation, "train_group", broken)
    with pytest.raises(RuntimeError, match="bug"):
        federation.train_clients.fn([0, 1, 2], None, told.append)
    # no console: nothing to tell, and the error still comes through
    with pytest.raises(RuntimeError, match="bug"):
        federation.train_clients.fn([0, 1, 2], None, None)
    assert told == [2, -2]


@pytest.mark.parametrize("per_task", [None, 0])
def test_by_default_local_clients_train_in_the_round_task_with_no_task_run_of_theirs(
    monkeypatch, per_task: int | None
) -> None:
    """Issue 39: a task run per client group is off by default on the local
    runner (null), as with 0; the UI shows the flow, a task run per round and
    the round's table."""
    from tasks import federation

    def no_task(group):  # type: ignore[no-untyped-def]
        raise AssertionError("a train-clients task run was made")

    seen: list[tuple[list[int], int | None, int]] = []

    def train_group(jobs, cohort_size, on_trained=None, threads=1):  # type: ignore[no-untyped-def]
        seen.append((list(jobs), cohort_size, threads))  # a plain list, not quoted
        for _ in jobs:
            on_trained(1)
        return list(jobs), None

    ticks: list[int] = []
    monkeypatch.setattr(stages, "_train", no_task)
    monkeypatch.setattr(federation, "train_group", train_group)
    monkeypatch.setattr(stages.console, "client_finished", ticks.append)
    jobs = [_Job(i) for i in range(12)]
    inline = RuntimeParams(clients_per_task=per_task, threads=2)
    out = stages._map_clients(_params(inline, 4), None)(jobs)  # type: ignore[arg-type]
    assert out == jobs
    assert seen == [(jobs, 4, 2)]  # the round's clients in one call
    assert ticks == [1] * 12


def test_clients_per_task_0_is_refused_on_dask_naming_the_keys() -> None:
    from pydantic import ValidationError

    assert RuntimeParams(clients_per_task=0).clients_per_task == 0
    with pytest.raises(ValidationError, match=r"runtime.clients_per_task=0.*local"):
        RuntimeParams(clients_per_task=0, runner="dask")
    with pytest.raises(ValidationError):
        RuntimeParams(clients_per_task=-1)
