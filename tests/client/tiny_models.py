"""A model small enough to compute its training by hand: logistic regression."""

from __future__ import annotations

import keras


def logistic(input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """One sigmoid unit on the flattened input (two classes)."""
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            keras.layers.Flatten(),
            keras.layers.Dense(1, activation="sigmoid", name="output"),
        ]
    )
