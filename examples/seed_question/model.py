"""The seed question's model, as its author would bring it to fedpipe.

The question ("Federated Learning - Why does Global Model goes to 10k+?") shows
``createModel()``: three 3x3 convolutions (32, 64, 64 filters) with max-pooling
after the first two, a dense layer of 64, dropout 0.3 and one sigmoid unit for its
two classes (mask / no mask), compiled with Adam and binary cross-entropy.

Two changes make it a fedpipe model builder, and nothing else changes:

* it takes ``(input_shape, n_classes)`` from the data (``data.image_size`` and
  ``data.color_mode`` decide the shape) instead of a fixed ``shape=(100,100,3)``;
* it returns the model **uncompiled** and sets no global seed: fedpipe compiles it
  with ``train.optimizer`` / ``train.lr`` (Adam, 0.001 is the question's
  ``optimizer='adam'``), picks binary cross-entropy for a sigmoid output, computes
  recall, precision, AUC and accuracy itself, and seeds the initial weights from
  the ``seed`` param (the question's ``tf.random.set_seed(3333)``).

Use it with ``model.name: examples/seed_question/model.py:createModel``.
"""

from __future__ import annotations

import keras
from keras import layers


def createModel(input_shape: tuple[int, ...], n_classes: int) -> keras.Model:
    """The question's CNN for images of ``input_shape`` and two classes (the
    camel-case name is the question's own)."""
    if n_classes != 2:
        raise ValueError(
            f"this is the question's binary model (one sigmoid unit); the data "
            f"has {n_classes} classes. Use two class folders, or a built-in "
            "model (model.name: seed_cnn adapts its output)"
        )
    model = keras.Sequential(name="seed_question")
    model.add(keras.Input(shape=input_shape))
    model.add(layers.Conv2D(32, (3, 3), activation="relu"))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Conv2D(64, (3, 3), activation="relu"))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Conv2D(64, (3, 3), activation="relu"))
    model.add(layers.Flatten())
    model.add(layers.Dense(64, activation="relu"))
    model.add(layers.Dropout(0.3))
    model.add(layers.Dense(1, activation="sigmoid"))
    return model
