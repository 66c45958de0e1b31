"""The client-algorithm contract: what a client does with the model it receives.

The server side of an algorithm is a :class:`~fedpipe.strategy.base.Strategy`; the
client side is a :class:`ClientAlgorithm`. In every round, for each selected
client, the round (:func:`fedpipe.federation.round.run_round`) builds a
:class:`ClientTask` and calls :meth:`ClientAlgorithm.train` with a
:class:`LocalTrainer` bound to that client's data::

    task    = ClientTask(client=3, round=5, global_weights=w, broadcast={...},
                         state={...}, seed=42)
    reply   = algorithm.train(task, trainer)   # -> ClientReply

What a client **receives** (:class:`ClientTask`): the global weights, what the
strategy broadcasts besides them (:meth:`Strategy.broadcast`, e.g. SCAFFOLD's server
control variate ``"c"``), and what this client kept from its previous rounds
(``state``, namespaced by algorithm: ``state["scaffold"]["c_i/003"]``; empty the
first time). What it **may keep** between rounds: named arrays in
:attr:`ClientReply.state` under its own :attr:`ClientAlgorithm.name`; the round stores
them per client (:mod:`fedpipe.federation.clientstate`) and hands them back next
time the client is selected. What it **sends back** (:class:`ClientReply`): its
weights (the full list, laid out like the global weights), ``extras`` for the
strategy (laid out like the weights, e.g. ``"control_delta"``), and optionally the
model to report as its local model.

An algorithm is a small, stateless object built from its settings (the keys in
:attr:`ClientAlgorithm.settings`, keyword-only constructor arguments): everything
carried between rounds goes through ``state``, so a round can be recomputed from
files alone. It must be deterministic given the task (seeds come from
:meth:`ClientTask.seed_for`), must not modify its inputs, and may train as often as
it likes through the trainer (Ditto trains twice), all its fits together
within the round's step budget (``LocalTraining.round_steps``).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

import numpy as np

from fedpipe.core.component import Component
from fedpipe.core.seeds import derive_seed

Weights = list[np.ndarray]
ClientState = Mapping[str, Mapping[str, np.ndarray]]
"""What one client keeps: algorithm name -> array name -> array."""


@dataclass(frozen=True)
class RecordDP:
    """Record-level DP-SGD in every local fit (``privacy.mechanism: dpsgd``).

    Each step takes a Poisson sample of the client's records (each with
    probability ``batch_size / n``), clips every record's gradient to L2 norm
    ``clip_norm`` (over all trainable arrays), sums them, adds Gaussian noise of
    std ``noise_multiplier * clip_norm`` per coordinate and divides by the
    expected batch size (Abadi et al., 2016; TensorFlow Privacy's
    ``DPKerasSGDOptimizer``, Opacus). See docs/privacy.md.

    Attributes
    ----------
    clip_norm : float
        C, the bound on one record's gradient (``privacy.clip_norm``).
    noise_multiplier : float
        sigma (``privacy.noise_multiplier``): noise std over C.
    key : bytes or None
        The project's secret key (``.fedpipe/dp.key``); each client's batches
        and noise are keyed by ``HMAC(key, "fedpipe/dpsgd/client/<id>")``. None
        only with ``privacy.noise_key: params_not_private`` (noise from the seed
        alone: no guarantee). Never printed.
    """

    clip_norm: float
    noise_multiplier: float
    key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class LocalDP:
    """Client-level local DP on the client's own reply (``privacy.mechanism:
    local``): before the reply leaves the client's job, its delta from the
    global weights is clipped to L2 norm ``clip_norm`` (over all layers) and
    Gaussian noise of std ``noise_multiplier * clip_norm`` is added to every
    coordinate (:func:`fedpipe.client.localdp.released`). The server receives
    only the noised weights.

    Attributes
    ----------
    clip_norm : float
        C (``privacy.clip_norm``).
    noise_multiplier : float
        sigma (``privacy.noise_multiplier``).
    key : bytes or None
        The project's secret key (``.fedpipe/dp.key``); the client keys its
        noise by its own key, ``HMAC(key, "fedpipe/local-dp/client/<id>")``,
        derived inside its job (:func:`fedpipe.client.localdp.client_key`). None
        only with ``privacy.noise_key: params_not_private`` (noise from the
        seed alone: no guarantee). Never printed or recorded.
    """

    clip_norm: float
    noise_multiplier: float
    key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class LocalTraining:
    """How each client trains in a round (``train.*``).

    Attributes
    ----------
    epochs : int
        Local epochs per round (``train.epochs``).
    batch_size : int
        Minibatch size (``train.batch_size``).
    lr : float
        Local learning rate (``train.lr``; SCAFFOLD's control update needs it).
    max_steps : int or None
        Stop each fit after this many minibatch steps (``train.local_steps``).
    round_steps : int or None
        The client's step budget for the whole round
        (``federation.round_deadline_steps``, a slow client's share of it): every
        fit of the round together takes at most this many steps, whatever the
        algorithm (Ditto fits twice); None: no budget.
    round_fits : int
        The fits the round's budget is shared among (the algorithm's
        ``fits_per_round``): each fit may take at most its share of what the
        earlier fits left, ``ceil(left / fits left)``, so every fit progresses
        (Ditto's personal fit is not starved by the global one); what a fit
        does not use passes to the next.
    record_dp : RecordDP or None
        Record-level DP-SGD in every fit (``privacy.mechanism: dpsgd``); None:
        plain local training.
    local_dp : LocalDP or None
        Local DP on the client's reply, clipped and noised inside its job
        (``privacy.mechanism: local``); None: the reply is sent as trained.
    """

    epochs: int
    batch_size: int
    lr: float
    max_steps: int | None = None
    round_steps: int | None = None
    round_fits: int = 1
    record_dp: RecordDP | None = None
    local_dp: LocalDP | None = None


@dataclass(frozen=True)
class ClientTask:
    """What a selected client receives in a round.

    Attributes
    ----------
    client : int
        The client's id.
    round : int
        The round (1-based).
    global_weights : list of ndarray
        The global model's weights (read-only).
    broadcast : mapping of str to list of ndarray
        What the strategy sends every client besides the weights
        (:meth:`Strategy.broadcast`), laid out like the weights.
    state : mapping
        What this client kept from earlier rounds, by algorithm name
        (:data:`ClientState`); empty the first time.
    seed : int
        The experiment's seed; use :meth:`seed_for`.
    """

    client: int
    round: int
    global_weights: Weights = field(repr=False)
    broadcast: Mapping[str, Weights] = field(default_factory=dict, repr=False)
    state: ClientState = field(default_factory=dict, repr=False)
    seed: int = 0

    def seed_for(self, purpose: str) -> int:
        """A seed for one use (``"train"``, ``"ditto"``) in this round and client."""
        return derive_seed(self.seed, purpose, self.round, self.client)

    def own(self, name: str) -> Mapping[str, np.ndarray]:
        """The arrays the algorithm ``name`` kept for this client (may be empty)."""
        return self.state.get(name, {})


@dataclass(frozen=True)
class LocalFit:
    """One local training run: the trained weights, steps taken, mean data loss."""

    weights: Weights = field(repr=False)
    steps: int
    loss: float


@dataclass(frozen=True)
class FitRequest:
    """One fit as a trainer runs it (:meth:`LocalTrainer.fit` settled its
    length): its start, seed, epochs, batch size and step cap (None: every
    batch), and the
    terms its algorithm adds to the local objective (:meth:`LocalTrainer.fit`)."""

    weights: Weights = field(repr=False)
    seed: int
    epochs: int
    batch_size: int
    max_steps: int | None
    proximal_mu: float = 0.0
    anchor: Weights | None = field(default=None, repr=False)
    gradient_offset: Weights | None = field(default=None, repr=False)


def fit_length(
    training: LocalTraining, epochs: int | None = None, taken: int = 0, done: int = 0
) -> tuple[int, int | None]:
    """A fit's epochs and step cap (:meth:`LocalTrainer.fit`): ``train.epochs``
    capped at ``train.local_steps``; with ``epochs`` given (fine-tuning), that
    many whole epochs. With a round budget (``training.round_steps``) the cap is
    at most this fit's share of what the client's earlier fits this round
    (``done`` fits, ``taken`` steps) left of it: ``ceil(left / fits left)`` of
    ``training.round_fits``, so all its fits together keep to the budget and
    each gets steps while the budget has one per fit left (0: nothing left)."""
    n_epochs, cap = training.epochs, training.max_steps
    if epochs is not None:
        n_epochs, cap = epochs, None
    if training.round_steps is not None:
        left = max(0, training.round_steps - taken)
        share = -(-left // max(1, training.round_fits - done))
        cap = share if cap is None else min(cap, share)
    return n_epochs, cap


def spent(weights: Sequence[np.ndarray]) -> LocalFit:
    """The fit of a client whose round budget is spent: its start weights
    (copies), 0 steps, no loss."""
    return LocalFit([np.array(w) for w in weights], 0, float("nan"))


@dataclass(frozen=True)
class ClientReply:
    """What a client sends back after its round.

    Attributes
    ----------
    weights : list of ndarray
        The weights sent to the server (full list, laid out like the global ones).
    train_loss : float
        Mean local training loss of the update (health records, the doctor).
    extras : mapping of str to list of ndarray
        Further arrays the strategy reads (``Strategy.required_extras``).
    state : mapping
        New arrays to keep on the client, by algorithm name; a name not listed
        keeps what it had.
    local_model : list of ndarray or None
        The client's locally trained model as reported in ``local`` metrics when it
        is not ``weights`` (FedPer sends only its shared layers).
    steps : int or None
        Local optimizer steps that produced ``weights`` (:attr:`LocalFit.steps`;
        FedNova normalizes by them). None: every step the client took this round
        (what its trainer counted) stands for them.
    """

    weights: Weights = field(repr=False)
    train_loss: float = float("nan")
    extras: Mapping[str, Weights] = field(default_factory=dict, repr=False)
    state: ClientState = field(default_factory=dict, repr=False)
    local_model: Weights | None = field(default=None, repr=False)
    steps: int | None = None


class ClientRows(Protocol):
    """What a trainer holds of one client's data: at least its training labels
    (:class:`fedpipe.data.splits.ClientData` is one; the data layer sits above
    this one, so it is named, not imported)."""

    y_train: np.ndarray


class LocalTrainer(abc.ABC):
    """Local training and evaluation on one client's data, for an algorithm.

    Implemented on a compiled Keras model by
    :class:`fedpipe.model.trainer.KerasTrainer` (in a vectorized cohort,
    :class:`fedpipe.model.cohort.CohortTrainer`); algorithms only call it.
    :meth:`fit` minimizes the local objective
    ``L(w) + mu/2 ||w - anchor||^2 + <offset, w>`` (see
    :meth:`fedpipe.model.training.ModelRunner.fit`) with the optimizer of ``train.*``.
    A trainer serves one client's round: :attr:`steps_taken` counts the steps of
    all its fits (:attr:`fits_done` the fits), and with ``training.round_steps``
    set no fit goes past its share of that budget (:func:`fit_length`; a fit
    with none left returns its start weights, 0 steps).

    :meth:`fit` is the one signature of a fit: it settles the fit's length and
    counts, and hands the rest to :meth:`run_fit`, which a trainer implements.
    """

    training: LocalTraining
    n_train: int
    steps_taken: int = 0
    fits_done: int = 0

    def __init__(self, data: ClientRows, training: LocalTraining) -> None:
        self.data = data
        self.training = training
        self.n_train = len(data.y_train)
        self.steps_taken = 0
        self.fits_done = 0

    @property
    @abc.abstractmethod
    def trainable(self) -> list[int]:
        """Positions of the trainable arrays in the weight list."""

    def fit(
        self,
        weights: Sequence[np.ndarray],
        *,
        seed: int,
        proximal_mu: float = 0.0,
        anchor: Sequence[np.ndarray] | None = None,
        gradient_offset: Sequence[np.ndarray] | None = None,
        epochs: int | None = None,
    ) -> LocalFit:
        """Train from ``weights`` on the client's training split. With
        ``epochs`` given, that many whole epochs (fine-tuning); otherwise
        ``train.epochs`` capped at ``train.local_steps``; either within what is
        left of the round's budget (:func:`fit_length`)."""
        n_epochs, max_steps = fit_length(
            self.training, epochs, self.steps_taken, self.fits_done
        )
        self.fits_done += 1
        if max_steps == 0:
            return spent(weights)
        fit = self.run_fit(
            FitRequest(
                list(weights),
                seed,
                n_epochs,
                self.training.batch_size,
                max_steps,
                proximal_mu,
                None if anchor is None else list(anchor),
                None if gradient_offset is None else list(gradient_offset),
            )
        )
        self.steps_taken += fit.steps
        return fit

    def run_fit(self, request: FitRequest) -> LocalFit:
        """Take the steps of one fit whose length :meth:`fit` settled."""
        raise NotImplementedError(f"{type(self).__name__} trains in its own fit")

    @abc.abstractmethod
    def evaluate(self, weights: Sequence[np.ndarray]) -> dict[str, float]:
        """Metrics of ``weights`` on the client's local test split."""


class ClientAlgorithm(Component, abc.ABC):
    """A client algorithm: one round of local work for one client.

    Subclasses set :attr:`name`, list the settings they read in :attr:`settings`
    (keyword-only constructor arguments and attributes of the same name) and
    implement :meth:`train`. See the module docstring for the contract.

    Attributes
    ----------
    name : str
        Registered name (:data:`fedpipe.core.registry.CLIENT_ALGORITHMS`); also
        the namespace of what it keeps on clients (no ``/`` in it: state keys are
        ``<name>/<array name>``).
    settings : tuple of str
        Its settings (from the strategy's ``client_settings()`` and
        ``client.options``): :class:`~fedpipe.core.component.Setting`
        declarations, or plain names in a user's class.

    Traits (what the rest of fedpipe may assume about the local step)

    proximal_setting : str or None
        The setting (one of :attr:`settings`) that is the weight ``mu`` of a
        proximal term ``mu/2 ||w - anchor||^2`` this algorithm adds to every local
        step (FedProx: ``proximal_mu``); None: no such term. With plain SGD that
        term alone multiplies ``w - anchor`` by ``1 - lr mu`` per step, so local
        training overshoots once ``lr mu > 2``; the doctor names this setting
        beside ``train.lr`` when local training blows up.
    """

    name: ClassVar[str]
    section: ClassVar[str] = "client"
    settings: ClassVar[tuple[str, ...]] = ()
    proximal_setting: ClassVar[str | None] = None

    @classmethod
    def from_settings(cls, **settings: Any) -> Self:
        """Build from settings: the keys in :attr:`settings` (``None`` = default);
        the rest are ignored (:meth:`~fedpipe.core.component.Component.from_params`)."""
        return cls.from_params(**settings)

    @abc.abstractmethod
    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        """One round of local work: receive ``task``, train, reply."""

    # ------------------------------------------------------------ personalization

    @property
    def fits_per_round(self) -> int:
        """How many fits of ``train.*`` length one :meth:`train` runs (Ditto: its
        inner algorithm's and one more). A round's deadline counts a client a
        straggler when these fits together need more steps than its budget
        (:func:`fedpipe.federation.failures.steps_needed`); the trainer holds the
        budget whatever this says."""
        return 1

    @property
    def personalized(self) -> bool:
        """Whether clients get a personalized model (reported per client)."""
        return False

    @property
    def frozen(self) -> tuple[int, ...]:
        """Positions of the global model that never change on the server (layers
        that stay on the clients)."""
        return ()

    def after_aggregation(self, before: Weights, after: Weights) -> Weights:
        """The new global weights as the server keeps them: the :attr:`frozen`
        positions (layers that stay on the clients) hold their values of
        ``before``; ``after`` itself when nothing is frozen."""
        frozen = set(self.frozen)
        if not frozen:
            return after
        return [before[j] if j in frozen else w for j, w in enumerate(after)]

    def personal_model(
        self,
        task: ClientTask,
        trainer: LocalTrainer,
    ) -> Weights | None:
        """The model client ``task.client`` would deploy given the *new* global
        weights (``task.global_weights``) and what it keeps; None when this
        algorithm has no personalized model."""
        return None


def pack(prefix: str, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Arrays as state entries ``prefix/000``, ``prefix/001``, ..."""
    return {f"{prefix}/{j:03d}": np.asarray(a) for j, a in enumerate(arrays)}


def unpack(
    state: Mapping[str, np.ndarray], prefix: str, like: Sequence[np.ndarray]
) -> Weights:
    """``prefix``'s arrays from a state, laid out like ``like`` (zeros where the
    client has none yet, as float32)."""
    return [
        np.asarray(state.get(f"{prefix}/{j:03d}", np.zeros(np.shape(a), np.float32)))
        for j, a in enumerate(like)
    ]
