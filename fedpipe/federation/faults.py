"""Deliberate faults, to reproduce a failure on purpose (``faults.*`` in params).

A diagnosis is only trusted once it has named a cause that was planted on purpose.
These faults plant, on the user's own data and model, the mistakes that real
federated-learning code makes, so ``fedpipe doctor`` can be seen to name them.
Every fault is off by default (null) and is recorded with the round in
``dvc.lock`` like any other param.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fedpipe.client.base import ClientAlgorithm, ClientReply, ClientTask, LocalTrainer
from fedpipe.core.errors import FedpipeError
from fedpipe.federation.steps import RoundStep

if TYPE_CHECKING:
    from fedpipe.model.jobs import ClientJob

Fault = Literal["raise", "nonfinite"]


def misweighted_aggregate(
    before: Sequence[np.ndarray], after: Sequence[np.ndarray], weight_sum: float
) -> list[np.ndarray]:
    """The global model as ``sum_k a_k w_k`` with weights summing to ``weight_sum``.

    Hand-written FedAvg code that averages the clients' *weights* with factors that
    do not sum to 1 (a sample count taken from the wrong set, a scaling applied
    twice) multiplies every weight by that sum in every round: the model's scale,
    and with it the confidence of its predictions, grows geometrically, while the
    predicted classes (and so the accuracy) barely change. That is the seed
    question's global loss climbing past 10,000 with every aggregation.

    Parameters
    ----------
    before : list of ndarray
        Global weights before the round (unused by the arithmetic: the correct
        aggregate ``after`` already contains it; kept so the signature says what
        the fault replaces).
    after : list of ndarray
        The strategy's correct aggregate.
    weight_sum : float
        What the faulty aggregation weights add up to.
    """
    del before
    scale = np.float32(weight_sum)
    return [
        (np.asarray(w) * scale).astype(np.asarray(w).dtype)
        if np.issubdtype(np.asarray(w).dtype, np.floating)
        else np.asarray(w)
        for w in after
    ]


# ---------------------------------------------------------------- faulty clients


class PlantedClientFailure(FedpipeError, RuntimeError):
    """What a client of ``faults.failing_clients`` raises in its own job."""


@dataclass(frozen=True)
class PlantedFaults(RoundStep):
    """Clients that fail on purpose (``faults.failing_clients``,
    ``faults.nonfinite_clients``), from round ``from_round`` on: a step of
    every round whose :meth:`client_job` gives a planted client's job a
    :class:`FaultyClient` around its algorithm."""

    failing: frozenset[int] = frozenset()
    nonfinite: frozenset[int] = frozenset()
    from_round: int = 1

    def fault_for(self, client: int, round_: int) -> Fault | None:
        """The fault ``client`` has in ``round_``, or None."""
        if round_ < self.from_round:
            return None
        if client in self.failing:
            return "raise"
        if client in self.nonfinite:
            return "nonfinite"
        return None

    def client_job(self, round_: int, job: ClientJob) -> ClientJob:
        """``job``, or with a :class:`FaultyClient` around its algorithm for a
        planted client."""
        fault = self.fault_for(job.task.client, round_)
        if fault is None:
            return job
        return replace(job, algorithm=FaultyClient(job.algorithm, fault))


class FaultyClient(ClientAlgorithm):
    """A client algorithm that trains as ``inner`` and then fails as planted.

    ``raise``: the job raises :class:`PlantedClientFailure` after training, in
    the client's own code path (a crash before it could send). ``nonfinite``:
    every floating-point array it sends is NaN (a corrupted or blown-up update);
    its local model (reported in ``local`` metrics) is what it trained.
    """

    name = "faulty"

    def __init__(self, inner: ClientAlgorithm, fault: Fault) -> None:
        self.inner, self.fault = inner, fault

    def __repr__(self) -> str:
        return f"FaultyClient({self.inner!r}, fault={self.fault!r})"

    @property
    def fits_per_round(self) -> int:
        return self.inner.fits_per_round

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        reply = self.inner.train(task, trainer)
        if self.fault == "raise":
            raise PlantedClientFailure(
                f"client {task.client} failed on purpose (faults.failing_clients)"
            )
        local = reply.weights if reply.local_model is None else reply.local_model
        return replace(reply, weights=_nan_like(reply.weights), local_model=local)


def _nan_like(weights: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each floating-point array filled with NaN (others as they are)."""
    return [
        np.full_like(w, np.nan)
        if np.issubdtype(np.asarray(w).dtype, np.floating)
        else np.asarray(w)
        for w in weights
    ]


# ---------------------------------------------------------------- as a step


class MisweightedAggregation(RoundStep):
    """The planted weight-sum fault (``faults.aggregation_weight_sum``) as a step
    of the round: the new global weights scaled by :func:`misweighted_aggregate`,
    and the recorded aggregation weight sum with them.

    Parameters
    ----------
    weight_sum : float
        What the faulty aggregation weights add up to.
    """

    def __init__(self, weight_sum: float) -> None:
        self.weight_sum = weight_sum

    def __repr__(self) -> str:
        return f"MisweightedAggregation({self.weight_sum!r})"

    def after_aggregate(
        self, before: Sequence[np.ndarray], weights: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        return misweighted_aggregate(before, weights, self.weight_sum)

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the aggregation weight sum scaled by the fault."""
        total = fields["aggregation_weight_sum"] * self.weight_sum
        return {**fields, "aggregation_weight_sum": total}
