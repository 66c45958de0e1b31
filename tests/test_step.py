"""One local step (fedpipe.model.step): the local objective's gradient and the
optimizer's update that the sequential, DP-SGD and cohort steps all take."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from fedpipe.model.step import PerRecord, Terms, Update, local_gradient
from fedpipe.model.training import ModelRunner, ModelSpec

FEATURES = 6
SHAPES = [(FEATURES, 4), (4,)]


def _draw(rng: np.random.Generator, scale: float) -> list[np.ndarray]:
    return [rng.normal(scale=scale, size=s).astype(np.float32) for s in SHAPES]


def _keras(optimizer: str) -> keras.optimizers.Optimizer:
    if optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=0.05)
    return keras.optimizers.Adam(learning_rate=0.01)


def _keras_steps(
    optimizer: keras.optimizers.Optimizer,
    start: list[np.ndarray],
    grads: list[list[np.ndarray]],
) -> list[np.ndarray]:
    """Keras' own optimizer applied to one client's weights, step by step."""
    variables = [keras.Variable(w) for w in start]
    optimizer.build(variables)
    for g in grads:
        optimizer.apply([tf.constant(a) for a in g], variables)
    return [v.value.numpy() for v in variables]


def _stacked_steps(
    update: Update,
    start: list[list[np.ndarray]],
    grads: list[list[list[np.ndarray]]],
    active: np.ndarray,
) -> list[np.ndarray]:
    """The update on clients' stacked weights, as the cohort takes it: each
    client's own step count; a client stays as it was where ``active`` (steps x
    clients) is False."""
    tv = [tf.constant(np.stack(ws)) for ws in zip(*start, strict=True)]
    state = [[tf.zeros_like(v) for v in tv] for _ in range(update.slots)]
    count = np.zeros(len(start), np.float32)

    def along(values: np.ndarray, like: tf.Tensor) -> tf.Tensor:
        return tf.constant(values.reshape((-1,) + (1,) * (len(like.shape) - 1)))

    for t, on in enumerate(active):
        count = count + on
        g = [tf.constant(np.stack(gs)) for gs in zip(*grads[t], strict=True)]
        new, new_state = update(tv, g, state, [along(count, v) for v in tv])

        def keep(n: list, o: list, on: np.ndarray = on) -> list:
            return [tf.where(along(on, b), a, b) for a, b in zip(n, o, strict=True)]

        tv = keep(new, tv)
        state = [keep(n, o) for n, o in zip(new_state, state, strict=True)]
    return [np.array(v) for v in tv]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("n_steps", [1, 4])
def test_update_on_stacked_clients_is_keras_optimizer_step(
    optimizer: str, n_steps: int
) -> None:
    """Two clients, different weights and gradients; the second sits out the
    first step (its step count lags, as a masked step of a client with fewer
    batches). Equal bit for bit: both run the same float32 ops eagerly."""
    rng = np.random.default_rng(0)
    start = [_draw(rng, 0.5), _draw(rng, 0.5)]
    grads = [[_draw(rng, 1.0), _draw(rng, 1.0)] for _ in range(n_steps)]
    active = np.ones((n_steps, 2), bool)
    active[0, 1] = n_steps == 1  # one step: both take it
    got = _stacked_steps(Update.of(_keras(optimizer)), start, grads, active)
    for k in range(2):
        steps = [grads[t][k] for t in range(n_steps) if active[t, k]]
        want = _keras_steps(_keras(optimizer), start[k], steps)
        for slot, w in enumerate(want):
            np.testing.assert_array_equal(got[slot][k], w)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_runner_takes_its_keras_optimizers_step(optimizer: str) -> None:
    lr = 0.05 if optimizer == "sgd" else 0.01
    runner = ModelRunner(ModelSpec("mlp", (FEATURES,), 3, optimizer, lr))
    assert runner.update == Update.of(_keras(optimizer))


def test_update_refuses_what_it_does_not_write_out() -> None:
    with pytest.raises(ValueError, match="momentum"):
        Update.of(keras.optimizers.SGD(learning_rate=0.1, momentum=0.9))
    with pytest.raises(ValueError, match="RMSprop"):
        Update.of(keras.optimizers.RMSprop())


# ---------------------------------------------------------------- the gradient


def _problem() -> tuple[list[tf.Variable], tf.Tensor, tf.Tensor]:
    rng = np.random.default_rng(1)
    weights = [tf.Variable(w) for w in _draw(rng, 0.5)]
    x = tf.constant(rng.normal(size=(5, FEATURES)).astype(np.float32))
    y = tf.constant(rng.normal(size=(5, 4)).astype(np.float32))
    return weights, x, y


def _loss(weights: list[tf.Variable]):
    def loss(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.square(x @ weights[0] + weights[1] - y))

    return loss


def test_terms_add_the_proximal_pull_and_the_offset() -> None:
    weights, x, y = _problem()
    anchor = [tf.constant(w.numpy() + 0.3) for w in weights]
    offset = [tf.fill(w.shape, 0.25) for w in weights]
    mu = tf.constant(0.5)
    plain, loss = local_gradient(_loss(weights), x, y, weights, Terms())
    both, same_loss = local_gradient(
        _loss(weights), x, y, weights, Terms(mu=mu, anchor=anchor, offset=offset)
    )
    assert float(loss) == float(same_loss)  # the data loss, without the terms
    for g, b, w, a, o in zip(plain, both, weights, anchor, offset, strict=True):
        want = g + mu * (w - a) + o
        np.testing.assert_allclose(b.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


def test_terms_join_the_private_gradient_after_the_noise() -> None:
    """Noise 0 and a clip no record reaches: the mean record gradient times
    n / expected, then the terms as in the plain step."""
    weights, x, y = _problem()
    anchor = [tf.constant(w.numpy() - 0.2) for w in weights]
    offset = [tf.fill(w.shape, -0.5) for w in weights]
    terms = Terms(mu=tf.constant(0.1), anchor=anchor, offset=offset)
    private = PerRecord(
        [tf.zeros(w.shape) for w in weights], tf.constant(2.5), tf.constant(1e6)
    )
    got, _ = local_gradient(_loss(weights), x, y, weights, terms, private)
    plain, _ = local_gradient(_loss(weights), x, y, weights, Terms())
    for p, g, w, a, o in zip(plain, got, weights, anchor, offset, strict=True):
        want = p * (5 / 2.5) + 0.1 * (w - a) + o
        np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_private_gradient_clips_each_record() -> None:
    """A clip of 1e-3: every record's gradient is cut to that norm, so the sum
    of n records has norm at most n * clip."""
    weights, x, y = _problem()
    private = PerRecord(
        [tf.zeros(w.shape) for w in weights], tf.constant(1.0), tf.constant(1e-3)
    )
    got, _ = local_gradient(_loss(weights), x, y, weights, Terms(), private)
    norm = np.sqrt(sum(float(tf.reduce_sum(tf.square(g))) for g in got))
    assert norm <= 5 * 1e-3 * (1 + 1e-5)
