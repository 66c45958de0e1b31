"""Your own code on Dask workers, and jobs a worker cannot load said in one line.

A user's model, strategy or client file is imported in the run under a generated
module name (:mod:`fedpipe.core.plugins`) that a worker cannot import, and the
round's jobs hold its classes: unpickled on a worker as Dask does it (in the
connection's handler) a job failed there, the worker's connection dropped, the
job went to the next worker, and the run waited for ever (issue 28). Here:

- the code travels with the run: :func:`ship_user_code` registers a
  :class:`UserCode` worker plugin carrying every user file the run imported, and
  each worker (also one that joins later, also on another machine) makes the
  same modules from their source before it gets a job;
- a group of jobs goes to a worker as bytes (:func:`dump_jobs`) that the job
  itself unpickles (:func:`load_jobs`), so a job that cannot be loaded there is
  an error of that job, raised in the run as :class:`JobNotLoadable` with its
  cause, not a dropped connection; :func:`train_shipped` is the worker's side
  (:func:`fedpipe.model.process.train_group` of the jobs it loaded).

Imports ``distributed``: imported only when training runs on Dask.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.pickle import dumps, loads

from fedpipe.core.plugins import UserFile, install, loaded_files
from fedpipe.model.jobs import ClientFailure, ClientResult
from fedpipe.model.process import train_group, where_am_i
from orchestration.runtime import JobNotLoadable


class UserCode(WorkerPlugin):
    """Makes the run's user modules in a worker
    (:func:`fedpipe.core.plugins.install`)."""

    idempotent = True  # registered every round; set up once per content

    def __init__(self, files: Sequence[UserFile]) -> None:
        self.files = tuple(files)
        digest = hashlib.sha256()
        for file in self.files:
            digest.update(file.module.encode() + b"\0")
        self.name = f"fedpipe-user-code-{digest.hexdigest()[:16]}"

    def setup(self, worker: Any) -> None:
        for file in self.files:
            install(file)


def ship_user_code(client: Any) -> None:
    """Send the user's files this run imported to every worker of ``client``'s
    scheduler (and to workers that join later); nothing when there are none.

    Raises
    ------
    JobNotLoadable
        A worker could not import one (a package it imports is missing there).
    """
    files = loaded_files()
    if not files:
        return
    try:
        client.register_plugin(UserCode(files))
    except Exception as exc:  # noqa: BLE001 - raised by the user's code, anything
        targets = ", ".join(f.target for f in files)
        raise JobNotLoadable(
            f"a Dask worker could not import your code ({targets}): "
            f"{type(exc).__name__}: {exc} (the workers need what it imports: "
            "fedpipe's environment with the same packages)"
        ) from None


def dump_jobs(jobs: Sequence[Any]) -> bytes:
    """A group of jobs as bytes for a worker (Dask's own pickling: classes by
    reference, the user's among them; :class:`UserCode` makes them there)."""
    return dumps(list(jobs))


def load_jobs(blob: bytes, *, where: str) -> list[Any]:
    """On the worker ``where``: the jobs :func:`dump_jobs` made.

    Raises
    ------
    JobNotLoadable
        They could not be unpickled here; the message names the cause.
    """
    try:
        return loads(blob)
    except Exception as exc:  # noqa: BLE001 - whatever unpickling raised
        raise JobNotLoadable(
            f"{where} could not load a round's client jobs: {type(exc).__name__}: "
            f"{exc} (the workers need fedpipe's environment with the same "
            "packages; your own code is sent to them)"
        ) from None


def train_shipped(
    blob: bytes, cohort_size: int | None
) -> tuple[list[ClientResult | ClientFailure], str | None]:
    """On a Dask worker: :func:`~fedpipe.model.process.train_group` of the jobs
    in ``blob`` (:func:`dump_jobs`)."""
    return train_group(load_jobs(blob, where=where_am_i()), cohort_size)
