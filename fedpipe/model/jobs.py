"""A client's job and what comes back: the round's data types, with no Keras.

A :class:`ClientJob` is self-contained and picklable: the model spec, the client
algorithm, its task and its data. Running one gives a :class:`ClientResult`, or a
:class:`ClientFailure` when a guarded job raised; a :data:`MapClients` runs a
round's jobs (:func:`fedpipe.model.trainer.run_here`,
:func:`fedpipe.model.cohort.cohort_map`, the Prefect tasks), and
:func:`task_name` names a group of them. Importing this module loads no
TensorFlow: the spec, the data and the wire are named for types only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fedpipe.client.base import (
    ClientAlgorithm,
    ClientState,
    ClientTask,
    LocalTraining,
    Weights,
)
from fedpipe.strategy.base import ClientUpdate

if TYPE_CHECKING:
    from fedpipe.data.splits import ClientData
    from fedpipe.model.training import ModelSpec
    from fedpipe.wire.compression import Payload
    from fedpipe.wire.uplink import Uplink


@dataclass(frozen=True)
class ClientJob:
    """Everything one client's training needs, to run anywhere.

    A ``guarded`` job (every job of :func:`fedpipe.federation.round.run_round`)
    that raises returns a :class:`ClientFailure` instead: one failing client never
    fails the others trained with it (in one Prefect task, one cohort). Its
    ``uplink`` (given by a round step: compression, secure aggregation) turns
    the trained weights into what crosses the wire (:mod:`fedpipe.wire.uplink`).
    """

    spec: ModelSpec
    algorithm: ClientAlgorithm
    task: ClientTask
    data: ClientData = field(repr=False)
    training: LocalTraining
    guarded: bool = False
    uplink: Uplink | None = None


@dataclass(frozen=True)
class ClientResult:
    """A selected client's outcome.

    Attributes
    ----------
    update : ClientUpdate
        What the strategy aggregates (weights, sample count, extras).
    n_test : int
        Size of the client's local test split.
    local : dict
        Its locally trained model's metrics on its local test split.
    train_loss : float
        Mean local training loss.
    state : ClientState
        What the client keeps from this round (namespaces it replaced).
    unnoised : list of ndarray or None
        Under local DP (``privacy.mechanism: local``): the weights the client
        trained, before its job clipped and noised them into ``update``. Only
        the simulation's oracle reads them (the noise-free figures of the
        oracle view); they are never aggregated. None otherwise.
    payload : Payload or None
        With a job's ``uplink`` (``compression.*``, secure aggregation): what
        crossed the wire in place of the weights (``update.weights`` is empty
        until the round's step decodes it; under secure aggregation it stays
        empty: the server holds only the sum). None otherwise.
    """

    update: ClientUpdate
    n_test: int
    local: dict[str, float]
    train_loss: float = float("nan")
    state: ClientState = field(default_factory=dict, repr=False)
    unnoised: Weights | None = field(default=None, repr=False)
    payload: Payload | None = field(default=None, repr=False)

    @property
    def client(self) -> int:
        return self.update.client


@dataclass(frozen=True)
class ClientFailure:
    """A client whose job raised: what comes back instead of its result.

    Attributes
    ----------
    client : int
        The client's id.
    message : str
        The error as one line, ``ExceptionType: first line of the message``.
    """

    client: int
    message: str


MapClients = Callable[[Sequence[ClientJob]], Sequence[ClientResult | ClientFailure]]
"""Runs a round's client jobs and returns their results in the same order."""


def task_name(jobs: Sequence[ClientJob]) -> str:
    """``round 3 · client 7``, or ``round 3 · clients 10-19 (10)`` for a cohort."""
    first, last = jobs[0].task, jobs[-1].task
    if len(jobs) == 1:
        return f"round {first.round} · client {first.client}"
    return f"round {first.round} · clients {first.client}-{last.client} ({len(jobs)})"
