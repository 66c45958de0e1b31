"""The one client trainer: a client's job, run on a compiled model.

A client job (:class:`fedpipe.model.jobs.ClientJob`) is self-contained and
picklable: the model spec, the client algorithm, its task and its data.
:func:`run_client` runs one on a compiled model
(:class:`fedpipe.model.training.ModelRunner`) through a :class:`KerasTrainer`;
:func:`run_job` runs one on any :class:`fedpipe.client.base.LocalTrainer` (a
cohort's trainer too, :mod:`fedpipe.model.cohort`). A job that raises comes back,
when guarded, as a :class:`~fedpipe.model.jobs.ClientFailure` naming the error in
one line, so one failing client never fails the others trained with it.

How a round's jobs are run is a :data:`~fedpipe.model.jobs.MapClients`:
:func:`run_here` runs them one after another in this process;
:func:`fedpipe.model.cohort.cohort_map` in vectorized cohorts; the orchestration
layer as Prefect tasks, locally or on Dask::

    results = run_here(runner)(jobs)  # = [run_client(job, runner) for job in jobs]
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedpipe.client.base import (
    FitRequest,
    LocalFit,
    LocalTrainer,
    LocalTraining,
    RecordDP,
)
from fedpipe.client.localdp import released
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult, MapClients
from fedpipe.strategy.base import ClientUpdate

if TYPE_CHECKING:
    # types only: importing this module loads neither TensorFlow nor pandas
    from fedpipe.data.splits import ClientData
    from fedpipe.model.training import ModelRunner

log = logging.getLogger("fedpipe")

MESSAGE_CHARS = 200
"""A failure's message is cut to this many characters (one line in a record)."""

# ---------------------------------------------------------------- the trainer


class KerasTrainer(LocalTrainer):
    """:class:`LocalTrainer` on a compiled model and one client's data."""

    def __init__(
        self, runner: ModelRunner, data: ClientData, training: LocalTraining
    ) -> None:
        super().__init__(data, training)
        self.runner = runner
        self._held: list[np.ndarray] | None = None  # what the model holds

    @property
    def trainable(self) -> list[int]:
        return self.runner.trainable_indices()

    def run_fit(self, request: FitRequest) -> LocalFit:
        fit = fit_client(
            self.runner,
            self.data,
            request,
            dp=self.training.record_dp,
            client=self.data.client,
        )
        # the model holds the trained weights: a copy, in case they are changed
        self._held = [np.array(w) for w in fit.weights]
        return fit

    def evaluate(self, weights: Sequence[np.ndarray]) -> dict[str, float]:
        """``weights`` on the client's local test split; not loaded again when
        the model holds them to the bit (the local model right after its fit:
        a small client's load costs about a third of its score)."""
        weights = list(weights)
        loaded = self._held is not None and same_bits(weights, self._held)
        if not loaded:  # the runner loads them: no longer the fit's
            self._held = None
        return self.runner.evaluate(
            weights, self.data.x_test, self.data.y_test, loaded=loaded
        )


def same_bits(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    """Whether two weight lists are the same arrays to the bit (shape, dtype
    and every byte: NaN payloads and signed zeros too)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.tobytes() != y.tobytes():
            return False
    return True


def fit_client(
    runner: ModelRunner,
    data: ClientData,
    request: FitRequest,
    *,
    dp: RecordDP | None = None,
    client: int = 0,
) -> LocalFit:
    """One fit on ``data``'s training split, one step at a time on ``runner``
    (:meth:`fedpipe.model.training.ModelRunner.fit`, which says what each
    setting does): the trained weights, steps taken and mean data loss."""
    trained = runner.fit(
        list(request.weights),
        data.x_train,
        data.y_train,
        epochs=request.epochs,
        batch_size=request.batch_size,
        seed=request.seed,
        proximal_mu=request.proximal_mu,
        anchor=request.anchor,
        gradient_offset=request.gradient_offset,
        max_steps=request.max_steps,
        dp=dp,
        client=client,
    )
    return LocalFit(trained, runner.last_steps, runner.last_train_loss)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: lines of a framework's error message that say where, not what (TensorFlow and
#: Keras wrap the cause in traceback excerpts and headers)
_WHERE = ("File ", "\u2022", "[[", "raise ", "Detected at node", "Arguments received")


def one_line(exc: BaseException) -> str:
    """``ExceptionType: what went wrong`` in one line of at most MESSAGE_CHARS.

    The message's lines that say what (not headers ending in ``:``, traceback
    excerpts, argument lists) are joined: TensorFlow's ``Graph execution error:``
    becomes the op's complaint, Keras's ``in user code:`` the layer's.
    """
    lines, after_file = [], False
    for raw in _ANSI.sub("", str(exc)).splitlines():
        line = raw.strip()
        source, after_file = after_file, line.startswith("File ")
        if (
            line
            and not source
            and not line.endswith(":")
            and not line.startswith(_WHERE)
        ):
            lines.append(line)
    text = " ".join(lines)
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."


# ---------------------------------------------------------------- running jobs


def run_client(job: ClientJob, runner: ModelRunner) -> ClientResult | ClientFailure:
    """Run one client's job on a compiled model of ``job.spec``."""
    return run_job(job, KerasTrainer(runner, job.data, job.training))


def run_job(job: ClientJob, trainer: LocalTrainer) -> ClientResult | ClientFailure:
    """Run one client's job on ``trainer`` (bound to the job's data): its
    algorithm's round, then its local model on its local test split. A guarded
    job's exception comes back as a :class:`ClientFailure` (logged)."""
    if not job.guarded:
        return _run_job(job, trainer)
    try:
        return _run_job(job, trainer)
    except Exception as exc:  # one client's failure, left out by the round
        message = one_line(exc)
        log.warning("round %d: client %d failed: %s", job.task.round,
                    job.task.client, message)  # fmt: skip
        log.debug("client %d's traceback", job.task.client, exc_info=True)
        return ClientFailure(job.task.client, message)


def _run_job(job: ClientJob, trainer: LocalTrainer) -> ClientResult:
    reply = job.algorithm.train(job.task, trainer)
    local_model = reply.weights if reply.local_model is None else reply.local_model
    steps = trainer.steps_taken if reply.steps is None else reply.steps
    sent, unnoised = list(reply.weights), None
    dp = job.training.local_dp
    if dp is not None:  # local DP: clipped and noised here, in the client's job
        sent, unnoised = released(dp, job.task, sent), sent
    state, payload = dict(reply.state), None
    if job.uplink is not None:  # on the wire: the payload in place of the weights
        out = job.uplink.send(job.task, sent, trainer.n_train)
        sent, payload = [], out.payload
        state.update(out.state)
    return ClientResult(
        update=ClientUpdate(
            job.task.client,
            sent,
            trainer.n_train,
            dict(reply.extras),
            steps=int(steps),
        ),
        n_test=len(job.data.y_test),
        local=trainer.evaluate(local_model),
        train_loss=float(reply.train_loss),
        state=state,
        unnoised=unnoised,
        payload=payload,
    )


def run_here(runner: ModelRunner) -> MapClients:
    """Run client jobs one after another on ``runner`` (tests, benchmarks)."""
    return lambda jobs: [run_client(job, runner) for job in jobs]
