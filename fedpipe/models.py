"""Model builders. Each returns an *uncompiled* ``keras.Model``.

Server and clients compile with their own optimizer; tests of a builder need no
training. Chosen by ``model.name`` in ``params.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import layers


def _head(n_classes: int) -> layers.Layer:
    """Sigmoid unit for two classes, softmax over ``n_classes`` otherwise."""
    if n_classes == 2:
        return layers.Dense(1, activation="sigmoid", name="output")
    return layers.Dense(n_classes, activation="softmax", name="output")


def small_cnn(input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """The default: Keras's classic MNIST convnet (keras-io ``mnist_convnet``).

    Conv 32 and 64 filters (3x3) with max-pooling, dropout 0.5, a dense output:
    about 35k parameters on 28x28x1 digits.
    """
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.Conv2D(32, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(64, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(2, name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dropout(0.5, name="dropout"),
            _head(n_classes),
        ],
        name="small_cnn",
    )


def seed_cnn(input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """The CNN of the seed question (conv 32/64/64 3x3, max-pooling, dense 64,
    dropout 0.3), adapted to the input shape and the number of classes."""
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.Conv2D(32, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(64, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(2, name="pool2"),
            layers.Conv2D(64, 3, activation="relu", name="conv3"),
            layers.Flatten(name="flatten"),
            layers.Dense(64, activation="relu", name="dense"),
            layers.Dropout(0.3, name="dropout"),
            _head(n_classes),
        ],
        name="seed_cnn",
    )


def mlp(input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """A tiny multilayer perceptron (one hidden layer of 32): fast, for tests."""
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.Flatten(name="flatten"),
            layers.Dense(32, activation="relu", name="hidden"),
            _head(n_classes),
        ],
        name="mlp",
    )


MODELS: dict[str, Callable[[tuple[int, ...], int], keras.Model]] = {
    "small_cnn": small_cnn,
    "seed_cnn": seed_cnn,
    "mlp": mlp,
}


def build_model(name: str, input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """Build the uncompiled model registered under ``name``."""
    try:
        builder = MODELS[name]
    except KeyError:
        allowed = ", ".join(sorted(MODELS))
        raise ValueError(f"model.name: unknown {name!r}; allowed: {allowed}") from None
    if n_classes < 2:
        raise ValueError(f"a classifier needs at least 2 classes, got {n_classes}")
    return builder(tuple(input_shape), n_classes)


def loss_for(n_classes: int, *, per_sample: bool = False) -> keras.losses.Loss:
    """The loss matching :func:`_head`: mean over the batch, or per sample.

    Keras computes it from the logits kept by the final sigmoid/softmax, so a
    confidently wrong prediction has an unbounded loss (see NOTES on logits).
    """
    reduction = None if per_sample else "sum_over_batch_size"
    if n_classes == 2:
        return keras.losses.BinaryCrossentropy(reduction=reduction)
    return keras.losses.SparseCategoricalCrossentropy(reduction=reduction)
