"""Model builders. Each returns an *uncompiled* ``keras.Model``.

Server and clients compile with their own optimizer; tests of a builder need no
training. Chosen by ``model.name`` in ``params.yaml``; the other ``model.*`` keys
are the dials of the zoo (depth, width, receptive field, normalization), passed to
:func:`build_model` as keyword settings. Each builder takes the settings it uses
and :func:`build_model` drops the rest, so one ``model`` section serves every
builder. ``small_cnn``, ``seed_cnn`` and ``mlp`` take no settings: their
architecture (and so their saved weights) is fixed.

The dials follow "Unlocking the Potential of Federated Learning for Deeper Models"
(2023), where divergence among client models accumulates layer by layer: deeper
models diverge more, wider models and smaller receptive fields diverge less. Layer
names carry the layer's position (``conv_03``, ``s2_b1_conv1``) so per-layer
diagnostics (:func:`layer_groups`) can plot divergence against depth.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from typing import NamedTuple, TypeGuard

import keras
import numpy as np
from keras import layers

from fedpipe.core.errors import SettingError

# --------------------------------------------------------------------------- #
# Settings: names, what each accepts, validation.
# --------------------------------------------------------------------------- #


def _is_int(value: object) -> TypeGuard[int]:
    """An integer (numpy's too), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> TypeGuard[float]:
    """A real number (numpy's too), but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


#: Every ``model.*`` setting a builder may take: (check, what is allowed).
_SETTINGS: dict[str, tuple[Callable[[object], bool], str]] = {
    "depth": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "width": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "kernel_size": (
        lambda v: _is_int(v) and v >= 1 and v % 2 == 1,
        "an odd integer >= 1 (1, 3, 5, ...)",
    ),
    "batch_norm": (lambda v: isinstance(v, bool | np.bool_), "true or false"),
    "head": (
        lambda v: v in ("gap", "flatten"),
        "gap (global average pooling) or flatten (a dense head on every position)",
    ),
    "blocks_per_stage": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "width_multiplier": (
        lambda v: _is_real(v) and np.isfinite(v) and v * 16 >= 1,
        "a number >= 0.0625 (stage widths 16/32/64 times it, at least 1 filter)",
    ),
    "dropout": (
        lambda v: _is_real(v) and 0.0 <= v < 1.0,
        "a number in [0, 1)",
    ),
}

#: The settings :func:`build_model` accepts, in alphabetical order.
SETTING_NAMES: tuple[str, ...] = tuple(sorted(_SETTINGS))


def _check(key: str, value: object) -> None:
    """Raise a ValueError naming ``model.<key>`` if ``value`` is not allowed."""
    if key not in _SETTINGS:
        allowed = ", ".join(SETTING_NAMES)
        raise SettingError(f"model.{key}: unknown setting; allowed: {allowed}")
    accepts, allowed = _SETTINGS[key]
    if not accepts(value):
        raise SettingError(f"model.{key}: got {value!r}; allowed: {allowed}")


def _check_all(**dials: object) -> None:
    """:func:`_check` each of a builder's ``dials``, in the order given."""
    for key, value in dials.items():
        _check(key, value)


def _spatial(name: str, input_shape: tuple[int, ...]) -> tuple[int | None, int | None]:
    """Height and width of an image input ``(height, width, channels)``."""
    if len(input_shape) != 3:
        raise SettingError(
            f"model.name: {name!r} needs image inputs (height, width, channels), "
            f"got input shape {tuple(input_shape)}; use mlp or deep_mlp for tables"
        )
    return input_shape[0], input_shape[1]


def _head(n_classes: int) -> layers.Layer:
    """Sigmoid unit for two classes, softmax over ``n_classes`` otherwise."""
    if n_classes == 2:
        return layers.Dense(1, activation="sigmoid", name="output")
    return layers.Dense(n_classes, activation="softmax", name="output")


# --------------------------------------------------------------------------- #
# Fixed models (versioned weights: do not change layers, order or names).
# --------------------------------------------------------------------------- #


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


# --------------------------------------------------------------------------- #
# The zoo: models with dials.
# --------------------------------------------------------------------------- #


def deep_mlp(
    input_shape: tuple[int, ...],
    n_classes: int,
    *,
    depth: int = 2,
    width: int = 64,
    dropout: float = 0.0,
) -> keras.Model:
    """A multilayer perceptron with ``depth`` hidden layers of ``width`` units.

    Layers: ``flatten``, then per hidden layer ``i`` (1-based, two digits)
    ``dense_i`` (relu, He-normal initialized) and, if ``dropout > 0``,
    ``dropout_i``; then ``output``. Works on any input shape (images are
    flattened), so also on tables.

    Parameters
    ----------
    input_shape : tuple of int
        Shape of one sample.
    n_classes : int
        Number of classes (2 means one sigmoid output).
    depth : int, default 2
        Number of hidden Dense layers, >= 1.
    width : int, default 64
        Units per hidden layer, >= 1.
    dropout : float, default 0.0
        Dropout rate after each hidden layer, in [0, 1); 0 adds no Dropout layer.
    """
    _check_all(depth=depth, width=width, dropout=dropout)
    stack: list[layers.Layer] = [
        keras.Input(shape=input_shape),
        layers.Flatten(name="flatten"),
    ]
    for i in range(1, depth + 1):
        stack.append(
            layers.Dense(
                width,
                activation="relu",
                kernel_initializer="he_normal",
                name=f"dense_{i:02d}",
            )
        )
        if dropout > 0:
            stack.append(layers.Dropout(float(dropout), name=f"dropout_{i:02d}"))
    stack.append(_head(n_classes))
    return keras.Sequential(stack, name="deep_mlp")


def cnn(
    input_shape: tuple[int, ...],
    n_classes: int,
    *,
    depth: int = 4,
    width: int = 32,
    kernel_size: int = 3,
    batch_norm: bool = False,
    head: str = "gap",
    dropout: float = 0.0,
) -> keras.Model:
    """A plain (VGG-style) CNN whose depth, width and receptive field are dials.

    Per conv layer ``i`` (1-based, two digits): ``conv_i`` (``width`` filters,
    ``kernel_size`` square kernel, 'same' padding, He-normal initialized, no bias
    when followed by batch norm), ``bn_i`` if ``batch_norm``, ``relu_i``. After
    every second conv layer a 2x2 max-pool ``pool_i`` halves the image, as long as
    both sides are still larger than 2 (so a deep CNN on a small image still
    builds: it stops pooling). Then ``gap`` (global average pooling) or, with
    ``head="flatten"``, ``flatten`` (the output layer sees every position, as in
    VGG: a shallow CNN is not held back by averaging away where a stroke is),
    ``dropout`` if ``dropout > 0``, and ``output``. Inputs of unknown size are
    assumed large enough to pool.

    Parameters
    ----------
    input_shape : tuple of int
        ``(height, width, channels)`` of one image.
    n_classes : int
        Number of classes (2 means one sigmoid output).
    depth : int, default 4
        Number of conv layers, >= 1.
    width : int, default 32
        Filters per conv layer, >= 1.
    kernel_size : int, default 3
        Side of the square kernels: odd, >= 1.
    batch_norm : bool, default False
        Put BatchNormalization after each conv; its moving statistics are
        (non-trainable) entries of ``model.get_weights()``.
    head : {"gap", "flatten"}, default "gap"
        What the output layer reads: the global average of each feature map, or
        the flattened maps (needs a known input size).
    dropout : float, default 0.0
        Dropout rate before the output layer, in [0, 1); 0 adds no Dropout layer.
    """
    _check_all(
        depth=depth,
        width=width,
        kernel_size=kernel_size,
        batch_norm=batch_norm,
        head=head,
        dropout=dropout,
    )
    height, side = _spatial("cnn", input_shape)
    conv = _ConvFactory(kernel_size=kernel_size, batch_norm=batch_norm)
    inputs = keras.Input(shape=input_shape, name="input")
    x = inputs
    for i in range(1, depth + 1):
        x = conv(x, width, f"conv_{i:02d}", f"bn_{i:02d}")
        x = layers.Activation("relu", name=f"relu_{i:02d}")(x)
        if i % 2 == 0 and _can_pool(height) and _can_pool(side):
            x = layers.MaxPooling2D(2, name=f"pool_{i:02d}")(x)
            height = None if height is None else height // 2
            side = None if side is None else side // 2
    if head == "flatten":
        x = layers.Flatten(name="flatten")(x)
    else:
        x = layers.GlobalAveragePooling2D(name="gap")(x)
    return _conv_model("cnn", inputs, x, n_classes, dropout)


def _conv_model(
    name: str,
    inputs: keras.KerasTensor,
    features: keras.KerasTensor,
    n_classes: int,
    dropout: float,
) -> keras.Model:
    """The model ``name`` from ``inputs`` to its ``features`` (pooled or
    flattened), then ``dropout`` if ``dropout > 0`` and the ``output`` layer."""
    if dropout > 0:
        features = layers.Dropout(float(dropout), name="dropout")(features)
    return keras.Model(inputs, _head(n_classes)(features), name=name)


def _can_pool(side: int | None) -> bool:
    """Whether a 2x2 max-pool may still halve a side (unknown: assume yes)."""
    return side is None or side > 2


def resnet(
    input_shape: tuple[int, ...],
    n_classes: int,
    *,
    blocks_per_stage: int = 2,
    width_multiplier: float = 1.0,
    kernel_size: int = 3,
    batch_norm: bool = True,
    dropout: float = 0.0,
) -> keras.Model:
    """A small ResNet (He et al. 2016, the CIFAR variant) with basic blocks.

    A stem conv (``stem_conv``, ``stem_bn``, ``stem_relu``), then 3 stages of
    ``blocks_per_stage`` basic blocks with ``16, 32, 64`` filters times
    ``width_multiplier``; the first block of stages 2 and 3 has stride 2. Block
    ``b`` of stage ``s`` is named ``s{s}_b{b}_*``: ``conv1``, ``bn1``, ``relu1``,
    ``conv2``, ``bn2``, a shortcut (identity, or a 1x1 ``proj`` conv and
    ``proj_bn`` where the shape changes), ``add`` and ``relu2``. Then ``gap``,
    ``dropout`` if ``dropout > 0``, and ``output``. Conv layers are He-normal
    initialized, without bias when followed by batch norm. With the defaults
    (2 blocks per stage) this is ResNet-14: 13 conv layers and the output.

    Parameters
    ----------
    input_shape : tuple of int
        ``(height, width, channels)`` of one image.
    n_classes : int
        Number of classes (2 means one sigmoid output).
    blocks_per_stage : int, default 2
        Basic blocks per stage, >= 1 (depth = 6 * blocks_per_stage + 2).
    width_multiplier : float, default 1.0
        Scales the stage widths 16/32/64 (rounded, at least 1 filter).
    kernel_size : int, default 3
        Side of the stem's and the blocks' square kernels (the receptive-field
        dial): odd, >= 1. Projection shortcuts stay 1x1.
    batch_norm : bool, default True
        BatchNormalization after every conv; its moving statistics are
        (non-trainable) entries of ``model.get_weights()``.
    dropout : float, default 0.0
        Dropout rate before the output layer, in [0, 1); 0 adds no Dropout layer.
    """
    _check_all(
        blocks_per_stage=blocks_per_stage,
        width_multiplier=width_multiplier,
        kernel_size=kernel_size,
        batch_norm=batch_norm,
        dropout=dropout,
    )
    _spatial("resnet", input_shape)
    widths = [max(1, round(base * width_multiplier)) for base in (16, 32, 64)]
    conv = _ConvFactory(kernel_size=kernel_size, batch_norm=bool(batch_norm))

    inputs = keras.Input(shape=input_shape, name="input")
    x = conv(inputs, widths[0], "stem_conv", "stem_bn")
    x = layers.Activation("relu", name="stem_relu")(x)
    for s, filters in enumerate(widths, start=1):
        for b in range(1, blocks_per_stage + 1):
            stride = 2 if s > 1 and b == 1 else 1
            x = _basic_block(x, filters, stride, f"s{s}_b{b}", conv)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    return _conv_model("resnet", inputs, x, n_classes, dropout)


class _ConvFactory:
    """Conv2D ('same', He-normal), then BatchNormalization if enabled."""

    def __init__(self, *, kernel_size: int, batch_norm: bool) -> None:
        self.kernel_size = kernel_size
        self.batch_norm = batch_norm

    def __call__(
        self,
        x: keras.KerasTensor,
        filters: int,
        conv_name: str,
        bn_name: str,
        *,
        stride: int = 1,
        kernel_size: int | None = None,
    ) -> keras.KerasTensor:
        x = layers.Conv2D(
            filters,
            self.kernel_size if kernel_size is None else kernel_size,
            strides=stride,
            padding="same",
            use_bias=not self.batch_norm,
            kernel_initializer="he_normal",
            name=conv_name,
        )(x)
        if self.batch_norm:
            x = layers.BatchNormalization(name=bn_name)(x)
        return x


def _basic_block(
    x: keras.KerasTensor, filters: int, stride: int, prefix: str, conv: _ConvFactory
) -> keras.KerasTensor:
    """Two convs plus a shortcut (identity, or 1x1 projection on shape change)."""
    y = conv(x, filters, f"{prefix}_conv1", f"{prefix}_bn1", stride=stride)
    y = layers.Activation("relu", name=f"{prefix}_relu1")(y)
    y = conv(y, filters, f"{prefix}_conv2", f"{prefix}_bn2")
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = conv(
            x,
            filters,
            f"{prefix}_proj",
            f"{prefix}_proj_bn",
            stride=stride,
            kernel_size=1,
        )
    y = layers.Add(name=f"{prefix}_add")([y, shortcut])
    return layers.Activation("relu", name=f"{prefix}_relu2")(y)


MODELS: dict[str, Callable[..., keras.Model]] = {
    "small_cnn": small_cnn,
    "seed_cnn": seed_cnn,
    "mlp": mlp,
    "deep_mlp": deep_mlp,
    "cnn": cnn,
    "resnet": resnet,
}


def model_settings(name: str) -> tuple[str, ...]:
    """The ``model.*`` settings the builder ``name`` takes (others are ignored).

    Parameters
    ----------
    name : str
        A key of :data:`MODELS`.

    Returns
    -------
    tuple of str
        Keyword-only parameter names of the builder, in signature order; empty
        for the fixed models (``small_cnn``, ``seed_cnn``, ``mlp``).
    """
    builder = _builder(name)
    return tuple(
        p.name
        for p in inspect.signature(builder).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )


def _builder(name: str) -> Callable[..., keras.Model]:
    try:
        return MODELS[name]
    except KeyError:
        allowed = ", ".join(sorted(MODELS))
        raise SettingError(
            f"model.name: unknown {name!r}; allowed: {allowed}"
        ) from None


def build_model(
    name: str, input_shape: tuple[int, ...], n_classes: int, **settings: object
) -> keras.Model:
    """Build the uncompiled model registered under ``name``.

    Parameters
    ----------
    name : str
        ``model.name``: a key of :data:`MODELS`.
    input_shape : tuple of int
        Shape of one sample.
    n_classes : int
        Number of classes, >= 2 (2 means one sigmoid output).
    **settings
        ``model.*`` values, any of :data:`SETTING_NAMES`. ``None`` means the
        builder's default. Every given value is validated, but only those the
        builder takes (:func:`model_settings`) are passed on; the rest are
        ignored, so one ``model`` section serves every builder.

    Returns
    -------
    keras.Model
        Uncompiled; named ``name``.

    Raises
    ------
    ValueError
        Unknown name, fewer than 2 classes, an unknown setting or a bad value;
        the message names the ``model.*`` key and what is allowed.
    """
    if n_classes < 2:
        raise SettingError(f"a classifier needs at least 2 classes, got {n_classes}")
    if ":" in name:
        return _user_model(name, tuple(input_shape), n_classes, settings)
    builder = _builder(name)
    given = {key: value for key, value in settings.items() if value is not None}
    for key, value in given.items():
        _check(key, value)
    takes = model_settings(name)
    used = {key: value for key, value in given.items() if key in takes}
    return builder(tuple(input_shape), n_classes, **used)


def _user_model(
    name: str,
    input_shape: tuple[int, ...],
    n_classes: int,
    settings: dict[str, object],
) -> keras.Model:
    """A model from the user's own builder (``model.name: file.py:function``).

    The function is called as ``function(input_shape, n_classes, **settings)``
    with the ``model.*`` settings that are set (and ``model.options``) that its
    signature takes (all of them if it takes ``**kwargs``). It must return an
    uncompiled ``keras.Model``.

    Raises
    ------
    ParamsError
        The reference does not resolve, the builder fails, or it returns
        something other than a Keras model.
    """
    from fedpipe.config.params import ParamsError
    from fedpipe.core.plugins import load_object

    builder = load_object(name, key="model.name")
    if not callable(builder):
        raise ParamsError(
            f"params.yaml: model.name={name!r} is a {type(builder).__name__}, not a "
            "function returning a keras.Model"
        )
    given = {k: v for k, v in settings.items() if v is not None}
    try:
        params = inspect.signature(builder).parameters.values()
    except (TypeError, ValueError):
        params = ()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        names = {p.name for p in params}
        given = {k: v for k, v in given.items() if k in names}
    try:
        model = builder(input_shape, n_classes, **given)
    except Exception as exc:
        raise ParamsError(
            f"params.yaml: model.name={name!r}: calling it with input shape "
            f"{input_shape} and {n_classes} classes failed: {type(exc).__name__}: "
            f"{exc}"
        ) from None
    if not isinstance(model, keras.Model):
        raise ParamsError(
            f"params.yaml: model.name={name!r} returned {type(model).__name__} "
            f"{str(model)[:40]!r}; "
            "allowed: an uncompiled keras.Model"
        )
    return model


# --------------------------------------------------------------------------- #
# Inspection.
# --------------------------------------------------------------------------- #


def layer_groups(model: keras.Model) -> list[tuple[str, list[int]]]:
    """Which entries of ``model.get_weights()`` belong to which layer.

    Parameters
    ----------
    model : keras.Model
        A built model.

    Returns
    -------
    list of (str, list of int)
        For each weight-bearing layer, in model order: its name and the indices
        of its variables (trainable and non-trainable, e.g. batch-norm moving
        statistics) in the flat list ``model.get_weights()``. Layers without
        weights are left out; a layer reused in several places is listed once.
        Together the indices cover every weight exactly once, in order.
        Functional models list layers in Keras's graph order, so a ResNet's
        projection shortcut (``s2_b1_proj``) sits between its block's convs: read
        a layer's stage and block from its name, not from its position.
    """
    index = {id(var): i for i, var in enumerate(model.weights)}
    seen: set[int] = set()
    groups: list[tuple[str, list[int]]] = []
    for layer in model.layers:
        ids = [index[id(v)] for v in layer.weights if index[id(v)] not in seen]
        if ids:
            seen.update(ids)
            groups.append((layer.name, ids))
    missing = sorted(set(range(len(index))) - seen)
    if missing:  # variables owned by the model itself, not by a layer
        groups.append((model.name, missing))
    return groups


class LayerInfo(NamedTuple):
    """One weight-bearing layer: see :func:`layer_info`."""

    name: str
    indices: list[int]
    kind: str
    trainable: list[int]


def layer_kind(layer: keras.layers.Layer) -> str:
    """``dense``, ``conv``, ``norm`` (batch/layer/group normalization) or ``other``."""
    names = [cls.__name__ for cls in type(layer).__mro__]
    if any("Normalization" in n for n in names):
        return "norm"
    if any("Conv" in n for n in names):
        return "conv"
    if any(n in ("Dense", "EinsumDense") for n in names):
        return "dense"
    return "other"


def layer_info(model: keras.Model) -> list[LayerInfo]:
    """:func:`layer_groups` with each layer's kind and trainable indices.

    Parameters
    ----------
    model : keras.Model
        A built model.

    Returns
    -------
    list of LayerInfo
        ``(name, indices, kind, trainable)`` per weight-bearing layer, in the
        order of :func:`layer_groups`; ``kind`` from :func:`layer_kind` (``other``
        for variables owned by the model itself); ``trainable`` the subset of
        ``indices`` that are trainable variables (a batch norm's moving mean and
        variance are not). What :func:`fedpipe.federation.health.round_health` takes.
    """
    trainable_ids = {id(v) for v in model.trainable_variables}
    position_trainable = {
        i for i, v in enumerate(model.weights) if id(v) in trainable_ids
    }
    kinds = {layer.name: layer_kind(layer) for layer in model.layers}
    return [
        LayerInfo(
            name,
            indices,
            kinds.get(name, "other"),
            [i for i in indices if i in position_trainable],
        )
        for name, indices in layer_groups(model)
    ]


def describe_model(model: keras.Model) -> str:
    """One line: name, parameter counts and the number of weight-bearing layers.

    Parameters
    ----------
    model : keras.Model
        A built model.

    Returns
    -------
    str
        E.g. ``"cnn: 28,394 parameters (28,394 trainable), 5 weight-bearing
        layers"`` (cnn at its defaults on 28x28x1, 10 classes). Non-trainable
        parameters are batch-norm moving statistics.
    """
    total = _n_params(model.weights)
    trainable = _n_params(model.trainable_weights)
    n_layers = len(layer_groups(model))
    return (
        f"{model.name}: {total:,} parameters ({trainable:,} trainable), "
        f"{n_layers} weight-bearing layers"
    )


def _n_params(variables: list[keras.Variable]) -> int:
    return int(sum(int(np.prod(v.shape)) for v in variables))


def loss_for(n_classes: int, *, per_sample: bool = False) -> keras.losses.Loss:
    """The loss matching :func:`_head`: mean over the batch, or per sample.

    Keras computes it from the logits kept by the final sigmoid/softmax, so a
    confidently wrong prediction has an unbounded loss (see NOTES on logits).
    """
    reduction = None if per_sample else "sum_over_batch_size"
    if n_classes == 2:
        return keras.losses.BinaryCrossentropy(reduction=reduction)
    return keras.losses.SparseCategoricalCrossentropy(reduction=reduction)


def normalization_layers(model: keras.Model) -> list[str]:
    """Names of the model's normalization layers (what FedBN keeps local)."""
    return [
        layer.name
        for layer in model.layers
        if layer_kind(layer) == "norm" and layer.weights
    ]
