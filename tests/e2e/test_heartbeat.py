"""fedpipe's flow-run heartbeat (:mod:`orchestration.heartbeat`) against a real
Prefect flow run on the session's server: the same event as Prefect's, from one
emitter (Prefect's own thread off), and no wait for it when the run ends.

Events are caught with Prefect's own recording events client."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.e2e

HEARTBEAT = "prefect.flow-run.heartbeat"


@pytest.fixture
def recorded_events(prefect_api: str) -> Iterator[type]:
    from prefect.events.clients import AssertingEventsClient
    from prefect.events.worker import EventsWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    EventsWorker.drain_all(timeout=30)
    AssertingEventsClient.reset()
    EventsWorker.set_client_override(AssertingEventsClient)
    try:
        with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
            yield AssertingEventsClient
    finally:
        EventsWorker.drain_all(timeout=30)
        EventsWorker.set_client_override(None)
        AssertingEventsClient.reset()


def _heartbeats(client: type, run_id: str) -> list:
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=30)
    return [
        e
        for c in client.all
        for e in c.events
        if e.event == HEARTBEAT and e.resource.id == f"prefect.flow-run.{run_id}"
    ]


def _flow(seen: dict) -> object:
    from prefect import flow, tags
    from prefect.context import FlowRunContext

    from orchestration.heartbeat import beating

    @flow(name="heartbeat-check")
    def beats() -> None:
        context = FlowRunContext.get()
        assert context is not None and context.flow_run is not None
        seen["run"] = str(context.flow_run.id)
        seen["flow"] = str(context.flow_run.flow_id)
        with beating():
            seen["beating"] = [t.name for t in threading.enumerate()]

    def call() -> None:
        with tags("fedpipe-test"):
            beats()

    return call


def test_own_heartbeat_replaces_prefects(recorded_events: type) -> None:
    from orchestration.heartbeat import own_heartbeat

    seen: dict = {}
    with own_heartbeat():
        _flow(seen)()
    assert "fedpipe-heartbeat" in seen["beating"]
    assert "fedpipe-heartbeat" not in [t.name for t in threading.enumerate()]
    beats = _heartbeats(recorded_events, seen["run"])
    # one beat at the start, ours: Prefect's thread (which also beats at once) is off
    assert len(beats) == 1, beats
    related = {r.id: r for r in beats[0].related}
    assert related[f"prefect.flow.{seen['flow']}"].role == "flow"
    assert related[f"prefect.flow.{seen['flow']}"].name == "heartbeat-check"
    assert "prefect.tag.fedpipe-test" in related


def test_without_own_heartbeat_prefect_keeps_its_own(recorded_events: type) -> None:
    seen: dict = {}
    _flow(seen)()
    assert "fedpipe-heartbeat" not in seen["beating"]
    beats = _heartbeats(recorded_events, seen["run"])
    assert len(beats) == 1, beats  # Prefect's
