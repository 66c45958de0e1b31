"""Local training and evaluation with Keras, one compiled model reused throughout.

Building and compiling a Keras model costs far more than a client's epoch on small
data, so a :class:`ModelRunner` builds its model once and swaps weights in and out.
Every fit resets what could leak between clients: weights, optimizer state and the
random state of layers such as dropout, and each compiled step is traced once
with its batch axes open (:class:`OpenBatches`), so a client's result depends
only on the weights it starts from, its data and its seed — not on what ran
before it.
"""

from __future__ import annotations

import math
import os
import random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any, Protocol

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras.src.random import seed_generator as _keras_seeds  # noqa: E402
from tensorflow.python.ops.gen_resource_variable_ops import (  # noqa: E402
    assign_variable_op,
    read_variable_op,
)

from fedpipe.client.base import RecordDP  # noqa: E402
from fedpipe.core.concurrency import side_by_side  # noqa: E402
from fedpipe.core.errors import EXIT_BAD_PARAMS, FedpipeError, SettingError  # noqa: E402
from fedpipe.core.secretkey import derived_key  # noqa: E402
from fedpipe.core.seeds import derive_seed, keyed_rng, rng_for  # noqa: E402
from fedpipe.model.graph import compiled  # noqa: E402
from fedpipe.model.metrics import classification_metrics  # noqa: E402
from fedpipe.model.step import PerRecord, Terms, Update, local_gradient  # noqa: E402
from fedpipe.model.zoo import build_model, loss_for  # noqa: E402

if TYPE_CHECKING:
    from fedpipe.config.params import ModelParams, TrainParams
    from fedpipe.data.sources import DatasetSpec

_determinism_enabled = False

PREDICT_BATCH = 256
"""Most rows per batch of :meth:`ModelRunner.predict` (evaluation only; training
takes ``train.batch_size``). With one core per op, 256 rows of digits through
``small_cnn`` took 0.70x the time of 1024 (1,800 rows: 250 against 358 ms), and
more batches share out over :attr:`ModelRunner.helpers`."""

PREDICT_BYTES = 16 * 2**20
"""Float32 input bytes per prediction batch at most: large inputs take smaller
batches (100x100 RGB: 139 rows), since a convolution's activations are a multiple
of its input (1024 such images through ``seed_cnn`` peak at about 2.6 GB)."""


PREDICT_SMALL_BYTES = 2 * 2**20
"""Float32 input bytes per prediction batch at least, for small rows (at most
:data:`PREDICT_SMALL_ROW` bytes): a table's rows take bigger batches than
:data:`PREDICT_BATCH` (32 features: 16,384 rows). The held-out set grows with the
table, and one TensorFlow call per 256 rows made scoring it most of what a round
of 1,000 small clients costs over one of 100 (bench_scale 1,000x10: 8,000
held-out rows, 32 calls, 40 ms a round against 9 ms at 100x10; 8,000 rows through
a 32-64-10 MLP: 19.7 ms in 256-row batches, 5.0 ms in 4,096-row ones, 1.8-2.2 ms
in one, the same bits: tests/test_round_scale.py). Larger rows (images: 784 floats
for the digits) keep :data:`PREDICT_BATCH`; no batch takes more than
:data:`PREDICT_MOST_ROWS` (a wide hidden layer's activations)."""

PREDICT_SMALL_ROW = 1024

PREDICT_MOST_ROWS = 16384


def predict_batch(input_shape: Sequence[int]) -> int:
    """Rows per prediction batch for samples of ``input_shape``."""
    per_row = max(4 * int(np.prod(input_shape)), 1)
    rows = PREDICT_BATCH
    if per_row <= PREDICT_SMALL_ROW:
        rows = max(rows, min(PREDICT_MOST_ROWS, PREDICT_SMALL_BYTES // per_row))
    return int(min(rows, max(32, PREDICT_BYTES // per_row)))


class Rows(Protocol):
    """Features that slice like an array: ``len(x)`` and ``x[a:b]`` (a float32
    array of those rows). A numpy array is one; so is a lazy
    :class:`fedpipe.data.splits.Features` view."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: slice, /) -> np.ndarray: ...


def training_device() -> str:
    """Where Keras places this process's training, for logs: ``CPU``, ``GPU:0``,
    or ``GPU:0 (of 4 visible)`` (Keras trains on the first visible GPU)."""
    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        return "CPU"
    first = gpus[0].name.removeprefix("/device:")
    return first if len(gpus) == 1 else f"{first} (of {len(gpus)} visible)"


def enable_determinism() -> None:
    """Make TensorFlow ops deterministic (same inputs, same bits)."""
    global _determinism_enabled
    if not _determinism_enabled:
        tf.config.experimental.enable_op_determinism()
        _determinism_enabled = True


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to build and compile the model a runner trains.

    Attributes
    ----------
    name : str
        ``model.name``.
    input_shape : tuple of int
        Shape of one sample.
    n_classes : int
        Number of classes (2 means one sigmoid output).
    optimizer : str
        ``train.optimizer``: ``sgd`` or ``adam``.
    lr : float
        ``train.lr``.
    class_weights : tuple of float, optional
        Each class's weight in the training loss (``train.class_weight``,
        :func:`balanced_class_weights`); None: every sample weighs 1.
    """

    name: str
    input_shape: tuple[int, ...]
    n_classes: int
    optimizer: str
    lr: float
    settings: tuple[tuple[str, Any], ...] = ()
    class_weights: tuple[float, ...] | None = None

    def build(self) -> keras.Model:
        """The uncompiled model (``model.name`` with its ``model.*`` dials)."""
        return build_model(
            self.name, self.input_shape, self.n_classes, **dict(self.settings)
        )


def balanced_class_weights(counts: Sequence[int]) -> tuple[float, ...]:
    """scikit-learn's ``class_weight="balanced"``: ``n / (C * n_c)`` for each class
    c with ``n_c`` training samples, ``n`` samples in all and ``C`` classes present
    (a class with no samples gets 1.0: it has no loss to weigh)."""
    n = np.asarray(counts, dtype=np.float64)
    present = n > 0
    if not present.any():
        return tuple(1.0 for _ in n)
    scale = n.sum() / present.sum()
    return tuple(float(scale / c) if c > 0 else 1.0 for c in n)


def model_spec_for(
    model: ModelParams,
    train: TrainParams,
    dataset: DatasetSpec,
    class_counts: Sequence[int] | None = None,
) -> ModelSpec:
    """The model an experiment trains: ``model.*`` and ``train.*`` on data
    described by ``dataset``. ``class_counts`` (training samples per class, summed
    over the clients) gives the loss its class weights under ``train.class_weight:
    balanced``; a spec that only builds the model (scoring) needs none.

    Raises
    ------
    ValueError
        ``class_counts`` whose length is not the number of classes.
    """
    weights = None
    if train.class_weight == "balanced" and class_counts is not None:
        if len(class_counts) != len(dataset.classes):
            raise SettingError(
                f"train.class_weight: {len(class_counts)} class counts for "
                f"{len(dataset.classes)} classes"
            )
        weights = balanced_class_weights(class_counts)
    return ModelSpec(
        name=model.name,
        input_shape=tuple(dataset.input_shape),
        n_classes=len(dataset.classes),
        optimizer=train.optimizer,
        lr=train.lr,
        settings=tuple(sorted((k, _hashable(v)) for k, v in model.settings().items())),
        class_weights=weights,
    )


def _hashable(value: Any) -> Any:
    """A setting as a hashable value (lists -> tuples), so specs can be keys."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


class _ThreadRandom:
    """Python's ``random`` module, except in a thread that set a generator of
    its own (:func:`_default_seeds_from`)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(getattr(self.local, "rng", None) or random, name)


_thread_random = _ThreadRandom()
_keras_seeds.python_random = _thread_random


@contextmanager
def _default_seeds_from(seed: int) -> Iterator[None]:
    """Keras layers built inside, in this thread, draw their default seeds from
    a generator of their own, seeded with ``seed``.

    A Keras initializer or dropout layer made without a seed draws one from
    Python's process-wide ``random`` when it is constructed. Seeding that
    (``keras.utils.set_random_seed``) is not enough in a process where other
    threads also draw from it (Prefect draws its retry and backoff jitter from
    it), and a model's layers are constructed between TensorFlow ops that
    release the GIL, so the initial weights could depend on the timing of
    those threads (CI once saw ``fedpipe run`` and ``dvc repro`` of the same
    params start from other round-0 weights). Keras has no public hook for the
    generator it draws from, so this module gives the one Keras' seed module
    uses (its only use of Python's ``random`` when building models; Keras is
    pinned by constraints.txt and a test fails if that changes) a per-thread
    override; every other thread still draws from ``random`` itself.
    """
    _thread_random.local.rng = random.Random(seed)
    try:
        yield
    finally:
        _thread_random.local.rng = None


def initial_weights(spec: ModelSpec, seed: int) -> list[np.ndarray]:
    """The global model before round 1, from ``seed`` alone, whatever else
    runs in the process."""
    init_seed = derive_seed(seed, "init")
    keras.utils.set_random_seed(init_seed)
    with _default_seeds_from(init_seed):
        model = spec.build()
    return [np.array(w) for w in model.get_weights()]


def count_params(spec: ModelSpec) -> int:
    """Number of parameters of the model."""
    return int(spec.build().count_params())


def batch_indices(
    n: int, *, epochs: int, batch_size: int, seed: int, max_steps: int | None = None
) -> list[np.ndarray]:
    """The sample indices of each local step of a fit, in order.

    Each epoch draws a permutation of the ``n`` samples from a generator seeded
    with ``seed`` and cuts it into batches of ``batch_size`` (the last may be
    smaller); training stops after ``max_steps`` steps (None: every batch of
    every epoch). The one batching of local training: :meth:`ModelRunner.fit`
    steps through it, and a vectorized cohort lays every client's out side by
    side (:mod:`fedpipe.model.cohort`).
    """
    rng = np.random.default_rng(seed)
    plan: list[np.ndarray] = []
    for _ in range(epochs):
        if max_steps is not None and len(plan) >= max_steps:
            break
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            if max_steps is not None and len(plan) >= max_steps:
                break
            plan.append(order[start : start + batch_size])
    return plan


def poisson_batches(
    n: int,
    *,
    epochs: int,
    batch_size: int,
    rng: np.random.Generator,
    max_steps: int | None = None,
) -> list[np.ndarray]:
    """The records of each step of a DP-SGD fit: every one of the ``n`` records
    joins a step independently with probability q = ``batch_size / n`` (at most
    1), so a batch's size varies around ``batch_size`` and may be 0. As many
    steps as :func:`batch_indices` takes (``epochs`` x ``ceil(n / batch_size)``,
    capped at ``max_steps``): the sampling the accountant assumes
    (``PoissonSampledDpEvent(q, Gaussian)`` per step)."""
    steps = epochs * math.ceil(n / batch_size)
    if max_steps is not None:
        steps = min(steps, max_steps)
    q = sampling_rate(n, batch_size)
    return [np.flatnonzero(rng.random(n) < q) for _ in range(steps)]


def sampling_rate(n: int, batch_size: int) -> float:
    """q of a client's DP-SGD steps: ``batch_size / n``, at most 1."""
    return min(1.0, batch_size / n)


#: the label of a client's DP-SGD key (:func:`dpsgd_rngs`)
DPSGD_KEY_LABEL = "fedpipe/dpsgd/client"


def dpsgd_rngs(
    dp: RecordDP, client: int, seed: int
) -> tuple[np.random.Generator, np.random.Generator]:
    """The generators of one DP-SGD fit of ``client`` (``seed``: the fit's seed,
    derived from the run's seed, the round, the client and the fit's purpose):
    its Poisson batches and its noise. Keyed by the client's own key,
    ``HMAC-SHA256(project key, "fedpipe/dpsgd/client/<id>")``, so they cannot be
    regenerated from ``params.yaml``; with ``dp.key`` None (``privacy.noise_key:
    params_not_private``, no guarantee) from the seed alone."""
    if dp.key is None:
        return (
            rng_for(seed, "dpsgd_sample", client),
            rng_for(seed, "dpsgd_noise", client),
        )
    key = derived_key(dp.key, DPSGD_KEY_LABEL, client)
    return (
        keyed_rng(key, seed, "dpsgd_sample", client),
        keyed_rng(key, seed, "dpsgd_noise", client),
    )


class OpenBatches:
    """``fn`` compiled once for every batch size: the batch axes of its
    arguments are left open in the trace.

    ``tf.function(reduce_retracing=True)`` traces the first call for its exact
    shapes and only a later, differently shaped call for open ones, so a
    client's step ran one graph or the other depending on which client its
    compiled model had trained before. The two graphs give other bits on a
    convolution's gradients (last bits of the kernels), so with clients side by
    side (``runtime.threads``) a run's bits depended on which thread took which
    client: the pairwise matrix's FedBN rows on images gave other bits on a
    second run. Here the first call of each dtype and row shape already traces
    with the batch axes open, and every later call of that kind runs the same
    graph (:meth:`tf.types.experimental.GenericFunction.get_concrete_function`).

    ``batched``: positions of the arguments whose first axis is the batch's;
    ``open``: positions of the arguments with every axis open (a stack of
    batches' rows). Other arguments (a list of noise arrays, a scalar) keep
    their shapes.
    """

    def __init__(
        self, fn: Any, *, batched: Sequence[int], open: Sequence[int] = ()
    ) -> None:
        self.python_function = fn
        self._function = compiled(fn)
        self._batched, self._open = frozenset(batched), frozenset(open)
        self._traces: dict[Any, Any] = {}

    def _spec(self, position: int, value: Any) -> Any:
        def spec(tensor: Any) -> tf.TensorSpec:
            shape = tensor.shape
            if position in self._open:
                return tf.TensorSpec([None] * len(shape), tensor.dtype)
            if position in self._batched:
                return tf.TensorSpec([None, *shape[1:]], tensor.dtype)
            return tf.TensorSpec(shape, tensor.dtype)

        return tf.nest.map_structure(spec, value)

    def __call__(self, *args: Any) -> Any:
        specs = tuple(self._spec(i, a) for i, a in enumerate(args))
        key = tuple(tf.nest.flatten(specs))
        if key not in self._traces:
            self._traces[key] = self._function.get_concrete_function(*specs)
        return self._traces[key](*args)


class ModelRunner:
    """A Keras model with compiled train and predict steps, for any weights.

    Training runs a ``tf.function`` minibatch step over batches this class cuts
    itself (seeded order), rather than ``model.fit``, whose per-call setup costs
    more than a small client's epoch; the math per batch is the same.

    :attr:`helpers`: other runners of the same spec (``runtime.threads``) that
    :meth:`predict_splits` shares its batches with, one thread each, those of
    them that are free (:attr:`lock` not held: a runner training a client in
    another thread is not); the batches are the same whoever runs them, so the
    bits are too.
    """

    helpers: Sequence[ModelRunner] = ()

    def __init__(self, spec: ModelSpec) -> None:
        enable_determinism()
        self.lock = threading.Lock()  # held by a thread that trains on it
        self.spec = spec
        self.model = spec.build()
        optimizer = (
            keras.optimizers.SGD(learning_rate=spec.lr)
            if spec.optimizer == "sgd"
            else keras.optimizers.Adam(learning_rate=spec.lr)
        )
        self._loss = loss_for(spec.n_classes, per_sample=True)
        self._train_loss = loss_for(spec.n_classes)
        self._class_weights = (
            None
            if spec.class_weights is None
            else tf.constant(spec.class_weights, tf.float32)
        )
        self.optimizer = optimizer
        # compiled so that model.evaluate/fit work on it too (tests compare with them)
        self.model.compile(optimizer=optimizer, loss=self._train_loss)
        optimizer.build(self.model.trainable_variables)
        self._seed_generators = [
            sg
            for layer in self.model._flatten_layers()
            for sg in layer._seed_generators
        ]
        self._predict = OpenBatches(self._predict_step, batched=(0, 1))
        self._anchor = [
            tf.Variable(v, trainable=False) for v in self.model.trainable_variables
        ]
        self._offset = [
            tf.Variable(tf.zeros_like(v), trainable=False)
            for v in self.model.trainable_variables
        ]
        self.update = Update.of(optimizer)  # the step Keras' optimizer takes
        self._count = tf.Variable(0.0, trainable=False)  # steps since the reset
        self._state = [
            [
                tf.Variable(tf.zeros_like(v), trainable=False)
                for v in self.model.trainable_variables
            ]
            for _ in range(self.update.slots)
        ]
        self._steps: dict[tuple, Any] = {}
        self.last_steps = 0
        self.last_train_loss = float("nan")

    def load(self, weights: Sequence[np.ndarray]) -> None:
        """Put ``weights`` (laid out as ``model.get_weights()``) into the model.

        What ``model.set_weights`` does, the same bits (each array cast to its
        variable's dtype, then assigned), with TensorFlow's assign op called
        directly: a small client's round loads weights three times (its fit,
        its local score, the global model's), and Keras' and TensorFlow's
        wrapping of each assignment cost 3 times the op (an MLP's four arrays:
        2.1 against 0.5 ms on 2 busy cores).

        Raises
        ------
        ValueError
            A count or a shape that does not fit the model, naming the variable.
        """
        _assign(self.model.weights, weights, what="model")

    @property
    def iterations(self) -> int:
        """Optimizer steps the last fit took (:attr:`update`'s step count)."""
        return int(self._count.numpy())

    def _reset(self, weights: list[np.ndarray], seed: int) -> None:
        self.load(weights)
        self._count.assign(0.0)
        for slot in self._state:
            for v in slot:
                v.assign(tf.zeros_like(v))
        for i, sg in enumerate(self._seed_generators):
            sg.state.assign(np.array([seed + i, 0], dtype=sg.state.dtype))

    def fit(
        self,
        weights: list[np.ndarray],
        x: np.ndarray,
        y: np.ndarray,
        *,
        epochs: int,
        batch_size: int,
        seed: int,
        proximal_mu: float = 0.0,
        anchor: Sequence[np.ndarray] | None = None,
        gradient_offset: Sequence[np.ndarray] | None = None,
        max_steps: int | None = None,
        dp: RecordDP | None = None,
        client: int = 0,
    ) -> list[np.ndarray]:
        """Train from ``weights`` on (x, y) and return the trained weights.

        Samples are shuffled each epoch by a generator seeded with ``seed``; the
        layers' random state is reset from ``seed`` too. Every minibatch takes one
        step of the optimizer on the local objective

        .. math:: L(w) + \\frac{\\mu}{2} \\|w - a\\|^2 + \\langle o, w \\rangle

        on the trainable variables: ``proximal_mu`` > 0 adds the proximal term
        (FedProx, Li et al., 2020; Ditto; FedDyn), pulling towards ``anchor`` (a
        full weight list laid out like ``weights``; default ``weights`` itself);
        ``gradient_offset`` (a full weight list; entries of non-trainable layers are
        ignored) is added to every gradient, the gradient of the linear term
        (SCAFFOLD's ``c - c_i``, Karimireddy et al., 2020; FedDyn's ``-grad_k``).
        Both may be given: the two terms add. With neither, plain local SGD.
        ``max_steps`` stops training after that many minibatch steps
        (``train.local_steps``); None runs every batch of every epoch. The number
        of local steps taken is left in :attr:`last_steps`, their mean data loss
        (without the added terms) in :attr:`last_train_loss`.

        With ``dp`` (``privacy.mechanism: dpsgd``) every step is a DP-SGD step
        (:meth:`private_gradients`) on a Poisson sample of the records
        (:func:`poisson_batches`), batches and noise keyed for ``client``
        (:func:`dpsgd_rngs`); the added terms are data-independent and join the
        noised gradient after it.
        """
        self._reset(weights, seed)
        trainable = self.trainable_indices()
        prox = proximal_mu > 0
        offset = gradient_offset is not None
        if prox:
            targets = (
                self.model.trainable_variables
                if anchor is None
                else [anchor[j] for j in trainable]
            )
            for slot, value in zip(self._anchor, targets, strict=True):
                slot.assign(value)
        if gradient_offset is not None:
            values = [np.asarray(gradient_offset[j], np.float32) for j in trainable]
            for slot, value in zip(self._offset, values, strict=True):
                slot.assign(value)
        extra = (tf.constant(proximal_mu, dtype=tf.float32),) if prox else ()
        if dp is not None:
            return self._private_fit(
                x, y, dp, client, epochs=epochs, batch_size=batch_size, seed=seed,
                max_steps=max_steps, prox=prox, offset=offset, extra=extra,
            )  # fmt: skip
        plan = batch_indices(
            len(x), epochs=epochs, batch_size=batch_size, seed=seed, max_steps=max_steps
        )
        losses = self._run_plan(x, y, plan, prox=prox, offset=offset, extra=extra)
        self.last_steps = len(losses)
        self.last_train_loss = (
            float(np.mean([float(v) for v in losses])) if losses else float("nan")
        )
        return self.weights()

    def weights(self) -> list[np.ndarray]:
        """The model's weights, as ``model.get_weights()`` gives them (the same
        bits, each array a copy), read with TensorFlow's read op called
        directly (an MLP's four arrays: 0.6 against 1.7 ms)."""
        return _read(self.model.weights)

    def _run_plan(
        self,
        x: np.ndarray,
        y: np.ndarray,
        plan: Sequence[np.ndarray],
        *,
        prox: bool,
        offset: bool,
        extra: tuple[tf.Tensor, ...],
    ) -> list[float]:
        """Take one step per batch of ``plan`` (rows of x, y), in order; each
        step's data loss.

        Consecutive batches of one size (an epoch's full batches) run in one
        call of a compiled loop (:meth:`_loop`) over the client's rows, the
        rest (an epoch's last, smaller batch) one call each of the step itself:
        the same step on the same rows in the same order, the same bits
        (``tests/test_training.py``), without a Python round trip per batch
        (about a fifth of a small client's fit).

        Both added terms at once (FedDyn) keep one call per step: inside a
        loop, TensorFlow's graph optimizer sums that objective's three gradient
        parts in another order (other bits, measured), and a run's bits do not
        change with fedpipe's version.
        """
        step = self._step(prox=prox, offset=offset)
        target = self._target(y)
        runs = (
            [list(run) for _, run in groupby(plan, key=len)]
            if not (prox and offset)
            else [[rows] for rows in plan]
        )
        losses: list[float] = []
        xs: tf.Tensor | None = None
        for run in runs:
            if len(run) == 1:
                rows = run[0]
                loss = step(tf.constant(x[rows]), tf.constant(target[rows]), *extra)
                losses.append(float(loss))
                continue
            if xs is None:  # the client's rows, once; each batch gathered
                xs, ys = tf.constant(x), tf.constant(target)
            batches = tf.constant(np.stack(run).astype(np.int32))
            looped = self._loop(prox=prox, offset=offset)
            losses.extend(float(v) for v in looped(xs, ys, batches, *extra).numpy())
        return losses

    def _loop(self, *, prox: bool, offset: bool) -> Any:
        """The compiled loop of :meth:`_step` over a stack of equal batches
        (``batches[i]``: the rows of step i); the steps' losses."""
        key = ("loop", prox, offset)
        if key not in self._steps:
            step = self._step(prox=prox, offset=offset).python_function

            def loop(
                x: tf.Tensor, y: tf.Tensor, batches: tf.Tensor, *mu: tf.Tensor
            ) -> tf.Tensor:
                n = tf.shape(batches)[0]

                def body(i: tf.Tensor, losses: tf.TensorArray) -> tuple:
                    rows = batches[i]
                    loss = step(tf.gather(x, rows), tf.gather(y, rows), *mu)
                    return i + 1, losses.write(i, tf.cast(loss, tf.float32))

                _, losses = tf.while_loop(
                    lambda i, _: i < n,
                    body,
                    (tf.constant(0), tf.TensorArray(tf.float32, size=n)),
                )
                return losses.stack()

            self._steps[key] = OpenBatches(loop, batched=(0, 1), open=(2,))
        return self._steps[key]

    def _private_fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        dp: RecordDP,
        client: int,
        *,
        epochs: int,
        batch_size: int,
        seed: int,
        max_steps: int | None,
        prox: bool,
        offset: bool,
        extra: tuple[tf.Tensor, ...],
    ) -> list[np.ndarray]:
        """:meth:`fit`'s DP-SGD steps (the model already holds ``weights``)."""
        refuse_batch_statistics(self.model)
        sample_rng, noise_rng = dpsgd_rngs(dp, client, seed)
        plan = poisson_batches(
            len(x), epochs=epochs, batch_size=batch_size, rng=sample_rng,
            max_steps=max_steps,
        )  # fmt: skip
        expected = tf.constant(sampling_rate(len(x), batch_size) * len(x), tf.float32)
        clip = tf.constant(dp.clip_norm, tf.float32)
        std = dp.noise_multiplier * dp.clip_norm
        step = self._dp_step(prox=prox, offset=offset)
        losses = []
        for rows in plan:
            noise = self.noise(noise_rng, std)
            loss = step(
                tf.constant(x[rows]), tf.constant(self._target(y[rows])),
                noise, expected, clip, *extra,
            )  # fmt: skip
            if len(rows):
                losses.append(float(loss))
        self.last_steps = len(plan)
        self.last_train_loss = float(np.mean(losses)) if losses else float("nan")
        return self.weights()

    def noise(self, rng: np.random.Generator, std: float) -> list[tf.Tensor]:
        """One step's Gaussian noise, ``N(0, std^2)`` per coordinate of every
        trainable array (float64 draws, as float32)."""
        return [
            tf.constant((std * rng.standard_normal(tuple(v.shape))).astype(np.float32))
            for v in self.model.trainable_variables
        ]

    def private_gradients(
        self,
        x: tf.Tensor,
        y: tf.Tensor,
        noise: Sequence[tf.Tensor],
        expected: tf.Tensor,
        clip: tf.Tensor,
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """DP-SGD's gradient of one batch (:class:`fedpipe.model.step.PerRecord`),
        and the batch's mean data loss."""
        return PerRecord(noise, expected, clip).gradient(
            self._record_loss, x, y, self.model.trainable_variables
        )

    def _record_loss(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """The data loss of ``(x, y)`` at the model's weights (DP-SGD's)."""
        return self.data_loss(y, self.model(x, training=True))

    def _batch_loss(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """The data loss of ``(x, y)`` and the model's own losses."""
        loss = self.data_loss(y, self.model(x, training=True))
        if self.model.losses:
            loss = loss + tf.add_n(self.model.losses)
        return loss

    def _terms(self, *, prox: bool, offset: bool, mu: Sequence[tf.Tensor]) -> Terms:
        """The added terms of the fit in progress (:meth:`fit` set them)."""
        return Terms(
            mu=mu[0] if prox else None,
            anchor=self._anchor if prox else None,
            offset=self._offset if offset else None,
        )

    def _apply(self, grads: Sequence[tf.Tensor]) -> None:
        """One step of :attr:`update` on the model's trainable variables."""
        variables = self.model.trainable_variables
        self._count.assign_add(1.0)
        step = self._count.read_value()
        new, state = self.update(
            [v.value for v in variables],
            grads,
            [[v.read_value() for v in slot] for slot in self._state],
            [step] * len(variables),
        )
        for v, value in zip(variables, new, strict=True):
            v.assign(value)
        for slot, values in zip(self._state, state, strict=True):
            for v, value in zip(slot, values, strict=True):
                v.assign(value)

    def _dp_step(self, *, prox: bool, offset: bool) -> Any:
        """The compiled DP-SGD step (:func:`fedpipe.model.step.local_gradient`
        with :class:`~fedpipe.model.step.PerRecord`, then :meth:`_apply`) for
        this combination of added terms."""
        key = ("dp", prox, offset)
        if key not in self._steps:

            def step(
                x: tf.Tensor,
                y: tf.Tensor,
                noise: list[tf.Tensor],
                expected: tf.Tensor,
                clip: tf.Tensor,
                *mu: tf.Tensor,
            ) -> tf.Tensor:
                grads, loss = local_gradient(
                    self._record_loss,
                    x,
                    y,
                    self.model.trainable_variables,
                    self._terms(prox=prox, offset=offset, mu=mu),
                    PerRecord(noise, expected, clip),
                )
                self._apply(grads)
                return loss

            self._steps[key] = OpenBatches(step, batched=(0, 1))
        return self._steps[key]

    def label_weights(self, y: tf.Tensor) -> tf.Tensor | None:
        """Each sample's loss weight, its class's (``train.class_weight``); None
        when every sample weighs 1."""
        if self._class_weights is None:
            return None
        return tf.gather(self._class_weights, tf.reshape(tf.cast(y, tf.int32), [-1]))

    def data_loss(self, y: tf.Tensor, probs: tf.Tensor) -> tf.Tensor:
        """The batch's training loss: the mean of the samples' losses, each
        weighted by its class (Keras' ``sample_weight``: the weighted sum over
        the batch size) under ``train.class_weight``. The one place every local
        step (plain, looped, DP-SGD, and the cohort's) takes its data loss from."""
        weights = self.label_weights(y)
        if weights is None:
            return self._train_loss(y, probs)
        return self._train_loss(y, probs, sample_weight=weights)

    def trainable_indices(self) -> list[int]:
        """Positions of the trainable variables in ``model.get_weights()``."""
        ids = {id(v) for v in self.model.trainable_variables}
        return [i for i, v in enumerate(self.model.weights) if id(v) in ids]

    def _target(self, y: np.ndarray) -> np.ndarray:
        """Labels shaped for the loss: a column for one sigmoid output."""
        return y.reshape(-1, 1) if self.spec.n_classes == 2 else y

    def _step(self, *, prox: bool, offset: bool) -> Any:
        """The compiled minibatch step for this combination of added terms:
        :func:`fedpipe.model.step.local_gradient`, then :meth:`_apply`.

        Each combination is traced once and kept. With neither term it is
        exactly what ``model.fit`` does per batch, without its per-call setup
        (about 0.1 s, more than a small client's whole epoch).
        """
        key = (prox, offset)
        if key not in self._steps:

            def step(x: tf.Tensor, y: tf.Tensor, *mu: tf.Tensor) -> tf.Tensor:
                grads, loss = local_gradient(
                    self._batch_loss,
                    x,
                    y,
                    self.model.trainable_variables,
                    self._terms(prox=prox, offset=offset, mu=mu),
                )
                self._apply(grads)
                return loss

            self._steps[key] = OpenBatches(step, batched=(0, 1))
        return self._steps[key]

    def _predict_step(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        probs = self.model(x, training=False)
        return probs, self._loss(y, probs)

    def predict(
        self,
        weights: list[np.ndarray],
        x: Rows,
        y: np.ndarray,
        batch_size: int | None = None,
        *,
        loaded: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Probabilities and per-sample losses of ``weights`` on (x, y).

        ``x`` is an array or anything that slices like one (``len(x)``,
        ``x[a:b]``), such as a :class:`fedpipe.data.splits.Features` view: one batch
        of rows is read at a time. ``loaded``: as in :meth:`predict_splits`.
        """
        return self.predict_splits(
            weights, [(x, y)], batch_size=batch_size, loaded=loaded
        )[0]

    def predict_splits(
        self,
        weights: list[np.ndarray],
        splits: Sequence[tuple[Rows, np.ndarray]],
        batch_size: int | None = None,
        *,
        loaded: bool = False,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`predict` on several data sets with one pass over all of them.

        The batches run over the splits laid end to end (a batch may take the
        last rows of one split and the first of the next), exactly as over their
        concatenation, but each batch's rows are read from the splits when it
        runs: memory holds one batch of features, not every split's.

        ``loaded``: the model already holds ``weights``, to the bit (the caller
        knows: a client's local model right after its fit), so this runner does
        not load them again; helpers still do.
        """
        if not splits:
            return []
        if batch_size is None:
            batch_size = predict_batch(self.spec.input_shape)
        sizes = [len(ys) for _, ys in splits]
        y = np.concatenate([ys for _, ys in splits])
        bounds = [
            (start, min(len(y), start + batch_size))
            for start in range(0, len(y), batch_size)
        ]
        free = [h for h in self.helpers[: len(bounds) - 1] if h.lock.acquire(False)]
        runners = [self, *free]
        probs: list[Any] = [None] * len(bounds)
        losses: list[Any] = [None] * len(bounds)

        def run(k: int) -> None:
            runner = runners[k]
            if k or not loaded:
                runner.load(weights)
            for i in range(k, len(bounds), len(runners)):
                start, stop = bounds[i]
                p, loss = runner._predict(
                    tf.constant(_rows_between(splits, sizes, start, stop)),
                    tf.constant(self._target(y[start:stop])),
                )
                probs[i], losses[i] = p.numpy(), loss.numpy().reshape(-1)

        try:
            side_by_side(run, len(runners), name="fedpipe-predict")
        finally:
            for h in free:
                h.lock.release()
        if probs:
            all_probs, all_losses = np.concatenate(probs), np.concatenate(losses)
        else:
            all_probs, all_losses = (
                np.zeros((0, 1), np.float32),
                np.zeros(0, np.float32),
            )
        out, start = [], 0
        for size in sizes:
            stop = start + size
            out.append((all_probs[start:stop], all_losses[start:stop]))
            start = stop
        return out

    def evaluate_splits(
        self,
        weights: list[np.ndarray],
        splits: Sequence[tuple[Rows, np.ndarray]],
    ) -> list[dict[str, float]]:
        """:meth:`evaluate` on several data sets with one pass over all of them."""
        predicted = self.predict_splits(weights, splits)
        return [
            classification_metrics(ys, probs, losses)
            for (_, ys), (probs, losses) in zip(splits, predicted, strict=True)
        ]

    def evaluate(
        self, weights: list[np.ndarray], x: Rows, y: np.ndarray, *, loaded: bool = False
    ) -> dict[str, float]:
        """Loss, accuracy, precision, recall and AUC of ``weights`` on (x, y)
        (``loaded``: as in :meth:`predict_splits`)."""
        probs, losses = self.predict(weights, x, y, loaded=loaded)
        return classification_metrics(y, probs, losses)


class BatchStatisticsRefused(FedpipeError, ValueError):
    """DP-SGD on a model whose layers mix records in a batch (a setting to change:
    the model or ``privacy.mechanism``)."""

    exit_code = EXIT_BAD_PARAMS


def refuse_batch_statistics(model: keras.Model) -> None:
    """DP-SGD clips each record's gradient, which a layer computing statistics
    over the batch (BatchNormalization) breaks: one record moves the others'
    gradients and the moving statistics, unclipped and unnoised.

    Raises
    ------
    BatchStatisticsRefused
        Naming the layer and what would be accepted.
    """
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            raise BatchStatisticsRefused(
                f"privacy.mechanism=dpsgd does not fit model layer {layer.name!r} "
                "(BatchNormalization mixes the records of a batch, so a record's "
                "gradient cannot be clipped alone); use a model without it "
                "(model.batch_norm: false)"
            )


def _assign(
    variables: Sequence[Any], values: Sequence[np.ndarray], *, what: str
) -> None:
    """Each Keras variable's backing ``tf.Variable`` assigned its value, cast to
    the variable's dtype."""
    if len(values) != len(variables):
        raise ValueError(
            f"{len(values)} weight arrays for a {what} of {len(variables)} variables"
        )
    for var, value in zip(variables, values, strict=True):
        array = np.asarray(value, dtype=var.dtype)
        if array.shape != tuple(var.shape):
            raise ValueError(
                f"weight {var.path}: shape {array.shape}, the {what}'s is "
                f"{tuple(var.shape)}"
            )
        assign_variable_op(var.value.handle, array)


def _read(variables: Sequence[Any]) -> list[np.ndarray]:
    """A copy of each Keras variable's value (its backing ``tf.Variable``'s)."""
    out = []
    for var in variables:
        value = var.value
        out.append(np.array(read_variable_op(value.handle, value.dtype)))
    return out


def _rows_between(
    splits: Sequence[tuple[Rows, np.ndarray]],
    sizes: Sequence[int],
    start: int,
    stop: int,
) -> np.ndarray:
    """Rows ``start:stop`` of the splits' features laid end to end, read from
    only the splits that hold them."""
    pieces, offset = [], 0
    for (xs, _), size in zip(splits, sizes, strict=True):
        lo, hi = max(start, offset), min(stop, offset + size)
        if lo < hi:
            pieces.append(xs[lo - offset : hi - offset])
        offset += size
        if offset >= stop:
            break
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
