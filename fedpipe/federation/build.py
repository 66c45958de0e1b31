"""From typed settings to the objects a run is made of: the one road from
:class:`~fedpipe.config.params.Params` to the model spec, the strategy, the client
algorithm and local training. Everything below receives these as arguments."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpipe.client import ClientAlgorithm, client_class, make_client
from fedpipe.client.base import LocalDP, LocalTraining, RecordDP
from fedpipe.config.params import Params, ParamsError
from fedpipe.config.privacy import Privacy
from fedpipe.core.plugins import is_reference
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import FederatedData
from fedpipe.federation.attacks import (
    AttackPlan,
    AttackStep,
    choose_malicious,
    make_attack,
)
from fedpipe.federation.clientstate import ClientStates
from fedpipe.federation.failures import FailurePolicy
from fedpipe.federation.faults import MisweightedAggregation, PlantedFaults
from fedpipe.federation.personalization import Personalization, resolve
from fedpipe.federation.privacy.dpsgd import RecordPrivacy
from fedpipe.federation.privacy.rounds import PrivateStrategy
from fedpipe.federation.round import (
    ClientEvaluation,
    ClientSampling,
    FixedSampling,
    PoissonSampling,
    RoundInputs,
)
from fedpipe.federation.secure import SecureAggregation
from fedpipe.federation.steps import RoundStep
from fedpipe.federation.wire import WireStep
from fedpipe.model.training import ModelSpec, model_spec_for
from fedpipe.model.zoo import layer_groups, normalization_layers
from fedpipe.strategy import State, Strategy, make_strategy, strategy_class
from fedpipe.strategy.aggregate import Weights
from fedpipe.wire.compression import make_codec


def model_spec(
    params: Params, dataset: DatasetSpec, manifest: Mapping[str, Any] | None = None
) -> ModelSpec:
    """The model the experiment trains, from ``model.*``, ``train.*`` and the data;
    with the partition ``manifest`` (the clients' label counts) the loss's class
    weights under ``train.class_weight`` (:func:`federated_class_counts`)."""
    counts = None if manifest is None else federated_class_counts(manifest)
    return model_spec_for(params.model, params.train, dataset, counts)


def federated_class_counts(manifest: Mapping[str, Any]) -> list[int]:
    """Training samples per class summed over the clients (the partition
    manifest's ``train_class_counts``): what the server may learn of the labels
    for ``train.class_weight: balanced``, a sum over clients."""
    total = np.zeros(len(manifest["classes"]), dtype=np.int64)
    for client in manifest["clients"]:
        total += np.asarray(client["train_class_counts"], dtype=np.int64)
    return [int(v) for v in total]


def strategy_for(params: Params) -> Strategy:
    """The server strategy from ``strategy.name`` and its ``strategy.*`` settings
    (through the one factory, :func:`fedpipe.strategy.make_strategy`)."""
    name = params.strategy.name
    _check_options("strategy.options", params.strategy.options, strategy_class(name))
    settings = {"total_clients": params.federation.clients}
    settings.update(params.strategy.settings())
    try:
        return make_strategy(name, **settings)
    except ParamsError:
        raise
    except (TypeError, ValueError) as exc:
        raise ParamsError(f"params.yaml: {exc}") from None


def private_strategy(
    strategy: Strategy, privacy: Privacy | None, *, seed: int, key: bytes | None
) -> Strategy:
    """``strategy`` wrapped by ``privacy``'s mechanism (itself without privacy);
    ``key`` is the project's secret key (bytes, read by the task layer), None
    only without privacy or with ``privacy.noise_key: params_not_private``.
    Record-level DP (``dpsgd``) leaves the server as it is: the noise is in the
    clients' training; local DP's is in each client's job (:func:`local_training`),
    so its server step gets no key."""
    if privacy is None or privacy.level == "record":
        return strategy
    if privacy.mechanism == "distributed":  # the clients noise: secure_strategy
        return strategy
    server_key = None if privacy.noised_by_clients else key
    return PrivateStrategy(strategy, privacy, seed=seed, key=server_key)


def secure_strategy(
    strategy: Strategy,
    params: Params,
    *,
    key: bytes | None,
    max_weight: int,
    dimension: int,
) -> Strategy:
    """``strategy`` under ``secure_aggregation.*`` (itself when off): the server
    sees only the sum of each round's updates; with ``privacy.mechanism:
    distributed`` the clients noise their share of it. ``key``: the project's
    secret key (the clients' secrets derive from it); ``max_weight``: the
    federation's largest client (training records); ``dimension``: the model's
    coordinates."""
    s = params.secure_aggregation
    if s.name is None:
        return strategy
    if key is None:
        raise ValueError("secure aggregation needs the project's secret key (bytes)")
    privacy = privacy_for(params)
    return SecureAggregation(
        strategy,
        num_shares=s.num_shares,
        threshold=s.reconstruction_threshold,
        clipping_range=s.clipping_range,
        quantization_bits=s.quantization_bits,
        seed=params.seed,
        key=key,
        max_weight=max_weight,
        min_clients=params.federation.min_clients,
        privacy=privacy
        if privacy is not None and privacy.mechanism == "distributed"
        else None,
        dimension=dimension,
    )


def needs_key(params: Params) -> bool:
    """Whether the run needs the project's secret key file: DP on with
    ``privacy.noise_key: secret`` (its noise is keyed), or secure aggregation
    (the clients' secrets derive from it)."""
    if params.secure_aggregation.name is not None:  # the clients' secrets
        return True
    return params.privacy.mechanism is not None and params.privacy.noise_key == "secret"


def round_steps_for(params: Params) -> tuple[RoundStep, ...]:
    """What every round of the run adds to the plain round (``attack.*``,
    ``faults.aggregation_weight_sum``)."""
    privacy = privacy_for(params)
    return round_steps(
        wire=wire_step(params),
        attack=attack_plan_for(params),
        weight_sum_fault=params.faults.aggregation_weight_sum,
        record_privacy=(
            RecordPrivacy(privacy, batch_size=params.train.batch_size)
            if privacy is not None and privacy.level == "record"
            else None
        ),
    )


def wire_step(params: Params) -> WireStep:
    """What crosses the wire (``compression.*``): bytes counted both ways and,
    with a codec, each reply compressed by its client and decoded here."""
    c = params.compression
    try:
        codec = make_codec(c.uplink, bits=c.bits, fraction=c.fraction)
    except ValueError as exc:
        raise ParamsError(f"params.yaml: {exc}") from None
    return WireStep(codec, error_feedback=c.feedback())


def round_steps(
    *,
    wire: WireStep | None = None,
    attack: AttackPlan | None = None,
    weight_sum_fault: float | None = None,
    record_privacy: RecordPrivacy | None = None,
) -> tuple[RoundStep, ...]:
    """The round's steps for the wire, a planted attack, the planted weight-sum
    fault and record-level DP-SGD's books (each left out when None)."""
    steps: list[RoundStep] = []
    if record_privacy is not None:  # first: a client out of budget never trains
        steps.append(record_privacy)
    if wire is not None:  # before the others: they see the decoded replies
        steps.append(wire)
    if attack is not None:
        steps.append(AttackStep(attack))
    if weight_sum_fault is not None:
        steps.append(MisweightedAggregation(weight_sum_fault))
    return tuple(steps)


def personalization_for(params: Params, spec: ModelSpec) -> Personalization:
    """``personalization.*`` resolved against the model's layers (raises
    ParamsError naming the key when they do not fit the model)."""
    p = params.personalization
    groups, norms = _layer_table(spec)
    return resolve(
        p.method,
        groups,
        norms,
        layers=p.layers,
        last_k=p.last_k,
        finetune_epochs=p.finetune_epochs,
        ditto_lambda=p.ditto_lambda,
    )


@functools.lru_cache(maxsize=8)
def _layer_table(spec: ModelSpec) -> tuple[list, list[str]]:
    """The model's weight-bearing layers and its normalization layers, from an
    uncompiled build (no training step is compiled for this)."""
    model = spec.build()
    return layer_groups(model), normalization_layers(model)


def client_algorithm_for(
    params: Params, spec: ModelSpec, strategy: Strategy
) -> ClientAlgorithm:
    """The client algorithm of a run: ``client.algorithm`` (null: the one the
    strategy names) with the strategy's client settings and ``client.options``,
    wrapped by ``personalization.*``."""
    name = params.client.algorithm or strategy.client_algorithm
    key = "client.algorithm" if params.client.algorithm else "strategy.name"
    settings = dict(strategy.client_settings())
    settings.update(params.client.options or {})
    _check_options("client.options", params.client.options, client_class(name, key=key))
    inner = make_client(name, key=key, **settings)
    return personalization_for(params, spec).wrap(inner)


def _check_options(key: str, options: dict | None, cls: type) -> None:
    """Every key of ``options`` must be one of ``cls.settings``."""
    unknown = sorted(set(options or {}) - set(cls.settings))
    if unknown:
        allowed = ", ".join(cls.settings) or "none"
        raise ParamsError(
            f"params.yaml: {key}.{unknown[0]}: not a setting of {cls.__name__}; "
            f"its settings: {allowed}"
        )


def local_training(params: Params, key: bytes | None = None) -> LocalTraining:
    """How each client trains (``train.*``); with ``privacy.mechanism: dpsgd``
    DP-SGD in every fit, with ``local`` the client's reply clipped and noised in
    its job, their randomness keyed by ``key`` (the project's secret key, from
    which each client derives its own; None only with ``privacy.noise_key:
    params_not_private``)."""
    t, p = params.train, params.privacy
    record_dp = local_dp = None
    if p.mechanism == "dpsgd":
        record_dp = RecordDP(p.clip_norm, p.noise_multiplier, key=key)
    if p.mechanism == "local":
        local_dp = LocalDP(p.clip_norm, p.noise_multiplier, key=key)
    return t.into(
        LocalTraining, max_steps=t.local_steps, record_dp=record_dp, local_dp=local_dp
    )


def failure_policy(params: Params) -> FailurePolicy:
    """How rounds treat unreliable clients (``federation.*``)."""
    return params.federation.into(FailurePolicy)


def planted_faults(params: Params) -> PlantedFaults:
    """Clients that fail on purpose (``faults.failing_clients``, ...)."""
    f = params.faults
    return PlantedFaults(
        failing=frozenset(f.failing_clients),
        nonfinite=frozenset(f.nonfinite_clients),
        from_round=f.from_round,
    )


def privacy_for(params: Params) -> Privacy | None:
    """The run's differential privacy (``privacy.*``), None when it has none."""
    f = params.federation
    if params.privacy.mechanism is None:
        return None
    return params.privacy.into(
        Privacy,
        n_clients=f.clients,
        per_round=f.clients_per_round(),
        sampling=f.sampling,
        sampling_rate=f.fraction_fit if f.sampling == "poisson" else None,
    )


def client_sampling(params: Params, key: bytes | None = None) -> ClientSampling:
    """How each round samples its clients (``federation.sampling``); ``key``: the
    project's secret key under DP (the sample is then secret too), else None."""
    f = params.federation
    if f.sampling == "poisson":
        return PoissonSampling(rate=f.fraction_fit, key=key)
    return FixedSampling(key=key)


def client_evaluation(params: Params) -> ClientEvaluation:
    """Which clients each round scores the global model on (``evaluation.*``)."""
    return params.evaluation.into(ClientEvaluation, rounds=params.federation.rounds)


def attack_plan_for(params: Params) -> AttackPlan | None:
    """The run's planted attack from ``attack.*`` (None: ``attack.name`` null).

    Raises
    ------
    ParamsError
        A setting the attack refuses, naming ``attack.<key>``.
    """
    a = params.attack
    if a.name is None:
        return None
    settings = a.model_dump(exclude={"name", "share", "clients", "from_round"})
    try:
        attack = make_attack(a.name, **settings)
    except ValueError as exc:
        raise ParamsError(f"params.yaml: {exc}") from None
    malicious = choose_malicious(
        n_clients=params.federation.clients,
        seed=params.seed,
        share=a.share,
        clients=a.clients,
    )
    return AttackPlan(attack, malicious, from_round=a.from_round, seed=params.seed)


def check_code(params: Params) -> None:
    """Resolve the user's code named in ``params`` before anything runs: the
    strategy and client-algorithm classes (and their options) and the model
    builder. (Whether the builder returns a Keras model is checked by the ``init``
    stage, which knows the data's shape.)

    Raises
    ------
    ParamsError
        Naming the key and what was found.
    """
    strategy = strategy_for(params)
    name = params.client.algorithm or strategy.client_algorithm
    key = "client.algorithm" if params.client.algorithm else "strategy.name"
    _check_options("client.options", params.client.options, client_class(name, key=key))
    if is_reference(params.model.name):
        from fedpipe.core.plugins import load_object

        builder = load_object(params.model.name, key="model.name")
        if not callable(builder):
            raise ParamsError(
                f"params.yaml: model.name={params.model.name!r} is a "
                f"{type(builder).__name__}, not a function returning a keras.Model"
            )


def round_inputs(
    params: Params,
    *,
    round_: int,
    spec: ModelSpec,
    data: FederatedData,
    weights: Weights,
    server_state: State,
    client_states: ClientStates,
    key: bytes | None,
) -> RoundInputs:
    """Round ``round_``'s inputs from ``params`` and the state after the round
    before it: the one place a round is assembled (the round stage reads the
    state from the project's files;
    :func:`fedpipe.federation.loop.run_federation` carries it in memory).
    ``key``: the project's secret key when :func:`needs_key`, else None."""
    strategy = strategy_for(params)
    server = private_strategy(strategy, privacy_for(params), seed=params.seed, key=key)
    return RoundInputs(
        round=round_,
        seed=params.seed,
        spec=spec,
        data=data,
        global_weights=weights,
        server_state=server_state,
        client_states=client_states,
        strategy=secure_strategy(
            server,
            params,
            key=key,
            max_weight=max(len(c.y_train) for c in data.clients),
            dimension=sum(int(np.size(w)) for w in weights),
        ),
        algorithm=client_algorithm_for(params, spec, strategy),
        training=local_training(params, key),
        clients_per_round=params.federation.clients_per_round(),
        evaluation=client_evaluation(params),
        failures=failure_policy(params),
        planted=planted_faults(params),
        steps=round_steps_for(params),
        # keyed (secret) under DP only: amplification by sampling assumes it
        sampling=client_sampling(params, key if params.privacy.mechanism else None),
    )
