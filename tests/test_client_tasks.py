"""How a round's client jobs become Prefect task runs (``flows/stages.py``)."""

from __future__ import annotations

import pytest

from fedpipe.config import RuntimeParams
from flows import stages
from flows.stages import client_groups


@pytest.mark.parametrize(
    ("n_jobs", "per_task", "sizes"),
    [
        (3, None, [1, 1, 1]),  # a task per client up to 10 a round
        (10, None, [1] * 10),
        (100, None, [10] * 10),  # else 10 tasks
        (25, None, [3] * 8 + [1]),
        (25, 7, [7, 7, 7, 4]),
        (100, 100, [100]),
    ],
)
def test_groups_are_consecutive_and_cover_every_job(
    n_jobs: int, per_task: int | None, sizes: list[int]
) -> None:
    jobs = list(range(n_jobs))
    groups = client_groups(jobs, per_task)  # type: ignore[arg-type]
    assert [len(g) for g in groups] == sizes
    assert [j for g in groups for j in g] == jobs


def test_cohort_size_reaches_every_task_and_sets_the_groups(monkeypatch) -> None:
    calls: list[tuple[list[int], int | None]] = []

    from prefect.utilities.annotations import quote

    def fake_task(group):  # the train-clients task, as _train returns it
        def run(jobs, cohort_size=None):
            assert isinstance(jobs, quote)  # Prefect does not walk the arrays
            jobs = jobs.unquote()  # as Prefect hands them to the task
            calls.append((list(jobs), cohort_size))
            return list(jobs)

        return run

    monkeypatch.setattr(stages, "_train", fake_task)
    jobs = list(range(30))
    out = stages._map_clients(RuntimeParams(), cohort_size=15)(jobs)  # type: ignore[arg-type]
    assert out == jobs
    assert calls == [(list(range(15)), 15), (list(range(15, 30)), 15)]

    calls.clear()
    per_task = RuntimeParams(clients_per_task=10)
    stages._map_clients(per_task, cohort_size=None)(jobs)  # type: ignore[arg-type]
    assert [(len(g), c) for g, c in calls] == [(10, None)] * 3
