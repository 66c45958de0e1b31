"""Dead ReLU units of a model, from one forward pass over a small probe batch.

A unit (a dense layer's output, a convolution's channel) is dead when its ReLU
output is 0 for every probe sample (and every position): no gradient reaches its
weights, so training cannot revive it. A layer that is all dead cuts the model in
two; a model whose bias went hugely negative ends up there. :func:`dead_unit_shares`
gives the share of dead units per ReLU layer for the health record
(:func:`fedpipe.federation.health.round_health`).

The probe model (the same layers, outputs at every ReLU) is built once per Keras
model and kept with it; the pass runs with ``training=False``, so it draws no
random numbers and leaves the weights and every seed as they were.
"""

from __future__ import annotations

import weakref
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from fedpipe.model.graph import compiled

#: held-out samples in the probe batch: enough that a unit alive on a few inputs
#: shows it, small enough that the pass costs a fraction of the evaluation
PROBE_SAMPLES = 64

_probes: weakref.WeakKeyDictionary[Any, tuple[list[str], Any]] = (
    weakref.WeakKeyDictionary()
)


def _is_relu(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` outputs a ReLU (its activation, a ReLU or Activation layer)."""
    if isinstance(layer, keras.layers.ReLU):
        return True
    activation = getattr(layer, "activation", None)
    return activation is keras.activations.relu or (
        getattr(activation, "__name__", "") == "relu"
    )


def relu_probe(model: keras.Model) -> tuple[list[str], Any]:
    """The names of ``model``'s ReLU layers and a compiled function returning
    their outputs (None when it has none or its graph cannot be tapped), built
    once per model."""
    if model not in _probes:
        names = [layer.name for layer in model.layers if _is_relu(layer)]
        probe = None
        if names:
            try:
                one = len(model.inputs) == 1
                tapped = keras.Model(
                    inputs=model.inputs[0] if one else model.inputs,
                    outputs=[model.get_layer(n).output for n in names],
                )
                probe = compiled(
                    lambda x: tapped(x, training=False), reduce_retracing=True
                )
            except (AttributeError, ValueError):  # a subclassed model: no graph
                names, probe = [], None
        _probes[model] = (names, probe)
    return _probes[model]


def dead_unit_shares(
    model: keras.Model, x: np.ndarray
) -> dict[str, float | None] | None:
    """Share of units of each ReLU layer whose output is 0 on every row of ``x``.

    Parameters
    ----------
    model : keras.Model
        A built model holding the weights to probe (``set_weights`` done).
    x : ndarray
        The probe batch, as the model takes it.

    Returns
    -------
    dict of str to float or None
        Layer name -> dead share in [0, 1] (None for every layer when a weight
        is NaN/inf: broken, not dead); None for a model without ReLU layers or
        an empty batch.
    """
    names, probe = relu_probe(model)
    if probe is None or len(x) == 0:
        return None
    if not all(np.isfinite(v.numpy()).all() for v in model.weights):
        # NaN weights are broken, not dead (a ReLU turns NaN into 0)
        return dict.fromkeys(names)
    outputs = probe(tf.constant(np.asarray(x)))
    if not isinstance(outputs, list | tuple):
        outputs = [outputs]
    shares: dict[str, float | None] = {}
    for name, out in zip(names, outputs, strict=True):
        a = np.asarray(out)
        alive = np.any(a.reshape(-1, a.shape[-1]) > 0, axis=0)
        shares[name] = float(1.0 - alive.mean())
    return shares
