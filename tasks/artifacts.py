"""What the Prefect UI shows besides runs and logs: artifacts with stable keys.

- ``fedpipe-round-K``: a table per round, one row per client, the client's local
  model and the new global model on that client's test split side by side.
- ``fedpipe-run-summary``: markdown on the pipeline run's own page: which stages
  ran and the final table of global against local metrics.
- ``fedpipe-doctor`` / ``fedpipe-report``: the doctor's findings (markdown) and a
  link to the run's HTML report, published by :func:`publish_run_artifacts` once
  ``fedpipe doctor`` / ``fedpipe report`` produce them.

A key keeps the same name from run to run, so the UI's Artifacts page shows the
latest version of each and its history. A round's table is sent from a background
thread while the next round trains (a blocking API call, about 30 ms a round);
:func:`flush_artifacts` waits for those sent so far. Artifacts are created only
inside a flow or task run (which always reports to an API); called elsewhere (a
unit test of the library, a plain script) these functions do nothing.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pandas as pd
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.context import FlowRunContext, TaskRunContext

from fedpipe.federation.records import RoundRecord
from fedpipe.observe.history import class_names, final_table, privacy_text

RUN_SUMMARY_KEY = "fedpipe-run-summary"
DOCTOR_KEY = "fedpipe-doctor"
REPORT_KEY = "fedpipe-report"


def round_key(round_: int) -> str:
    """Artifact key of round ``round_``'s client table (``fedpipe-round-3``)."""
    return f"fedpipe-round-{round_}"


def in_a_run() -> bool:
    """True inside a Prefect flow or task run (artifacts have somewhere to go)."""
    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def _cell(value: Any) -> Any:
    """A JSON-friendly table cell: NaN becomes empty, floats keep 6 digits."""
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    return value


def round_table_rows(
    record: RoundRecord, table: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    """The round's client table (``record.client_table()``, or ``table`` if it
    was made already) as artifact rows (one per client, in client order)."""
    frame = record.client_table() if table is None else table
    return [{k: _cell(v) for k, v in row.items()} for row in frame.to_dict("records")]


_sender_lock = threading.Lock()
_sender: ThreadPoolExecutor | None = None
_sent: list[Future] = []


def _in_background(fn: Any, /, **kwargs: Any) -> None:
    """Call ``fn(**kwargs)`` on the one sender thread, in this run's context (the
    artifact belongs to the current flow or task run), in submission order."""
    global _sender
    context = contextvars.copy_context()
    with _sender_lock:
        if _sender is None:
            _sender = ThreadPoolExecutor(1, thread_name_prefix="fedpipe-artifacts")
        _sent.append(_sender.submit(context.run, fn, **kwargs))


def flush_artifacts() -> None:
    """Wait until every artifact sent so far has reached the API. One that could
    not be created is a warning, not a failure: the round's files are the record
    and the table is in ``metrics/clients/``."""
    with _sender_lock:
        sent, _sent[:] = list(_sent), []
    for future in sent:
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - the UI copy only
            logging.getLogger("fedpipe").warning(
                "a round's table artifact could not be created: %s", exc
            )


def publish_round_table(record: RoundRecord, table: pd.DataFrame | None = None) -> None:
    """Table artifact ``fedpipe-round-K``: local vs global metrics per client
    (``table``: ``record.client_table()`` if made already), sent in the
    background (:func:`flush_artifacts`)."""
    if not in_a_run():
        return
    _in_background(
        create_table_artifact,
        table=round_table_rows(record, table),
        key=round_key(record.round),
        description=(
            f"Round {record.round}: per client, its locally trained model on its own "
            "test split (local_*, selected clients only) and the new global model "
            "on the same split (global_*); excluded: why a client was left out "
            "of aggregation (only when one was)."
            + (f" {privacy_text(record.summary())}." if record.privacy else "")
        ),
    )


def run_summary_markdown(
    summary: dict[str, Any], ran: Sequence[str], *, title: str
) -> str:
    """The run summary: stages that ran and the final table (global vs local)."""
    stages = ", ".join(f"`{s}`" for s in ran) if ran else "none (all up to date)"
    return (
        f"# {title}\n\n"
        f"Stages run: {stages}\n\n"
        f"## Final round {summary['round']}\n\n{final_table(summary, class_names())}\n"
    )


def publish_run_artifacts(
    summary: dict[str, Any] | None,
    ran: Sequence[str],
    *,
    title: str,
    doctor_findings: str | None = None,
    report_link: str | None = None,
) -> None:
    """Everything the UI shows for a whole pipeline run, on the run's own page.

    Parameters
    ----------
    summary : dict or None
        The last round's metrics (``metrics/rounds/round-N.json``); None when no
        round has metrics yet (then no summary is published).
    ran : sequence of str
        The stages this run executed.
    title : str
        Heading of the summary (names the project and settings).
    doctor_findings : str, optional
        ``fedpipe doctor``'s findings as markdown, published as
        ``fedpipe-doctor``.
    report_link : str, optional
        URL (``file://`` or ``http(s)://``) of the run's HTML report
        (``fedpipe report``), published as link artifact ``fedpipe-report``.
    """
    if not in_a_run():
        return
    if summary is not None:
        create_markdown_artifact(
            markdown=run_summary_markdown(summary, ran, title=title),
            key=RUN_SUMMARY_KEY,
            description="final round: global vs local metrics",
        )
    if doctor_findings is not None:
        create_markdown_artifact(
            markdown=doctor_findings,
            key=DOCTOR_KEY,
            description="fedpipe doctor: findings on this run",
        )
    if report_link is not None:
        create_link_artifact(
            link=report_link,
            link_text="HTML report of this run",
            key=REPORT_KEY,
            description="fedpipe report",
        )
