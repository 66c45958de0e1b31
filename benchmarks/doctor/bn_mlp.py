"""A user's own model for the corpus: a small MLP with BatchNormalization.

Copied into each project that names it (``model.name: bn_mlp.py:bn_mlp``), as a
user's model file would be. The built-in batch-norm models are convolutional;
the corpus's data-side plants are tables, so this is their batch-norm model.
"""

from __future__ import annotations

import keras
from keras import layers


def bn_mlp(input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """Dense 32 -> BatchNorm -> relu, twice, then a sigmoid / softmax output."""
    stack: list[layers.Layer] = [keras.Input(shape=input_shape)]
    for i in (1, 2):
        stack += [
            layers.Dense(32, name=f"dense_{i}"),
            layers.BatchNormalization(name=f"bn_{i}"),
            layers.Activation("relu", name=f"relu_{i}"),
        ]
    head = (
        layers.Dense(1, activation="sigmoid", name="output")
        if n_classes == 2
        else layers.Dense(n_classes, activation="softmax", name="output")
    )
    return keras.Sequential([*stack, head], name="bn_mlp")
