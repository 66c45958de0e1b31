"""One federation round, as one pure function: :func:`run_round`.

Sampling, the clients' tasks, aggregation, the steps after aggregation, global and
personalized evaluation and the health record all happen here, with no Prefect or
DVC. The caller loads the inputs, passes ``map_clients`` (how the round's client
jobs are run: one after another here, or one Prefect task each, locally or on Dask)
and writes the outputs::

    outputs = run_round(inputs, map_clients=run_here(runner), runner=runner)

A client job (:class:`ClientJob`) is self-contained and picklable: the model spec,
the client algorithm, its task and its data; :func:`run_client` runs one on a
compiled model. Results come back in client order, and aggregation sums in that
order, so the order decides the last bits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedpipe.client.base import (
    ClientAlgorithm,
    ClientState,
    ClientTask,
    LocalTraining,
    Weights,
)
from fedpipe.core.seeds import keyed_rng, rng_for
from fedpipe.data.splits import FederatedData
from fedpipe.federation.clientstate import ClientStates, merged
from fedpipe.federation.diagnostics import (
    ROUND_DIAGNOSTICS,
    FinishedRound,
    RoundDiagnostic,
    health_record,
)
from fedpipe.federation.failures import (
    NONFINITE,
    FailurePolicy,
    RoundPlan,
    lost_message,
    nonfinite_update,
    plan_round,
    planned_steps,
)
from fedpipe.federation.faults import PlantedFaults
from fedpipe.federation.personalization import KeptLayers
from fedpipe.federation.records import RoundRecord
from fedpipe.federation.steps import RoundStep, wrapped
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult, MapClients
from fedpipe.model.metrics import class_report, classification_metrics
from fedpipe.model.trainer import KerasTrainer
from fedpipe.model.training import ModelRunner, ModelSpec
from fedpipe.strategy import AggregationError, State, Strategy
from fedpipe.strategy.aggregate import normalized

log = logging.getLogger("fedpipe")

# ---------------------------------------------------------------- sampling


def sample_clients(
    *,
    n_clients: int,
    per_round: int,
    seed: int,
    round_: int,
    purpose: str = "sample",
    key: bytes | None = None,
) -> list[int]:
    """The clients that train in ``round_`` (or, with another ``purpose``, are
    picked for it): seeded per round, sorted by id; with ``key`` (the project's
    secret key, under DP) keyed by it, so the sample cannot be recomputed from
    ``params.yaml`` (privacy amplification by sampling assumes a secret sample)."""
    if per_round >= n_clients:
        return list(range(n_clients))
    rng = _sampling_rng(seed, purpose, round_, key)
    return sorted(int(c) for c in rng.choice(n_clients, size=per_round, replace=False))


def _sampling_rng(
    seed: int, purpose: str, round_: int, key: bytes | None
) -> np.random.Generator:
    if key is None:
        return rng_for(seed, purpose, round_)
    return keyed_rng(key, seed, purpose, round_)


@dataclass(frozen=True)
class FixedSampling:
    """``federation.sampling: fixed``: ``per_round`` of the clients, uniformly
    without replacement, seeded per round (:func:`sample_clients`).

    ``key``: the project's secret key under DP (None without privacy: the
    sample derives from the seed alone, as always)."""

    key: bytes | None = field(default=None, repr=False)
    name = "fixed"

    def clients(
        self, *, n_clients: int, per_round: int, seed: int, round_: int
    ) -> list[int]:
        """The clients sampled in ``round_``, sorted by id."""
        return sample_clients(
            n_clients=n_clients,
            per_round=per_round,
            seed=seed,
            round_=round_,
            key=self.key,
        )


@dataclass(frozen=True)
class PoissonSampling:
    """``federation.sampling: poisson``: each client joins ``round_``
    independently with probability ``rate`` (q, ``federation.fraction_fit``),
    seeded per round (and keyed by ``key``, the project's secret key, under DP);
    the sample's size varies around q n (and may be below
    ``federation.min_clients``: the round then stops as any round short of
    clients does). The sampling DP-SGD and its PLD accounting assume."""

    rate: float
    key: bytes | None = field(default=None, repr=False)
    name = "poisson"

    def clients(
        self, *, n_clients: int, per_round: int, seed: int, round_: int
    ) -> list[int]:
        """The clients sampled in ``round_``, sorted by id (``per_round`` is
        unused: the size is random)."""
        rng = _sampling_rng(seed, "sample_poisson", round_, self.key)
        return [int(c) for c in np.flatnonzero(rng.random(n_clients) < self.rate)]


ClientSampling = FixedSampling | PoissonSampling
"""How a round samples its clients (``federation.sampling``)."""


AUTO_ALL_UP_TO = 100
"""``evaluation.clients: auto`` scores every client every round up to this many
clients. Scoring a client's test split costs about what training on it costs
(1,000 clients: 0.8-0.9 s a round against 0.2-0.3 s at 100 on 2 cores), so past a
hundred clients a round that scored everyone would cost more than its training."""

AUTO_FULL_EVERY = 10
"""``evaluation.clients: auto`` above :data:`AUTO_ALL_UP_TO` clients scores every
client every this many rounds (and in the last) when ``full_every`` is unset."""


@dataclass(frozen=True)
class ClientEvaluation:
    """Which clients' test splits the new global model is scored on (``evaluation.*``).

    Attributes
    ----------
    clients : str
        ``auto``, ``all``, ``participants``, ``sample`` or ``none``. ``auto`` is
        ``all`` up to :data:`AUTO_ALL_UP_TO` clients, else ``participants`` with
        a complete round every ``full_every`` (:data:`AUTO_FULL_EVERY`) rounds.
    sample_size : int or None
        For ``sample``: clients scored per round (seeded per round).
    full_every : int or None
        Rounds that are a multiple of it score every client.
    rounds : int or None
        The federation's last round, which always scores every client.
    """

    clients: str = "auto"
    sample_size: int | None = None
    full_every: int | None = None
    rounds: int | None = None

    def resolved(self, n_clients: int) -> ClientEvaluation:
        """This plan with ``auto`` replaced by what it means for ``n_clients``."""
        if self.clients != "auto":
            return self
        if n_clients <= AUTO_ALL_UP_TO:
            return replace(self, clients="all")
        return replace(
            self, clients="participants", full_every=self.full_every or AUTO_FULL_EVERY
        )

    def clients_for(
        self, round_: int, selected: Sequence[int], n_clients: int, seed: int
    ) -> list[int]:
        """The clients scored in ``round_``, sorted by id."""
        if self.clients == "auto":
            return self.resolved(n_clients).clients_for(
                round_, selected, n_clients, seed
            )
        complete = (
            self.clients == "all"
            or round_ == self.rounds
            or (self.full_every is not None and round_ % self.full_every == 0)
        )
        if complete:
            return list(range(n_clients))
        if self.clients == "participants":
            return sorted(selected)
        if self.clients == "sample":
            assert self.sample_size is not None
            return sample_clients(
                n_clients=n_clients,
                per_round=self.sample_size,
                seed=seed,
                round_=round_,
                purpose="evaluate",
            )
        return []


# ---------------------------------------------------------------- the round


@dataclass(frozen=True)
class RoundInputs:
    """What a round starts from.

    Attributes
    ----------
    round : int
        K (1-based).
    seed : int
        The experiment's seed (sampling and every client's seeds derive from it).
    spec : ModelSpec
        The model.
    data : FederatedData
        Held-out test set and every client's splits.
    global_weights, server_state, client_states
        The state after round K-1.
    strategy, algorithm
        The server strategy (a :class:`~fedpipe.federation.steps.StrategyWrapper`
        around it under ``privacy.*``) and the (composed) client algorithm.
    training : LocalTraining
        ``train.*``.
    clients_per_round : int
        Clients sampled this round (with Poisson sampling, unused).
    sampling : ClientSampling
        ``federation.sampling``: fixed-size (the default) or Poisson.
    evaluation : ClientEvaluation
        ``evaluation.*``: which clients the new global model is scored on.
    failures : FailurePolicy
        ``federation.*``: dropout, deadline, stragglers, usable updates needed.
    planted : PlantedFaults
        ``faults.failing_clients`` / ``faults.nonfinite_clients`` (a step of
        the round: :meth:`round_steps`).
    steps : tuple of RoundStep
        What the run adds to every round (``attack.*``,
        ``faults.aggregation_weight_sum``, the wire, DP-SGD's books), in order
        (:mod:`fedpipe.federation.steps`).
    """

    round: int
    seed: int
    spec: ModelSpec
    data: FederatedData = field(repr=False)
    global_weights: Weights = field(repr=False)
    server_state: State = field(repr=False)
    client_states: ClientStates = field(repr=False)
    strategy: Strategy
    algorithm: ClientAlgorithm
    training: LocalTraining
    clients_per_round: int
    evaluation: ClientEvaluation = ClientEvaluation()
    failures: FailurePolicy = FailurePolicy()
    planted: PlantedFaults = PlantedFaults()
    steps: tuple[RoundStep, ...] = ()
    sampling: ClientSampling = FixedSampling()

    def round_steps(self) -> tuple[RoundStep, ...]:
        """Every step of the round, in order: the planted client faults, the
        layers the client algorithm keeps on the clients
        (:class:`~fedpipe.federation.personalization.KeptLayers`), then
        :attr:`steps`."""
        return (self.planted, KeptLayers(self.algorithm), *self.steps)

    def sampled(self, round_: int) -> list[int]:
        """The clients sampled in ``round_`` (this federation's sampling)."""
        return self.sampling.clients(
            n_clients=len(self.data.clients),
            per_round=self.clients_per_round,
            seed=self.seed,
            round_=round_,
        )


@dataclass(frozen=True)
class RoundOutputs:
    """What a round produces: the round's versioned outputs, as values."""

    weights: Weights = field(repr=False)
    server_state: State = field(repr=False)
    client_states: ClientStates = field(repr=False)
    record: RoundRecord
    health: dict[str, Any] = field(repr=False)
    health_seconds: float = 0.0


class RoundFailed(AggregationError):
    """Aggregation refused the round's updates; ``health`` still describes the
    clients (which one sent non-finite values), for the doctor."""

    def __init__(self, message: str, health: dict[str, Any]) -> None:
        super().__init__(message)
        self.health = health


class ClientsLost(RoundFailed):
    """Fewer usable updates than ``federation.min_clients`` remained after
    dropouts, failures, non-finite updates and dropped stragglers."""


def client_jobs(
    inputs: RoundInputs,
    selected: Sequence[int],
    training: Mapping[int, LocalTraining] | None = None,
    *,
    steps: Sequence[RoundStep] | None = None,
) -> list[ClientJob]:
    """The round's job for each selected client, in client order, as each of
    ``steps`` makes it (:meth:`RoundStep.client_job`; default: the round's
    steps, started for it). ``training``: a client's own ``train.*``, e.g. a
    straggler's step budget."""
    if steps is None:
        steps = [s.start(inputs.round, inputs.sampled) for s in inputs.round_steps()]
    broadcast = inputs.strategy.broadcast(inputs.server_state)
    training = training or {}
    jobs = [
        ClientJob(
            spec=inputs.spec,
            algorithm=inputs.algorithm,
            task=ClientTask(
                client=c,
                round=inputs.round,
                global_weights=inputs.global_weights,
                broadcast=broadcast,
                state=inputs.client_states.get(c, {}),
                seed=inputs.seed,
            ),
            data=inputs.data.clients[c],
            training=training.get(c, inputs.training),
            guarded=True,
        )
        for c in selected
    ]
    for step in steps:
        jobs = [step.client_job(inputs.round, job) for job in jobs]
    return jobs


def run_round(
    inputs: RoundInputs,
    *,
    map_clients: MapClients,
    runner: ModelRunner,
    diagnostics: Sequence[RoundDiagnostic] = ROUND_DIAGNOSTICS,
) -> RoundOutputs:
    """Round K: sample, plan, map the clients, the steps on their results,
    aggregate, evaluate, record; ``diagnostics`` make the health record of the
    finished round (:mod:`fedpipe.federation.diagnostics`). ``map_clients``
    runs the jobs (anywhere), returning results in job order; ``runner``
    evaluates here. Clients that drop out, fail, send non-finite values or miss
    the deadline are left out and named (:mod:`fedpipe.federation.failures`).
    Raises :class:`ClientsLost` (fewer than ``federation.min_clients`` usable
    updates), :class:`RoundFailed` (the strategy refused the updates) or what
    a step's ``start`` raises before any work (``PrivacyBudgetExceeded``)."""
    strategy = wrapped(inputs.strategy).start(inputs.round, inputs.sampled)
    steps = [step.start(inputs.round, inputs.sampled) for step in inputs.round_steps()]
    selected = inputs.sampled(inputs.round)
    plan = _admitted(inputs, steps, _plan(inputs, selected))
    returned = _exchanged(inputs, [*steps, strategy], plan, map_clients)
    results, excluded = _usable(returned, plan.excluded)
    usable = [r for r in results if r.client not in excluded]
    finished = FinishedRound(inputs, runner, results, excluded, [*steps, strategy])
    if len(usable) < max(1, inputs.failures.min_clients):
        raise _lost(finished, diagnostics, len(usable), len(selected))
    before = inputs.global_weights
    for step in [*steps, strategy]:  # health sees what the server received, too
        usable = step.on_results(inputs.round, before, usable)
    tampered = {r.client: r for r in usable}
    results = [tampered.get(r.client, r) for r in results]
    finished = replace(finished, results=results)
    states = merged(inputs.client_states, {r.client: r.state for r in usable})
    kept = strategy.too_few(len(usable))  # the previous model stays (recorded)
    try:
        weights, server_state = _aggregate(inputs, strategy, usable, kept)
    except AggregationError as exc:
        health, _ = health_record(finished, diagnostics)
        raise RoundFailed(str(exc), health) from exc
    for step in steps:
        weights = step.after_aggregate(before, weights)
    scored = inputs.evaluation.clients_for(
        inputs.round, [r.client for r in usable], len(inputs.data.clients), inputs.seed
    )
    personalized = _personalized(inputs, runner, weights, states, scored)
    held_out, on_clients, probs, losses = _evaluate_global(
        runner, weights, inputs.data, scored
    )
    fields = _record_fields(inputs, selected, scored, usable, results)
    fields.update(_global_fields(inputs, held_out, on_clients, probs))
    fields.update(partial=dict(plan.partial), personalized=personalized)
    fields.update(excluded=excluded, kept=kept)
    for step in [*steps, strategy]:
        fields = step.record(fields)
    record = RoundRecord(**fields)
    done = replace(finished, weights=weights, record=record, probs=probs)
    health, seconds = health_record(replace(done, losses=losses), diagnostics)
    return RoundOutputs(weights, server_state, states, record, health, seconds)


def _exchanged(
    inputs: RoundInputs,
    steps: Sequence[RoundStep],
    plan: RoundPlan,
    map_clients: MapClients,
) -> list[ClientResult | ClientFailure]:
    """The planned clients' replies, in job order: their jobs as each step
    makes them (:meth:`RoundStep.client_job`), run by ``map_clients``, and
    received by each step (:meth:`RoundStep.receive`: decoded, unmasked)."""
    jobs = client_jobs(inputs, list(plan.train), plan.train, steps=steps)
    returned = list(map_clients(jobs))
    _check_order(returned, list(plan.train))
    for step in steps:
        returned = step.receive(inputs.round, inputs.global_weights, returned)
    return returned


def _aggregate(
    inputs: RoundInputs,
    strategy: Strategy,
    usable: Sequence[ClientResult],
    kept: str | None,
) -> tuple[Weights, State]:
    """The strategy's new weights and state from the usable updates; when it
    cannot aggregate that few (``kept``, :meth:`Strategy.too_few`), the
    previous global model and server state, unchanged."""
    if kept:
        return [np.array(w) for w in inputs.global_weights], dict(inputs.server_state)
    updates = [r.update for r in usable]
    return strategy.aggregate_round(inputs.global_weights, updates, inputs.server_state)


def _usable(
    returned: Sequence[ClientResult | ClientFailure], planned: Mapping[int, str]
) -> tuple[list[ClientResult], dict[int, str]]:
    """The results that came back, and every client left out and why (planned
    exclusions, failures, non-finite updates), by client id."""
    excluded = dict(planned)
    results = []
    for r in returned:
        if isinstance(r, ClientFailure):
            excluded[r.client] = f"failed: {r.message}"
            continue
        results.append(r)
        if nonfinite_update(r.update):
            excluded[r.client] = NONFINITE
    return results, dict(sorted(excluded.items()))


def _lost(
    finished: FinishedRound,
    diagnostics: Sequence[RoundDiagnostic],
    usable: int,
    selected: int,
) -> ClientsLost:
    """The round's stop: its one line, and its health record (what came back)."""
    inputs = finished.inputs
    message = lost_message(
        inputs.round,
        usable=usable,
        selected=selected,
        min_clients=max(1, inputs.failures.min_clients),
        excluded=finished.excluded,
    )
    if finished.results:
        health, _ = health_record(finished, diagnostics)
    else:
        left_out = {str(c): r for c, r in finished.excluded.items()}
        health = {"round": inputs.round, "clients": [], "excluded": left_out}
    health["stopped"] = message
    return ClientsLost(message, health)


def _plan(inputs: RoundInputs, selected: Sequence[int]) -> RoundPlan:
    """Who of ``selected`` trains this round, with what budget, and who is left
    out before training (:func:`fedpipe.federation.failures.plan_round`)."""
    return plan_round(
        selected,
        n_train={c: len(inputs.data.clients[c].y_train) for c in selected},
        training=inputs.training,
        policy=inputs.failures,
        seed=inputs.seed,
        round_=inputs.round,
        n_clients=len(inputs.data.clients),
        fits=inputs.algorithm.fits_per_round,
    )


def _admitted(
    inputs: RoundInputs, steps: Sequence[RoundStep], plan: RoundPlan
) -> RoundPlan:
    """The plan once every step has admitted its clients (:meth:`RoundStep.admit`:
    e.g. DP-SGD leaves out a client whose privacy budget is spent)."""
    if not steps:
        return plan
    n_train = {c: len(d.y_train) for c, d in enumerate(inputs.data.clients)}
    fits = inputs.algorithm.fits_per_round
    planned = {c: planned_steps(n_train[c], t, fits) for c, t in plan.train.items()}
    for step in steps:
        plan = step.admit(inputs.round, plan, n_train=n_train, planned=planned,
                          states=inputs.client_states)  # fmt: skip
    return plan


def _check_order(
    returned: Sequence[ClientResult | ClientFailure], expected: Sequence[int]
) -> None:
    """``map_clients`` must return one result per job, in job order."""
    got = [r.client for r in returned]
    if got != list(expected):
        raise RuntimeError(f"map_clients returned clients {got}, expected {expected}")


def _global_fields(
    inputs: RoundInputs,
    held_out: dict[str, float],
    on_clients: Any,
    probs: Any,
) -> dict[str, Any]:
    """The round record's fields of the global model's evaluation: on the
    held-out set (and per class there), on the scored clients' test splits."""
    classes = class_report(inputs.data.y_test, probs, inputs.spec.n_classes)
    return {
        "global_test": held_out,
        "global_clients": on_clients,
        "global_classes": classes,
    }


def _record_fields(
    inputs: RoundInputs,
    selected: Sequence[int],
    scored: Sequence[int],
    usable: Sequence[ClientResult],
    results: Sequence[ClientResult],
) -> dict[str, Any]:
    """The round record's fields known from the clients (the steps add theirs)."""
    clients = inputs.data.clients
    return {
        "round": inputs.round,
        "selected": list(selected),
        "n_test": {c: len(clients[c].y_test) for c in sorted({*scored, *selected})},
        "local": {r.client: r.local for r in results},
        "aggregation_weight_sum": float(
            normalized([r.update.n_samples for r in usable]).sum()
        ),
        "n_clients": len(clients),
    }


def _personalized(
    inputs: RoundInputs,
    runner: ModelRunner,
    weights: Weights,
    states: Mapping[int, ClientState],
    scored: Sequence[int],
) -> dict[int, dict[str, float]] | None:
    """The scored clients' personalized models, each on its own local test split
    (None: the client algorithm has none)."""
    if not inputs.algorithm.personalized:
        return None
    out = {}
    for c in scored:
        client = inputs.data.clients[c]
        task = ClientTask(
            client=client.client,
            round=inputs.round,
            global_weights=weights,
            state=states.get(client.client, {}),
            seed=inputs.seed,
        )
        trainer = KerasTrainer(runner, client, inputs.training)
        model = inputs.algorithm.personal_model(task, trainer)
        out[c] = trainer.evaluate(weights if model is None else model)
    return out


def _evaluate_global(
    runner: ModelRunner, weights: Weights, data: FederatedData, scored: Sequence[int]
) -> tuple[dict[str, float], dict[int, dict[str, float]], np.ndarray, np.ndarray]:
    """The global model on the held-out set and the scored clients' test splits, in
    one pass; also the held-out probabilities and losses (for the health record)."""
    splits = data.evaluation_splits(scored)
    predicted = runner.predict_splits(weights, splits)
    metrics = [
        classification_metrics(ys, probs, losses)
        for (_, ys), (probs, losses) in zip(splits, predicted, strict=True)
    ]
    probs, losses = predicted[0]
    return metrics[0], dict(zip(scored, metrics[1:], strict=True)), probs, losses
