"""Vectorized client cohorts: many clients' local training as one computation.

Small clients spend most of a step on per-call overhead. A cohort stacks the
clients' weights along a new leading axis and trains them together:
``keras.Model.stateless_call`` inside ``tf.vectorized_map`` gives every client's
gradient in one call, and the optimizer's math (SGD, Adam; written out as Keras
writes it, :class:`fedpipe.model.step.Update`) is applied to the stacked arrays.
The result equals the sequential path (:func:`fedpipe.model.trainer.run_client`)
to rounding::

    results = train_cohort(jobs, runner)            # = [run_client(j, runner) ...]
    outputs = run_round(inputs, map_clients=cohort_map(runner, 100), runner=runner)

**Same math as sequential.** Each client's batches are the ones
:meth:`fedpipe.model.training.ModelRunner.fit` steps through
(:func:`fedpipe.model.training.batch_indices`: a generator seeded with the fit's
seed permutes each epoch; ``max_steps`` stops early), laid end to end; clients
with fewer samples or steps are padded. A padded sample has weight 0 in the
batch mean (the loss divides by the real batch size, so a last partial batch is
the same mean), and a step where a client has no batch left is masked: its weights,
Adam moments and step count stay as they were.

**How algorithms join without name checks.** An algorithm's ``train(task,
trainer)`` is ordinary sequential code that calls ``trainer.fit`` (Ditto twice,
FineTune with ``epochs``) and ``trainer.evaluate``. Each job runs in its own thread
with a :class:`CohortTrainer` whose ``fit``/``evaluate`` hand a request to the
cohort and block. The cohort (the calling thread, the only one that touches
TensorFlow) waits until *every* live job is blocked in a request or finished, then
serves all pending requests at once: fits grouped by what changes the compiled
step (proximal term, gradient offset, batch size) and by step count within a
factor of two (padding at most doubles the work when client sizes are skewed), each
group in job order as one vectorized fit; all evaluations as one vectorized
prediction. Because it waits for all jobs, the set of requests at each barrier
depends only on the jobs, never on thread timing, so results are deterministic.
A generator protocol would have needed every algorithm rewritten as a generator;
threads keep the contract as it is (any algorithm, built in or a user's, that
trains through its trainer joins).

**Fallback.** A model that cannot be vectorized with the same math trains
sequentially through ``run_client``'s steps, with one warning on the ``fedpipe``
logger (once per runner) saying why: convolutions (TensorFlow vectorizes their
filter gradient as a loop; for small_cnn's layers, 100 clients of 26 samples, one
step took 2.1x the K separate steps vectorized, 2.0x as one channel-stacked
network with grouped convolutions and 10x as shifted batched matmuls:
benchmarks/bench_cohort.py), random layers such as dropout (masks are drawn per
batch shape, padded batches would draw others), non-trainable state such as
batch-norm statistics (updated from padded batches), an optimizer setting not
written out (:func:`fedpipe.model.step.unsupported`), an op TensorFlow cannot
vectorize. A request that does not fit (weights not shaped like the model) runs
sequentially too, and so does every request of a vectorized group that raised
(one client's bad data must not fail the others: each then gets its own result
or its own error).
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import keras
import numpy as np
import tensorflow as tf

from fedpipe.client.base import FitRequest, LocalFit, LocalTrainer, LocalTraining
from fedpipe.core.errors import SettingError
from fedpipe.data.splits import ClientData
from fedpipe.model.graph import compiled
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult, MapClients
from fedpipe.model.metrics import classification_metrics
from fedpipe.model.step import Terms, local_gradient, unsupported
from fedpipe.model.threads import threaded_map
from fedpipe.model.trainer import (
    KerasTrainer,
    fit_client,
    run_here,
    run_job,
)
from fedpipe.model.training import ModelRunner, ModelSpec, batch_indices
from fedpipe.model.zoo import layer_kind

log = logging.getLogger("fedpipe")
T = TypeVar("T")

PREDICT_ROWS = 1024
"""Rows per client and call when evaluating (as ModelRunner.predict)."""

# ---------------------------------------------------------------- requests


@dataclass
class _Request:
    """A fit or an evaluation handed to the cohort by one job's thread."""

    index: int
    data: ClientData = field(repr=False)
    weights: list[np.ndarray] = field(repr=False)
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    result: Any = None
    error: BaseException | None = None


@dataclass
class _Fit(_Request):
    fit: FitRequest = field(default=None, repr=False)  # type: ignore[assignment]
    plan: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.plan = batch_indices(
            len(self.data.y_train),
            epochs=self.fit.epochs,
            batch_size=self.fit.batch_size,
            seed=self.fit.seed,
            max_steps=self.fit.max_steps,
        )

    @property
    def key(self) -> tuple[bool, bool, int, int]:
        """Which fits share one vectorized run: the same compiled step (proximal
        term, offset, batch size) and a step count within a factor of two (so
        padding at most doubles a group's work, whatever the clients' sizes)."""
        return (
            self.fit.proximal_mu > 0,
            self.fit.gradient_offset is not None,
            self.fit.batch_size,
            len(self.plan).bit_length(),
        )


@dataclass
class _Evaluate(_Request):
    pass


# ---------------------------------------------------------------- the barrier


class _Barrier:
    """Jobs submit requests and block; the cohort takes them once every live job
    is blocked or finished."""

    def __init__(self, n_jobs: int) -> None:
        self._cv = threading.Condition()
        self._pending: dict[int, _Request] = {}
        self._alive = n_jobs

    def submit(self, request: _Request) -> Any:
        """Hand ``request`` over (job thread); return its result or raise its error."""
        with self._cv:
            self._pending[request.index] = request
            self._cv.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def finish(self) -> None:
        """A job is done (job thread)."""
        with self._cv:
            self._alive -= 1
            self._cv.notify_all()

    def take(self) -> list[_Request]:
        """Every pending request in job order, once all live jobs wait (empty when
        all have finished)."""
        with self._cv:
            self._cv.wait_for(lambda: len(self._pending) == self._alive)
            taken = [self._pending[i] for i in sorted(self._pending)]
            self._pending.clear()
            return taken


class CohortTrainer(LocalTrainer):
    """:class:`LocalTrainer` of one job in a cohort: its fits (the one
    :meth:`LocalTrainer.fit`) and evaluations served by the cohort."""

    def __init__(
        self,
        index: int,
        barrier: _Barrier,
        data: ClientData,
        training: LocalTraining,
        trainable: list[int],
    ) -> None:
        super().__init__(data, training)
        self.index = index
        self.barrier = barrier
        self._trainable = trainable

    @property
    def trainable(self) -> list[int]:
        return list(self._trainable)

    def run_fit(self, request: FitRequest) -> LocalFit:
        result: LocalFit = self.barrier.submit(
            _Fit(self.index, self.data, request.weights, fit=request)
        )
        return result

    def evaluate(self, weights: Sequence[np.ndarray]) -> dict[str, float]:
        result: dict[str, float] = self.barrier.submit(
            _Evaluate(self.index, self.data, list(weights))
        )
        return result


# ---------------------------------------------------------------- entry points


def train_cohort(
    jobs: Sequence[ClientJob], runner: ModelRunner
) -> list[ClientResult | ClientFailure]:
    """Run client jobs as one cohort on ``runner``; results in job order.

    The same :class:`ClientResult` fields as :func:`fedpipe.model.trainer.run_client`
    (equal to rounding). A model that cannot be vectorized runs the jobs through
    ``run_client``'s steps one after another (exactly its bits); why is logged
    once per runner (:func:`cohort_engine`).
    """
    return in_cohort(
        runner,
        [(job.data, job.training, functools.partial(run_job, job)) for job in jobs],
    )


def cohort_map(
    runner: ModelRunner,
    size: int | None,
    *,
    on_trained: Callable[[int], None] | None = None,
    spares: Sequence[ModelRunner] = (),
) -> MapClients:
    """A :data:`fedpipe.model.jobs.MapClients` training consecutive cohorts of
    ``size`` jobs (``train.cohort_size``). None or 1, and a model that cannot be
    vectorized: one by one, :func:`fedpipe.model.trainer.run_here` (its bits), or
    with ``spares`` (more compiled models of the spec) side by side on
    ``1 + len(spares)`` threads (:func:`fedpipe.model.threads.threaded_map`, the
    same bits). ``on_trained(n)``, if given, is called after each client (or
    cohort of ``n``) is done: progress, nothing else."""
    if size is not None and size < 1:
        raise SettingError(f"train.cohort_size: got {size}; allowed: null or >= 1")
    tell = on_trained or (lambda n: None)

    def map_clients(jobs: Sequence[ClientJob]) -> list[ClientResult | ClientFailure]:
        step, train = 1, run_here(runner)
        if size is not None and size > 1 and cohort_engine(runner)[0] is not None:
            step, train = size, functools.partial(train_cohort, runner=runner)
        elif spares:
            return list(threaded_map([runner, *spares], on_trained=tell)(jobs))
        out: list[ClientResult | ClientFailure] = []
        for start in range(0, len(jobs), step):
            chunk = jobs[start : start + step]
            out.extend(train(chunk))
            tell(len(chunk))
        return out

    return map_clients


Work = tuple[ClientData, LocalTraining, Callable[[LocalTrainer], T]]
"""One client's piece of work: its data, ``train.*`` and what to do with a trainer
bound to them."""


def in_cohort(runner: ModelRunner, work: Sequence[Work[T]]) -> list[T]:
    """Call each ``fn(trainer)`` with a trainer on its client's data, the fits and
    evaluations of all of them vectorized; results in order.

    What :func:`train_cohort` runs (``fn`` = a client's round); the round's other
    per-client loops can use it too (e.g. personalized models:
    ``fn = lambda t: t.evaluate(algorithm.personal_model(task, t))``). When the
    model cannot be vectorized, each ``fn`` gets a
    :class:`fedpipe.model.trainer.KerasTrainer` instead, one after another (the
    sequential path's bits), and one warning on the ``fedpipe`` logger, once per
    runner, says why.
    """
    if not work:
        return []
    engine, _ = cohort_engine(runner)
    if engine is None:
        return [fn(KerasTrainer(runner, data, training)) for data, training, fn in work]
    return _vectorized(work, engine)


def _vectorized(work: Sequence[Work[T]], engine: CohortEngine) -> list[T]:
    """Each piece of work in its own thread; requests served in barriers."""
    barrier = _Barrier(len(work))
    results: list[Any] = [None] * len(work)
    errors: list[BaseException | None] = [None] * len(work)
    trainable = engine.runner.trainable_indices()

    def run(i: int) -> None:
        data, training, fn = work[i]
        try:
            results[i] = fn(CohortTrainer(i, barrier, data, training, trainable))
        except BaseException as exc:  # re-raised by the cohort, in job order
            errors[i] = exc
        finally:
            barrier.finish()

    threads = [
        threading.Thread(target=run, args=(i,), daemon=True, name=f"cohort-{i}")
        for i in range(len(work))
    ]
    for t in threads:
        t.start()
    while requests := barrier.take():
        engine.serve(requests)
    for t in threads:
        t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results


# ---------------------------------------------------------------- the engine

_engines: weakref.WeakKeyDictionary[ModelRunner, tuple[CohortEngine | None, str]] = (
    weakref.WeakKeyDictionary()
)


def cohort_engine(runner: ModelRunner) -> tuple[CohortEngine | None, str]:
    """The vectorized engine of ``runner``'s model, or None and why not.

    Checked once per runner (the check traces the vectorized step); when the
    model cannot be vectorized, one warning on the ``fedpipe`` logger says why.
    """
    if runner not in _engines:
        reason = unvectorizable(runner)
        engine = None
        if reason is None:
            engine = CohortEngine(runner)
            reason = engine.probe()
            engine = engine if reason is None else None
        if reason is not None:
            log.warning(
                "cohort: model %r trains its clients one by one: %s",
                runner.spec.name,
                reason,
            )
        _engines[runner] = (engine, reason or "")
    return _engines[runner]


def unvectorizable(runner: ModelRunner) -> str | None:
    """Why ``runner``'s model cannot train in a cohort with the sequential math,
    from its layers and optimizer; None if nothing stands in the way."""
    return layers_unvectorizable(runner.model) or unsupported(runner.optimizer)


def layers_unvectorizable(model: keras.Model) -> str | None:
    """Why ``model``'s layers cannot train in a cohort with the sequential
    math (built or not, compiled or not); None if nothing stands in the way."""
    for layer in model._flatten_layers(include_self=False):
        what = f"{type(layer).__name__} {layer.name!r}"
        if layer_kind(layer) == "conv":
            return (
                f"the model has convolutions ({what}): TensorFlow vectorizes their "
                "filter gradient as a loop, no faster (benchmarks/bench_cohort.py)"
            )
        if layer._seed_generators:
            return (
                f"the model has random layers ({what}): their masks are drawn per "
                "batch shape, so padded batches would draw others"
            )
        if layer.non_trainable_weights:
            return (
                f"the model has non-trainable state ({what}): it would be updated "
                "from padded batches"
            )
    if model.losses:
        return "the model adds losses of its own (not vectorized)"
    return None


AUTO_COHORT = 10
"""Clients a cohort of ``train.cohort_size: auto`` holds: at 1,000 clients, 100 a
round, an MLP's round took 0.30 s in cohorts of 10 and 0.24 s in cohorts of 100
against 0.51 s one by one (bench_scale, docs/benchmarks.md); 10 is also what the
Dask runner sends a worker at a time, so its groups are whole cohorts."""


def cohort_size_for(setting: int | str | None, spec: ModelSpec) -> int | None:
    """``train.cohort_size`` as a round's clients train on ``spec``'s model:
    ``auto`` is cohorts of :data:`AUTO_COHORT` where the model's layers can train
    in a cohort with the sequential math (an MLP; not convolutions, random
    layers, batch-norm statistics: :func:`layers_unvectorizable`), else None,
    one by one with no warning (the run's "compiled" line says which); a
    number or None is the user's and stays (a model that cannot then warns).

    Decided from the spec alone, before any client is sent anywhere, so the
    local and the Dask runner train the same cohorts (the same bits)."""
    if setting != "auto":
        return None if setting is None else int(setting)
    return AUTO_COHORT if _spec_unvectorizable(spec) is None else None


@functools.lru_cache(maxsize=8)
def _spec_unvectorizable(spec: ModelSpec) -> str | None:
    """:func:`layers_unvectorizable` of an uncompiled build of ``spec`` (every
    optimizer a spec names, plain SGD or Adam, is written out). A model that
    does not build trains one by one, where its error is reported as always."""
    try:
        model = spec.build()
    except Exception as exc:  # noqa: BLE001 - raised again where it is trained
        return f"the model does not build: {exc}"
    return layers_unvectorizable(model)


@dataclass
class _Schedule:
    """The batches of one fit group, laid out step by step (T steps, K clients,
    B rows): sample indices, their weights (1 real, 0 padding), active steps."""

    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray
    active: np.ndarray
    steps: np.ndarray


class CohortEngine:
    """Vectorized fits and evaluations on ``runner``'s model (one thread only)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = weakref.proxy(runner)  # the runner owns the engine
        self.model = runner.model
        place = {id(v): j for j, v in enumerate(self.model.weights)}
        self.trainable = [place[id(v)] for v in self.model.trainable_variables]
        self.non_trainable = [place[id(v)] for v in self.model.non_trainable_variables]
        self.dtypes = [np.dtype(v.dtype) for v in self.model.weights]
        self.shapes = [tuple(v.shape) for v in self.model.weights]
        self.update = runner.update
        self._steps: dict[tuple[bool, bool], Callable[..., Any]] = {}
        self.x_dtype = np.dtype(
            keras.backend.standardize_dtype(self.model.inputs[0].dtype)
        )
        binary = runner.spec.n_classes == 2
        self.y_dtype = np.dtype(np.float32 if binary else np.int64)
        self._specs = self._signature(binary)
        self._predict = compiled(
            self._predict_all, input_signature=self._specs["predict"]
        )

    def _signature(self, binary: bool) -> dict[str, list[Any]]:
        """Input signatures with the clients, steps and rows axes unknown, so each
        compiled function is traced once for every cohort."""

        def stacked(positions: list[int]) -> list[tf.TensorSpec]:
            return [
                tf.TensorSpec([None, *self.shapes[j]], self.dtypes[j])
                for j in positions
            ]

        tv, ntv = stacked(self.trainable), stacked(self.non_trainable)
        x = tf.TensorSpec([None, None, *self.runner.spec.input_shape], self.x_dtype)
        y = tf.TensorSpec([None, None, 1] if binary else [None, None], self.y_dtype)
        clients = tf.TensorSpec([None], tf.float32)
        common = [
            tv,
            ntv,
            [tv] * self.update.slots,
            clients,
            x,
            y,
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None], tf.bool),
        ]
        return {
            "predict": [tv, ntv, x, y],
            "plain": [*common, []],
            "prox": [*common, [clients, tv]],
            "offset": [*common, [tv]],
            "prox+offset": [*common, [clients, tv, tv]],
        }

    # ------------------------------------------------------------ serving

    def serve(self, requests: Sequence[_Request]) -> None:
        """Compute every request's result (or error) and release its job."""
        fits = [r for r in requests if isinstance(r, _Fit)]
        groups: dict[tuple[bool, bool, int, int], list[_Fit]] = {}
        for r in fits:
            if self._fits_model(r):
                groups.setdefault(r.key, []).append(r)
            else:
                self._guard([r], self._fit_sequential)
        for group in groups.values():
            self._guard(group, self._fit_group, alone=self._fit_sequential)
        evaluations = [r for r in requests if isinstance(r, _Evaluate)]
        if evaluations:
            self._guard(
                evaluations, self._evaluate_group, alone=self._evaluate_sequential
            )
        for r in requests:
            r.done.set()

    def _guard(
        self,
        group: Sequence[_Request],
        serve: Callable[[Any], None],
        alone: Callable[[Any], None] | None = None,
    ) -> None:
        """Serve ``group``; if that raises, serve each request ``alone`` (the
        sequential path), so one bad client's error is its own; a request that
        still fails gets the error, which its job raises as sequential
        training would."""
        try:
            serve(group)
            return
        except Exception as exc:
            if alone is None or len(group) == 1:
                for r in group:
                    r.error = exc
                return
            log.warning(
                "cohort: %d requests served one by one after: %s", len(group), exc
            )
        for r in group:
            self._guard([r], alone)

    def _fits_model(self, r: _Fit) -> bool:
        lists = [r.weights] + [
            a for a in (r.fit.anchor, r.fit.gradient_offset) if a is not None
        ]
        ok = all(
            len(ws) == len(self.shapes)
            and all(np.shape(w) == s for w, s in zip(ws, self.shapes, strict=True))
            for ws in lists
        )
        if not ok:
            log.warning(
                "cohort: job %d trains alone: weights not shaped like the model",
                r.index,
            )
        return ok

    def _evaluate_sequential(self, group: Sequence[_Evaluate]) -> None:
        (r,) = group
        r.result = self.runner.evaluate(r.weights, r.data.x_test, r.data.y_test)

    def _fit_sequential(self, group: Sequence[_Fit]) -> None:
        (r,) = group
        r.result = fit_client(self.runner, r.data, r.fit)

    # ------------------------------------------------------------ fitting

    def _fit_group(self, group: Sequence[_Fit]) -> None:
        prox, offset, *_ = group[0].key
        weights = [self._cast(r.weights) for r in group]
        sched = self._schedule(group)
        tv = self._stack(weights, self.trainable)
        ntv = self._stack(weights, self.non_trainable)
        extra: list[Any] = []
        if prox:
            anchors = [
                w if r.fit.anchor is None else self._cast(r.fit.anchor)
                for r, w in zip(group, weights, strict=True)
            ]
            mu = tf.constant(np.array([r.fit.proximal_mu for r in group], np.float32))
            extra += [mu, self._stack(anchors, self.trainable)]
        if offset:
            offsets = [self._cast(r.fit.gradient_offset or []) for r in group]
            extra.append(self._stack(offsets, self.trainable))
        state = [[tf.zeros_like(v) for v in tv] for _ in range(self.update.slots)]
        count = tf.zeros(len(group), tf.float32)
        step = self._step(prox=prox, offset=offset)
        losses = []
        for t in range(len(sched.active)):
            tv, state, count, loss = step(
                tv,
                ntv,
                state,
                count,
                tf.constant(sched.x[t]),
                tf.constant(sched.y[t]),
                tf.constant(sched.mask[t]),
                tf.constant(sched.active[t]),
                extra,
            )
            losses.append(loss.numpy())
        trained = [np.array(v) for v in tv]
        per_step = np.array(losses, np.float32).reshape(len(sched.active), len(group))
        for k, r in enumerate(group):
            out = list(weights[k])
            for slot, j in enumerate(self.trainable):
                out[j] = trained[slot][k]
            n = int(sched.steps[k])
            loss_k = (
                float(np.mean([float(v) for v in per_step[:n, k]]))
                if n
                else float("nan")
            )
            r.result = LocalFit(out, n, loss_k)

    def _cast(self, weights: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(w, d) for w, d in zip(weights, self.dtypes, strict=True)]

    @staticmethod
    def _stack(
        weights: Sequence[list[np.ndarray]], positions: list[int]
    ) -> list[tf.Tensor]:
        return [tf.constant(np.stack([w[j] for w in weights])) for j in positions]

    def _schedule(self, group: Sequence[_Fit]) -> _Schedule:
        """Each client's batches as ModelRunner.fit cuts them, padded to a grid."""
        batch = group[0].fit.batch_size
        plans = [r.plan for r in group]
        n_steps = max((len(p) for p in plans), default=0)
        first = group[0].data
        x = np.zeros(
            (n_steps, len(group), batch, *first.x_train.shape[1:]), self.x_dtype
        )
        target = self.runner._target(first.y_train[:0])
        y = np.zeros((n_steps, len(group), batch, *target.shape[1:]), self.y_dtype)
        mask = np.zeros((n_steps, len(group), batch), np.float32)
        active = np.zeros((n_steps, len(group)), bool)
        for k, (r, plan) in enumerate(zip(group, plans, strict=True)):
            ys = self.runner._target(r.data.y_train)
            for t, rows in enumerate(plan):
                x[t, k, : len(rows)] = r.data.x_train[rows]
                y[t, k, : len(rows)] = ys[rows]
                mask[t, k, : len(rows)] = 1.0
                active[t, k] = True
        steps = np.array([len(p) for p in plans], np.int64)
        return _Schedule(x, y, mask, active, steps)

    def _step(self, *, prox: bool, offset: bool) -> Callable[..., Any]:
        """The compiled cohort step for this combination of added terms."""
        key = (prox, offset)
        if key not in self._steps:
            name = "+".join(n for n, on in (("prox", prox), ("offset", offset)) if on)
            self._steps[key] = compiled(
                self._make_step(prox=prox, offset=offset),
                input_signature=self._specs[name or "plain"],
            )
        return self._steps[key]

    def _make_step(self, *, prox: bool, offset: bool) -> Callable[..., Any]:
        """Every client's :func:`fedpipe.model.step.local_gradient` on its own
        stacked weights (``tf.vectorized_map``), then the runner's
        :class:`~fedpipe.model.step.Update` on the stack; a client without a
        batch at this step keeps its weights, optimizer state and step count."""
        model, per_sample = self.model, self.runner._loss
        label_weights = self.runner.label_weights

        def grads_one(elems: tuple[Any, ...]) -> tuple[list[tf.Tensor], tf.Tensor]:
            tv, ntv, x, y, m, *rest = elems

            def loss(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
                probs, _ = model.stateless_call(tv, ntv, x, training=True)
                values = per_sample(y, probs) * m
                weights = label_weights(y)  # train.class_weight
                if weights is not None:
                    values = values * tf.reshape(weights, tf.shape(values))
                return tf.reduce_sum(values) / tf.maximum(tf.reduce_sum(m), 1.0)

            terms = Terms(
                mu=rest[0] if prox else None,
                anchor=rest[1] if prox else None,
                offset=rest[-1] if offset else None,
            )
            return local_gradient(loss, x, y, tv, terms)

        def step(
            tv: list[tf.Tensor],
            ntv: list[tf.Tensor],
            state: list[list[tf.Tensor]],
            count: tf.Tensor,
            x: tf.Tensor,
            y: tf.Tensor,
            m: tf.Tensor,
            active: tf.Tensor,
            extra: list[Any],
        ) -> tuple[Any, ...]:
            grads, loss = tf.vectorized_map(
                grads_one, (tv, ntv, x, y, m, *extra), fallback_to_while_loop=False
            )
            new_count = count + tf.cast(active, tf.float32)
            new_tv, new_state = self.update(
                tv, grads, state, [_along(new_count, v) for v in tv]
            )

            def keep(new: list[tf.Tensor], old: list[tf.Tensor]) -> list[tf.Tensor]:
                return [
                    tf.where(_along(active, o), n, o)
                    for n, o in zip(new, old, strict=True)
                ]

            return (
                keep(new_tv, tv),
                [keep(n, o) for n, o in zip(new_state, state, strict=True)],
                new_count,
                loss,
            )

        return step

    # ------------------------------------------------------------ evaluation

    def _evaluate_group(self, group: Sequence[_Evaluate]) -> None:
        """Each request's weights on its client's local test split, as
        ModelRunner.evaluate computes it, in vectorized chunks of rows."""
        weights = [self._cast(r.weights) for r in group]
        sizes = [len(r.data.y_test) for r in group]
        probs: list[list[np.ndarray]] = [[] for _ in group]
        losses: list[list[np.ndarray]] = [[] for _ in group]
        for start in range(0, max(sizes, default=0), PREDICT_ROWS):
            live = [k for k, n in enumerate(sizes) if n > start]
            rows = min(PREDICT_ROWS, max(sizes[k] for k in live) - start)
            first = group[live[0]].data
            x = np.zeros((len(live), rows, *first.x_test.shape[1:]), self.x_dtype)
            target = self.runner._target(first.y_test[:0])
            y = np.zeros((len(live), rows, *target.shape[1:]), self.y_dtype)
            for i, k in enumerate(live):
                xs = group[k].data.x_test[start : start + rows]
                x[i, : len(xs)] = xs
                y[i, : len(xs)] = self.runner._target(
                    group[k].data.y_test[start : start + rows]
                )
            p, loss = self._predict(
                self._stack([weights[k] for k in live], self.trainable),
                self._stack([weights[k] for k in live], self.non_trainable),
                tf.constant(x),
                tf.constant(y),
            )
            p, loss = p.numpy(), loss.numpy()
            for i, k in enumerate(live):
                n = min(rows, sizes[k] - start)
                probs[k].append(p[i, :n])
                losses[k].append(loss[i, :n].reshape(-1))
        for k, r in enumerate(group):
            if sizes[k] == 0:
                p_k, l_k = np.zeros((0, 1), np.float32), np.zeros(0, np.float32)
            else:
                p_k, l_k = np.concatenate(probs[k]), np.concatenate(losses[k])
            r.result = classification_metrics(r.data.y_test, p_k, l_k)

    def _predict_all(
        self, tv: list[tf.Tensor], ntv: list[tf.Tensor], x: tf.Tensor, y: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        def one(elems: tuple[Any, ...]) -> tuple[tf.Tensor, tf.Tensor]:
            tv_, ntv_, x_, y_ = elems
            probs, _ = self.model.stateless_call(tv_, ntv_, x_, training=False)
            return probs, self.runner._loss(y_, probs)

        return tf.vectorized_map(one, (tv, ntv, x, y), fallback_to_while_loop=False)

    # ------------------------------------------------------------ the probe

    def probe(self) -> str | None:
        """Trace the vectorized step and prediction on two clients of zeros; why
        TensorFlow cannot vectorize them, or None."""
        weights = [
            np.zeros(s, d) for s, d in zip(self.shapes, self.dtypes, strict=True)
        ]
        shape = tuple(self.model.inputs[0].shape[1:]) if self.model.inputs else None
        if shape is None or any(d is None for d in shape):
            return "the model's input shape is not fixed"
        n = self.runner.spec.n_classes
        y = np.zeros((2, 2, 1) if n == 2 else (2, 2), self.y_dtype)
        x = tf.zeros((2, 2, *shape), self.x_dtype)
        tv = self._stack([weights, weights], self.trainable)
        ntv = self._stack([weights, weights], self.non_trainable)
        try:
            self._predict(tv, ntv, x, tf.constant(y))
            zeros = [[tf.zeros_like(v) for v in tv]] * self.update.slots
            self._step(prox=False, offset=False)(
                tv,
                ntv,
                zeros,
                tf.zeros(2),
                x,
                tf.constant(y),
                tf.ones((2, 2)),
                tf.constant([True, False]),
                [],
            )
        except Exception as exc:  # pfor names the op it cannot vectorize
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return (
                f"TensorFlow cannot vectorize it: {type(exc).__name__}: {first[:160]}"
            )
        return None


def _along(values: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """Per-client ``values`` (K,) shaped to broadcast against ``like`` (K, ...)."""
    return tf.reshape(values, [-1] + [1] * (len(like.shape) - 1))
