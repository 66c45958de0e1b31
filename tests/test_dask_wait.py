"""A round waiting on Dask says so when no worker is left (orchestration.runtime)."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import pytest

from orchestration.runtime import result_or_say


@pytest.fixture
def no_workers() -> Iterator[tuple[Any, Any]]:
    """A real scheduler with no worker yet, and a client of it."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield cluster, client


def test_waiting_without_workers_is_said_until_one_joins(
    no_workers: tuple[Any, Any],
) -> None:
    cluster, client = no_workers
    future = client.submit(operator.add, 1, 2, pure=False)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if len(said) == 2:  # the operator starts a worker
            cluster.scale(1)

    where = cluster.scheduler_address
    assert result_or_say(future, client, where=where, say=say, every=0.2) == 3
    assert len(said) >= 2
    assert said[0].startswith(f"no Dask worker is connected to {where}: ")
    assert f"`dask worker {where} --nthreads 1`" in said[0]


def test_nothing_is_said_while_workers_are_connected(
    no_workers: tuple[Any, Any],
) -> None:
    cluster, client = no_workers
    cluster.scale(1)
    client.wait_for_workers(1, timeout=60)
    future = client.submit(__import__("time").sleep, 0.6, pure=False)
    said: list[str] = []
    result_or_say(future, client, where="x", say=said.append, every=0.1)
    assert said == []


def _times_out() -> None:
    raise TimeoutError("the job's own")


def test_a_jobs_own_timeout_is_its_error_not_a_wait(
    no_workers: tuple[Any, Any],
) -> None:
    cluster, client = no_workers
    cluster.scale(1)
    future = client.submit(_times_out, pure=False)
    with pytest.raises(TimeoutError, match="the job's own"):
        result_or_say(future, client, where="x", say=pytest.fail, every=0.2)
