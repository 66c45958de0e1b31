"""A retried ``train-clients`` task run counts its clients once (the console's
clients bar): the real Prefect task, its real retry, on the session's server."""

from __future__ import annotations

import pytest

from tasks import federation


def test_a_retried_train_clients_task_counts_each_client_once(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import flow
    from prefect.settings import PREFECT_API_URL, temporary_settings

    attempts: list[int] = []

    def flaky_group(jobs, cohort_size, on_trained=None, threads=1):  # type: ignore[no-untyped-def]
        attempts.append(len(jobs))
        for i, _ in enumerate(jobs):
            if len(attempts) == 1 and i == 3:  # first attempt: 3 clients, then lost
                raise OSError("result store unreachable")
            on_trained(1)
        return list(jobs), None

    monkeypatch.setattr(federation, "train_group", flaky_group)
    monkeypatch.setattr(federation.train_clients, "retry_delay_seconds", 0)
    ticks: list[int] = []

    @flow(name="retry-ticks")
    def one_round() -> list:
        return federation.train_clients(list(range(5)), None, ticks.append)

    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
        out = one_round()

    assert out == list(range(5))
    assert attempts == [5, 5]  # the task ran twice: Prefect's retry
    assert ticks == [1, 1, 1, -3, 1, 1, 1, 1, 1]
    assert sum(ticks) == 5  # the bar ends at 5/5, not 8/5
