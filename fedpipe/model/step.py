"""A client's local step, written once: its gradient and the optimizer's update.

Every engine composes the same two functions. :func:`local_gradient` takes the
gradient of a client's local objective (the data loss plus its algorithm's
:class:`Terms`; with :class:`PerRecord`, DP-SGD's clipped and noised gradient of
the data loss); :class:`Update` takes one step of ``train.optimizer`` on it. The
sequential and DP-SGD steps of :class:`fedpipe.model.training.ModelRunner` apply
them to the model's variables; the cohort (:mod:`fedpipe.model.cohort`) to each
client's stacked tensors inside ``tf.vectorized_map``. A new local term is a
field of :class:`Terms` and one line in :meth:`Terms.penalty` or
:meth:`Terms.shift`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import keras
import tensorflow as tf

Loss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
"""The data loss of a batch ``(x, y)`` at the current weights (a scalar)."""


@dataclass(frozen=True)
class Terms:
    """The terms a client algorithm adds to its local objective

    .. math:: L(w) + \\frac{\\mu}{2} \\|w - a\\|^2 + \\langle o, w \\rangle

    as tensors laid out like the trainable weights; None: not added.

    Attributes
    ----------
    mu : tf.Tensor or None
        Weight of the proximal term (FedProx, Ditto, FedDyn); with ``anchor``.
    anchor : list of tf.Tensor or None
        Where the proximal term pulls to.
    offset : list of tf.Tensor or None
        ``o``, the gradient of the linear term (SCAFFOLD's ``c - c_i``, FedDyn's
        ``-grad_k``).
    """

    mu: tf.Tensor | None = None
    anchor: Sequence[tf.Tensor] | None = None
    offset: Sequence[tf.Tensor] | None = None

    def penalty(self, weights: Sequence[tf.Tensor]) -> tf.Tensor | None:
        """The terms differentiated with the data loss (under the tape); None
        when there are none."""
        if self.mu is None or self.anchor is None:
            return None
        distance = tf.add_n(
            [
                tf.reduce_sum(tf.square(v - a))
                for v, a in zip(weights, self.anchor, strict=True)
            ]
        )
        return 0.5 * self.mu * distance

    def shift(self, grads: list[tf.Tensor]) -> list[tf.Tensor]:
        """``grads`` with the terms whose gradient is a constant added."""
        if self.offset is None:
            return grads
        return [g + o for g, o in zip(grads, self.offset, strict=True)]


@dataclass(frozen=True)
class PerRecord:
    """DP-SGD's gradient of a batch (Abadi et al., 2016): each record's gradient
    of its own loss (``tf.vectorized_map`` over the records, as TensorFlow
    Privacy's vectorized optimizers do) is scaled to L2 norm at most ``clip``
    over all trainable arrays together (``g * min(1, clip / ||g||)``); the
    scaled gradients are summed, ``noise`` (one array per trainable array) is
    added, and the sum divided by ``expected`` (the expected batch size q n,
    fixed whoever was sampled, so one record moves the gradient by at most
    ``clip / expected``). An empty batch gives the noise alone."""

    noise: Sequence[tf.Tensor]
    expected: tf.Tensor
    clip: tf.Tensor

    def gradient(
        self, loss: Loss, x: tf.Tensor, y: tf.Tensor, weights: Sequence[tf.Tensor]
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """The noised mean of the clipped record gradients, and the batch's mean
        data loss (NaN for an empty batch)."""
        if x.shape[0] == 0:
            return [z / self.expected for z in self.noise], tf.constant(
                float("nan"), tf.float32
            )

        def one(example: tuple[tf.Tensor, tf.Tensor]) -> tuple[list, tf.Tensor]:
            xi, yi = example
            with tf.GradientTape() as tape:
                _watch(tape, weights)
                value = loss(xi[None], yi[None])
            return tape.gradient(value, weights), value

        per_record, losses = tf.vectorized_map(one, (x, y))
        squares = [
            tf.reduce_sum(tf.reshape(tf.square(g), (tf.shape(g)[0], -1)), axis=1)
            for g in per_record
        ]
        # clip / 0 = inf: a zero gradient is kept as it is
        scale = tf.minimum(1.0, self.clip / tf.sqrt(tf.add_n(squares)))
        grads = [
            (tf.tensordot(scale, g, axes=1) + z) / self.expected
            for g, z in zip(per_record, self.noise, strict=True)
        ]
        return grads, tf.reduce_mean(losses)


def local_gradient(
    loss: Loss,
    x: tf.Tensor,
    y: tf.Tensor,
    weights: Sequence[tf.Tensor],
    terms: Terms,
    private: PerRecord | None = None,
) -> tuple[list[tf.Tensor], tf.Tensor]:
    """The gradient of a client's local objective on the batch ``(x, y)`` with
    respect to ``weights`` (variables, or tensors the loss is computed from),
    and the batch's data loss (without the terms).

    With ``private`` the data loss's gradient is DP-SGD's
    (:meth:`PerRecord.gradient`); the terms depend on no record and join it
    after the noise.
    """
    if private is None:
        with tf.GradientTape() as tape:
            _watch(tape, weights)
            value = loss(x, y)
            penalty = terms.penalty(weights)
            total = value if penalty is None else value + penalty
        grads = tape.gradient(total, weights)
    else:
        grads, value = private.gradient(loss, x, y, weights)
        with tf.GradientTape() as tape:
            _watch(tape, weights)
            penalty = terms.penalty(weights)
        if penalty is not None:
            pulls = tape.gradient(penalty, weights)
            grads = [g + p for g, p in zip(grads, pulls, strict=True)]
    return terms.shift(list(grads)), value


def _watch(tape: tf.GradientTape, weights: Sequence[tf.Tensor]) -> None:
    """Watch the weights that are tensors (trainable variables are watched
    anyway, and the tape refuses Keras' own)."""
    tape.watch([w for w in weights if isinstance(w, tf.Tensor)])


@dataclass(frozen=True)
class Update:
    """One step of ``train.optimizer`` on weights held as tensors: Keras'
    ``update_step`` of SGD or Adam, the same float32 ops
    (tests/test_step.py checks it against Keras' own), written out because
    Keras 3's ``stateless_apply`` refuses the TensorFlow backend and its
    ``apply`` updates variables, not a cohort's stacked tensors.

    Attributes
    ----------
    name : str
        ``sgd`` or ``adam``.
    lr : float
        The learning rate.
    beta_1, beta_2, epsilon : float
        Adam's (Keras' defaults).
    """

    name: str
    lr: float
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7

    @classmethod
    def of(cls, optimizer: keras.optimizers.Optimizer) -> Update:
        """The update of a Keras optimizer.

        Raises
        ------
        ValueError
            An optimizer or a setting not written out here, saying which.
        """
        why = unsupported(optimizer)
        if why is not None:
            raise ValueError(why)
        lr = float(optimizer.learning_rate.numpy())
        if isinstance(optimizer, keras.optimizers.Adam):
            return cls(
                "adam", lr, optimizer.beta_1, optimizer.beta_2, optimizer.epsilon
            )
        return cls("sgd", lr)

    @property
    def slots(self) -> int:
        """Arrays of state kept per weight array (Adam's moments, velocities)."""
        return 2 if self.name == "adam" else 0

    def __call__(
        self,
        weights: Sequence[tf.Tensor],
        grads: Sequence[tf.Tensor],
        state: Sequence[Sequence[tf.Tensor]],
        steps: Sequence[tf.Tensor],
    ) -> tuple[list[tf.Tensor], list[list[tf.Tensor]]]:
        """The new weights and state after one step.

        ``state``: :attr:`slots` lists, each with one array per weight array
        (zeros before the first step); ``steps``: per weight array, the step's
        number counted from 1 (Keras' ``iterations + 1``), a float32 tensor that
        broadcasts against it.
        """
        lr = tf.constant(self.lr, tf.float32)
        if self.name == "sgd":
            return [v - g * lr for v, g in zip(weights, grads, strict=True)], []
        moments, velocities = state
        new_w, new_m, new_v = [], [], []
        for v, g, m, s, step in zip(
            weights, grads, moments, velocities, steps, strict=True
        ):
            beta_1_power = tf.pow(tf.constant(self.beta_1, tf.float32), step)
            beta_2_power = tf.pow(tf.constant(self.beta_2, tf.float32), step)
            alpha = lr * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)
            m = m + (g - m) * (1 - self.beta_1)
            s = s + (tf.square(g) - s) * (1 - self.beta_2)
            new_w.append(v - (m * alpha) / (tf.sqrt(s) + self.epsilon))
            new_m.append(m)
            new_v.append(s)
        return new_w, [new_m, new_v]


def unsupported(optimizer: keras.optimizers.Optimizer) -> str | None:
    """Why :class:`Update` cannot take ``optimizer``'s step, or None."""
    name = type(optimizer).__name__
    if type(optimizer) not in (keras.optimizers.SGD, keras.optimizers.Adam):
        return f"optimizer {name} is not written out (sgd and adam are)"
    extras = ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay")
    set_ = [k for k in extras if getattr(optimizer, k, None)]
    if optimizer.use_ema or set_ or getattr(optimizer, "loss_scale_factor", None):
        return f"optimizer {name} has settings not written out ({', '.join(set_)})"
    if isinstance(optimizer, keras.optimizers.SGD) and (
        optimizer.momentum or optimizer.nesterov
    ):
        return "SGD with momentum is not written out"
    if isinstance(optimizer, keras.optimizers.Adam) and optimizer.amsgrad:
        return "Adam with amsgrad is not written out"
    if not isinstance(optimizer.learning_rate, keras.Variable | tf.Variable):
        return "a learning-rate schedule is not written out"
    return None
