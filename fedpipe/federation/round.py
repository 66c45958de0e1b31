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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpipe.client.base import (
    ClientAlgorithm,
    ClientState,
    ClientTask,
    LocalTraining,
    Weights,
)
from fedpipe.core.seeds import rng_for
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.attacks import AttackPlan, tampered_results
from fedpipe.federation.clientstate import ClientStates, merged
from fedpipe.federation.failures import (
    NONFINITE,
    FailurePolicy,
    lost_message,
    nonfinite_update,
    plan_round,
)
from fedpipe.federation.faults import PlantedFaults, misweighted_aggregate
from fedpipe.federation.health import round_health
from fedpipe.federation.privacy import rounds as dp
from fedpipe.federation.records import RoundRecord
from fedpipe.model.metrics import classification_metrics
from fedpipe.model.probe import PROBE_SAMPLES, dead_unit_shares
from fedpipe.model.trainer import (
    ClientFailure,
    ClientJob,
    ClientResult,
    KerasTrainer,
    MapClients,
)
from fedpipe.model.training import ModelRunner, ModelSpec
from fedpipe.model.zoo import layer_info
from fedpipe.strategy import AggregationError, State, Strategy
from fedpipe.strategy.aggregate import normalized

log = logging.getLogger("fedpipe")

# ---------------------------------------------------------------- sampling


def sample_clients(
    *, n_clients: int, per_round: int, seed: int, round_: int, purpose: str = "sample"
) -> list[int]:
    """The clients that train in ``round_`` (or, with another ``purpose``, are
    picked for it): seeded per round, sorted by id."""
    if per_round >= n_clients:
        return list(range(n_clients))
    rng = rng_for(seed, purpose, round_)
    return sorted(int(c) for c in rng.choice(n_clients, size=per_round, replace=False))


@dataclass(frozen=True)
class ClientEvaluation:
    """Which clients' test splits the new global model is scored on (``evaluation.*``).

    Attributes
    ----------
    clients : str
        ``all``, ``participants``, ``sample`` or ``none``.
    sample_size : int or None
        For ``sample``: clients scored per round (seeded per round).
    full_every : int or None
        Rounds that are a multiple of it score every client.
    rounds : int or None
        The federation's last round, which always scores every client.
    """

    clients: str = "all"
    sample_size: int | None = None
    full_every: int | None = None
    rounds: int | None = None

    def clients_for(
        self, round_: int, selected: Sequence[int], n_clients: int, seed: int
    ) -> list[int]:
        """The clients scored in ``round_``, sorted by id."""
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
        The server strategy and the (composed) client algorithm.
    training : LocalTraining
        ``train.*``.
    clients_per_round : int
        Clients sampled this round.
    weight_sum_fault : float or None
        ``faults.aggregation_weight_sum``: applied after aggregation.
    evaluation : ClientEvaluation
        ``evaluation.*``: which clients the new global model is scored on.
    failures : FailurePolicy
        ``federation.*``: dropout, deadline, stragglers, usable updates needed.
    planted : PlantedFaults
        ``faults.failing_clients`` / ``faults.nonfinite_clients``.
    privacy : Privacy or None
        ``privacy.*``: the round's DP mechanism and budget (None: no privacy).
    attack : AttackPlan or None
        ``attack.*``: who is malicious and what they do (None: nobody).
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
    weight_sum_fault: float | None = None
    evaluation: ClientEvaluation = ClientEvaluation()
    failures: FailurePolicy = FailurePolicy()
    planted: PlantedFaults = PlantedFaults()
    privacy: dp.Privacy | None = None

    def sampled(self, round_: int) -> list[int]:
        """The clients sampled in ``round_`` (this federation's sampling)."""
        return sample_clients(
            n_clients=len(self.data.clients),
            per_round=self.clients_per_round,
            seed=self.seed,
            round_=round_,
        )

    attack: AttackPlan | None = None


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
) -> list[ClientJob]:
    """The round's job for each selected client, in client order (``training``:
    a client's own ``train.*``, e.g. a straggler's step budget)."""
    broadcast = inputs.strategy.broadcast(inputs.server_state)
    training = training or {}
    return [
        ClientJob(
            spec=inputs.spec,
            algorithm=inputs.planted.wrap(inputs.algorithm, c, inputs.round),
            task=ClientTask(
                client=c,
                round=inputs.round,
                global_weights=inputs.global_weights,
                broadcast=broadcast,
                state=inputs.client_states.get(c, {}),
                seed=inputs.seed,
            ),
            data=_client_data(inputs, c),
            training=training.get(c, inputs.training),
            guarded=True,
        )
        for c in selected
    ]


def run_round(
    inputs: RoundInputs, *, map_clients: MapClients, runner: ModelRunner
) -> RoundOutputs:
    """Run round K: sample, train the selected clients, aggregate, evaluate.

    Parameters
    ----------
    inputs : RoundInputs
        The state after round K-1 and the round's settings.
    map_clients : MapClients
        Runs the client jobs (any order, any place) and returns results in job
        order.
    runner : ModelRunner
        A compiled model of ``inputs.spec`` for evaluation in this process.

    Clients that drop out, fail, send non-finite values or miss the deadline
    are left out (:mod:`fedpipe.federation.failures`) and named in the record and health.

    Raises
    ------
    ClientsLost
        Fewer than ``federation.min_clients`` usable updates remained.
    RoundFailed
        The strategy refused the updates (with the round's health record).
    PrivacyBudgetExceeded
        The round would pass ``privacy.target_epsilon`` (raised before any work).
    """
    epsilon = dp.spend(inputs.privacy, inputs.round, inputs.sampled)
    selected = inputs.sampled(inputs.round)
    plan = plan_round(
        selected,
        n_train={c: len(inputs.data.clients[c].y_train) for c in selected},
        training=inputs.training,
        policy=inputs.failures,
        seed=inputs.seed,
        round_=inputs.round,
        n_clients=len(inputs.data.clients),
    )
    returned = list(map_clients(client_jobs(inputs, list(plan.train), plan.train)))
    got = [r.client for r in returned]
    if got != list(plan.train):
        raise RuntimeError(
            f"map_clients returned clients {got}, expected {list(plan.train)}"
        )
    results, excluded = _usable(returned, plan.excluded)
    usable = [r for r in results if r.client not in excluded]
    if len(usable) < max(1, inputs.failures.min_clients):
        raise _lost(inputs, runner, results, excluded, len(usable), len(selected))
    before = inputs.global_weights
    # the attackers' updates replaced (after the non-finite ones were left out: an
    # omniscient attack computed over a NaN would be NaN); health sees them too
    usable = tampered_results(inputs.attack, inputs.round, before, usable)
    tampered = {r.client: r for r in usable}
    results = [tampered.get(r.client, r) for r in results]
    states = merged(inputs.client_states, {r.client: r.state for r in usable})
    try:
        weights, server_state, private = dp.aggregate_round(
            inputs.privacy,
            inputs.strategy,
            before,
            [r.update for r in usable],
            inputs.server_state,
            seed=inputs.seed,
            round_=inputs.round,
        )
    except AggregationError as exc:
        health = _health(inputs, runner, results, after=None, excluded=excluded)
        health.pop("seconds")
        raise RoundFailed(str(exc), health) from exc
    weight_sum = float(normalized([r.update.n_samples for r in usable]).sum())
    weights = _after_aggregation(inputs, before, weights)
    if inputs.weight_sum_fault is not None:
        weight_sum *= inputs.weight_sum_fault
    scored = inputs.evaluation.clients_for(
        inputs.round, [r.client for r in usable], len(inputs.data.clients), inputs.seed
    )
    personalized = (
        _personalized(inputs, runner, weights, states, scored)
        if inputs.algorithm.personalized
        else None
    )
    held_out, on_clients, probs, losses = _evaluate_global(
        runner, weights, inputs.data, scored
    )
    # the model holds the new global weights (the evaluation set them)
    dead = dead_unit_shares(runner.model, inputs.data.x_test_lazy[:PROBE_SAMPLES])
    clients = inputs.data.clients
    record = RoundRecord(
        round=inputs.round,
        selected=list(selected),
        n_test={c: len(clients[c].y_test) for c in sorted({*scored, *selected})},
        global_test=held_out,
        global_clients=on_clients,
        local={r.client: r.local for r in results},
        aggregation_weight_sum=weight_sum,
        personalized=personalized,
        n_clients=len(clients),
        excluded=excluded,
        partial=dict(plan.partial),
        privacy=dp.with_epsilon(private, inputs.privacy, epsilon),
        malicious=_malicious(inputs, selected),
    )
    health = _health(
        inputs,
        runner,
        results,
        after=weights,
        record=record,
        probs=probs,
        losses=losses,
        excluded=excluded,
        dead_units=dead,
    )
    seconds = float(health.pop("seconds"))
    return RoundOutputs(weights, server_state, states, record, health, seconds)


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
    inputs: RoundInputs,
    runner: ModelRunner,
    results: Sequence[ClientResult],
    excluded: Mapping[int, str],
    usable: int,
    selected: int,
) -> ClientsLost:
    """The round's stop: its one line, and its health record (what came back)."""
    message = lost_message(
        inputs.round,
        usable=usable,
        selected=selected,
        min_clients=max(1, inputs.failures.min_clients),
        excluded=excluded,
    )
    if results:
        health = _health(inputs, runner, results, after=None, excluded=excluded)
        health.pop("seconds")
    else:
        left_out = {str(c): r for c, r in excluded.items()}
        health = {"round": inputs.round, "clients": [], "excluded": left_out}
    health["stopped"] = message
    return ClientsLost(message, health)


def _client_data(inputs: RoundInputs, client: int) -> ClientData:
    """What ``client`` trains on this round (``attack.*`` may poison it)."""
    data = inputs.data.clients[client]
    if inputs.attack is None:
        return data
    return inputs.attack.poisoned(inputs.round, data, inputs.spec.n_classes)


def _malicious(inputs: RoundInputs, selected: Sequence[int]) -> list[int] | None:
    """The round's attackers for its record (None: no ``attack.*``)."""
    if inputs.attack is None:
        return None
    return inputs.attack.attackers(inputs.round, selected)


def _after_aggregation(inputs: RoundInputs, before: Weights, after: Weights) -> Weights:
    """Steps after aggregation: layers that stay on clients keep their global
    values; the planted fault (``faults.aggregation_weight_sum``) scales."""
    frozen = set(inputs.algorithm.frozen)
    if frozen:
        after = [before[j] if j in frozen else w for j, w in enumerate(after)]
    if inputs.weight_sum_fault is not None:
        after = misweighted_aggregate(before, after, inputs.weight_sum_fault)
    return after


def _personalized(
    inputs: RoundInputs,
    runner: ModelRunner,
    weights: Weights,
    states: Mapping[int, ClientState],
    scored: Sequence[int],
) -> dict[int, dict[str, float]]:
    """The scored clients' personalized models, each on its own local test split."""
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


def _health(
    inputs: RoundInputs,
    runner: ModelRunner,
    results: Sequence[ClientResult],
    *,
    after: Weights | None,
    record: RoundRecord | None = None,
    probs: np.ndarray | None = None,
    losses: np.ndarray | None = None,
    excluded: Mapping[int, str] | None = None,
    dead_units: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    health = round_health(
        inputs.round,
        before=inputs.global_weights,
        after=after,
        client_weights={r.client: r.update.weights for r in results},
        n_train={r.client: r.update.n_samples for r in results},
        train_loss={r.client: r.train_loss for r in results},
        layers=layer_info(runner.model),
        trainable=runner.trainable_indices(),
        probs=probs,
        labels=None if after is None else inputs.data.y_test,
        losses=losses,
        record=record,
        excluded=excluded,
        dead_units=dead_units,
    )
    malicious = _malicious(inputs, [r.client for r in results])
    if malicious is not None:
        health["malicious"] = malicious
    return health
