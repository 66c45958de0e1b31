"""``fedpipe run``'s flow-run heartbeat, which stops the moment the run ends.

Prefect's flow engine emits a ``prefect.flow-run.heartbeat`` event every
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (180 by default; the server marks a
run whose heartbeats stop as crashed) from a thread that sleeps in 1 s steps and
is joined when the run ends: each ``fedpipe run`` waited 0-1 s (0.5 on average)
for that thread after its last stage. Here the same event, from the same
resource and related resources, comes from a thread that waits on an
:class:`threading.Event` and ends as soon as it is set.

:func:`own_heartbeat` (around the flow call: ``fedpipe run``, the benchmarks)
turns Prefect's heartbeat off for the flow run it starts and hands the frequency
to :func:`beating` (inside the flow), which emits it. A flow run started any
other way (a deployment run from the UI) keeps Prefect's heartbeat, and
:func:`beating` does nothing.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from prefect import __version__ as prefect_version
from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.events.related import RelatedResource, tags_as_related_resources
from prefect.settings import (
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
    get_current_settings,
    temporary_settings,
)

logger = logging.getLogger(__name__)

MINIMUM_INTERVAL_S = 30  # Prefect's flow engine's minimum too

_frequency: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "fedpipe_heartbeat_frequency", default=None
)


@contextmanager
def own_heartbeat() -> Iterator[None]:
    """Flow runs started in this block without Prefect's heartbeat thread;
    :func:`beating` inside them emits it instead, at Prefect's frequency."""
    frequency = get_current_settings().flows.heartbeat_frequency
    token = _frequency.set(frequency)
    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield
    finally:
        _frequency.reset(token)


@contextmanager
def beating() -> Iterator[None]:
    """The current flow run's heartbeat for the length of the block, when
    :func:`own_heartbeat` took it over from Prefect (otherwise nothing)."""
    frequency = _frequency.get()
    context = FlowRunContext.get()
    run = context.flow_run if context else None
    if frequency is None or run is None:
        yield
        return
    resource = {
        "prefect.resource.id": f"prefect.flow-run.{run.id}",
        "prefect.resource.name": run.name or "",
        "prefect.version": prefect_version,
    }
    related: list[RelatedResource] = []
    if run.flow_id:
        related.append(
            RelatedResource.model_validate(
                {
                    "prefect.resource.id": f"prefect.flow.{run.flow_id}",
                    "prefect.resource.role": "flow",
                    "prefect.resource.name": context.flow.name if context.flow else "",
                }
            )
        )
    if run.deployment_id:
        related.append(
            RelatedResource.model_validate(
                {
                    "prefect.resource.id": f"prefect.deployment.{run.deployment_id}",
                    "prefect.resource.role": "deployment",
                }
            )
        )
    related += tags_as_related_resources(set(run.tags or []))
    stop = threading.Event()
    interval = max(frequency, MINIMUM_INTERVAL_S)

    def beat() -> None:
        while not stop.is_set():
            try:
                emit_event(
                    event="prefect.flow-run.heartbeat",
                    resource=resource,
                    related=related,
                )
            except Exception:  # noqa: BLE001 - as Prefect's: a missed beat is logged
                logger.debug("failed to emit the flow run's heartbeat", exc_info=True)
            stop.wait(interval)

    # the run's settings (its API URL) seen from the thread too, as Prefect does
    thread = threading.Thread(
        target=contextvars.copy_context().run,
        args=(beat,),
        name="fedpipe-heartbeat",
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)
