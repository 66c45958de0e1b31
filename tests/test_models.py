"""Tests for fedpipe.model.zoo: builders return uncompiled models of the right shape,
the zoo's dials change the architecture as documented, and the inspection helpers
map the flat weight list back to layers."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest

from fedpipe.model.zoo import (
    MODELS,
    SETTING_NAMES,
    build_model,
    cnn,
    describe_model,
    layer_groups,
    loss_for,
    model_settings,
)

MNIST = (28, 28, 1)
CIFAR = (32, 32, 3)
TINY = (8, 8, 1)
FIXED = ("small_cnn", "seed_cnn", "mlp")

# Exact weight shapes on 28x28x1 / 10 classes. Their weight files are versioned:
# if this fails, an architecture changed by accident.
FIXED_WEIGHT_SHAPES = {
    "small_cnn": [(3, 3, 1, 32), (32,), (3, 3, 32, 64), (64,), (1600, 10), (10,)],
    "seed_cnn": [
        (3, 3, 1, 32),
        (32,),
        (3, 3, 32, 64),
        (64,),
        (3, 3, 64, 64),
        (64,),
        (576, 64),
        (64,),
        (64, 10),
        (10,),
    ],
    "mlp": [(784, 32), (32,), (32, 10), (10,)],
}


def _is_uncompiled(model: keras.Model) -> bool:
    return model.compiled is False and getattr(model, "optimizer", None) is None


def _n_params(name: str, shape: tuple[int, ...] = TINY, **settings: object) -> int:
    return build_model(name, shape, 10, **settings).count_params()


def _groups_named(model: keras.Model, pattern: str) -> list[str]:
    """Names of the weight-bearing layers whose name matches ``pattern``."""
    return [name for name, _ in layer_groups(model) if re.fullmatch(pattern, name)]


def _layers_of(model: keras.Model, kind: type[keras.layers.Layer]) -> list[str]:
    return [layer.name for layer in model.layers if isinstance(layer, kind)]


# --- every builder ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_builder_returns_uncompiled_model(name: str) -> None:
    model = MODELS[name](MNIST, 10)
    assert isinstance(model, keras.Model)
    assert _is_uncompiled(model)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_build_model_returns_uncompiled_model(name: str) -> None:
    model = build_model(name, MNIST, 10)
    assert model.name == name
    assert _is_uncompiled(model)


@pytest.mark.parametrize("input_shape", [MNIST, CIFAR])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_ten_classes_softmax_head(name: str, input_shape: tuple[int, ...]) -> None:
    model = build_model(name, input_shape, 10)
    assert _is_uncompiled(model)
    assert model.input_shape == (None, *input_shape)
    assert model.output_shape == (None, 10)
    assert model.layers[-1].name == "output"
    assert model.layers[-1].activation is keras.activations.softmax


@pytest.mark.parametrize("input_shape", [MNIST, CIFAR])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_two_classes_single_sigmoid_unit(
    name: str, input_shape: tuple[int, ...]
) -> None:
    model = build_model(name, input_shape, 2)
    assert _is_uncompiled(model)
    assert model.output_shape == (None, 1)
    assert model.layers[-1].name == "output"
    assert model.layers[-1].activation is keras.activations.sigmoid


@pytest.mark.parametrize(
    "settings", [{}, {"batch_norm": True}], ids=["defaults", "batch_norm"]
)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_layer_groups_cover_every_weight_once_in_order(
    name: str, settings: dict[str, object]
) -> None:
    model = build_model(name, MNIST, 10, **settings)
    groups = layer_groups(model)
    flat = [i for _, indices in groups for i in indices]
    assert flat == list(range(len(model.get_weights())))
    names = [layer_name for layer_name, _ in groups]
    assert len(set(names)) == len(names)
    assert names[-1] == "output"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_describe_model_is_one_line_with_counts(name: str) -> None:
    model = build_model(name, MNIST, 10)
    line = describe_model(model)
    total = model.count_params()
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    assert "\n" not in line
    assert line == (
        f"{name}: {total:,} parameters ({trainable:,} trainable), "
        f"{len(layer_groups(model))} weight-bearing layers"
    )


# --- fixed models ---------------------------------------------------------------


@pytest.mark.parametrize("name", FIXED)
def test_fixed_models_keep_their_weight_shapes(name: str) -> None:
    model = build_model(name, MNIST, 10)
    assert [tuple(w.shape) for w in model.get_weights()] == FIXED_WEIGHT_SHAPES[name]


@pytest.mark.parametrize("name", FIXED)
def test_fixed_models_take_no_settings_and_ignore_them(name: str) -> None:
    assert model_settings(name) == ()
    model = build_model(name, MNIST, 10, depth=8, width=128, batch_norm=True)
    assert [tuple(w.shape) for w in model.get_weights()] == FIXED_WEIGHT_SHAPES[name]


@pytest.mark.parametrize(
    ("input_shape", "n_classes", "expected"),
    [(MNIST, 10, (None, 10)), ((100, 100, 3), 2, (None, 1))],
)
def test_seed_cnn_adapts_to_input_shape(
    input_shape: tuple[int, ...], n_classes: int, expected: tuple[int | None, ...]
) -> None:
    model = build_model("seed_cnn", input_shape, n_classes)
    assert model.input_shape == (None, *input_shape)
    assert model.output_shape == expected


def test_seed_cnn_has_dropout() -> None:
    model = build_model("seed_cnn", MNIST, 10)
    dropout = model.get_layer("dropout")
    assert isinstance(dropout, keras.layers.Dropout)
    assert dropout.rate == 0.3


# --- the dials --------------------------------------------------------------------


def test_settings_each_builder_takes() -> None:
    assert model_settings("deep_mlp") == ("depth", "width", "dropout")
    assert model_settings("cnn") == (
        "depth",
        "width",
        "kernel_size",
        "batch_norm",
        "head",
        "dropout",
    )
    assert model_settings("resnet") == (
        "blocks_per_stage",
        "width_multiplier",
        "kernel_size",
        "batch_norm",
        "dropout",
    )
    taken = {key for name in MODELS for key in model_settings(name)}
    assert taken == set(SETTING_NAMES)


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_cnn_depth_sets_the_number_of_conv_layers(depth: int) -> None:
    model = build_model("cnn", TINY, 10, depth=depth)
    expected = [f"conv_{i:02d}" for i in range(1, depth + 1)]
    assert _groups_named(model, r"conv_\d+") == expected


def test_cnn_defaults() -> None:
    model = build_model("cnn", MNIST, 10)
    conv = model.get_layer("conv_01")
    assert len(_groups_named(model, r"conv_\d+")) == 4
    assert conv.filters == 32
    assert conv.kernel_size == (3, 3)
    assert conv.padding == "same"
    assert _layers_of(model, keras.layers.BatchNormalization) == []
    assert _layers_of(model, keras.layers.Dropout) == []
    assert _layers_of(model, keras.layers.MaxPooling2D) == ["pool_02", "pool_04"]


def test_cnn_flatten_head_reads_every_position() -> None:
    gap = build_model("cnn", MNIST, 10, depth=2, width=8)
    flat = build_model("cnn", MNIST, 10, depth=2, width=8, head="flatten")
    assert "gap" in [layer.name for layer in gap.layers]
    assert "flatten" in [layer.name for layer in flat.layers]
    # 28x28 pooled once to 14x14, 8 maps: the output layer sees 1,568 inputs
    assert flat.get_layer("output").kernel.shape == (14 * 14 * 8, 10)
    assert gap.get_layer("output").kernel.shape == (8, 10)


def test_cnn_unknown_head_names_the_key() -> None:
    with pytest.raises(ValueError, match="model.head.*gap.*flatten"):
        build_model("cnn", MNIST, 10, head="dense")


def test_cnn_width_doubled_grows_parameters() -> None:
    assert _n_params("cnn", width=64) > _n_params("cnn", width=32)


def test_cnn_bigger_kernel_grows_parameters() -> None:
    assert _n_params("cnn", kernel_size=5) > _n_params("cnn", kernel_size=3)
    model = build_model("cnn", TINY, 10, kernel_size=5)
    assert model.get_layer("conv_02").kernel.shape == (5, 5, 32, 32)


def test_cnn_too_deep_for_the_image_still_builds_and_stops_pooling() -> None:
    model = build_model("cnn", TINY, 10, depth=8)
    assert model.output_shape == (None, 10)
    # 8 -> 4 -> 2, then no more pooling
    assert _layers_of(model, keras.layers.MaxPooling2D) == ["pool_02", "pool_04"]
    probs = model(np.zeros((1, *TINY), np.float32), training=False)
    assert probs.shape == (1, 10)


def test_cnn_batch_norm_moving_stats_are_weights() -> None:
    model = build_model("cnn", TINY, 10, depth=3, batch_norm=True)
    assert _layers_of(model, keras.layers.BatchNormalization) == [
        "bn_01",
        "bn_02",
        "bn_03",
    ]
    groups = dict(layer_groups(model))
    bn_paths = [model.weights[i].path for i in groups["bn_02"]]
    assert [p.rsplit("/", 1)[-1] for p in bn_paths] == [
        "gamma",
        "beta",
        "moving_mean",
        "moving_variance",
    ]
    assert len(model.get_weights()) == len(model.weights)
    assert len(model.non_trainable_weights) == 2 * 3
    # a conv followed by batch norm needs no bias
    assert groups["conv_01"] == [0]


def test_cnn_dropout_before_the_head() -> None:
    model = build_model("cnn", TINY, 10, dropout=0.25)
    assert model.get_layer("dropout").rate == 0.25
    assert model.layers[-2].name == "dropout"


def test_deep_mlp_depth_width_and_dropout() -> None:
    model = build_model("deep_mlp", MNIST, 10)
    assert _groups_named(model, r"dense_\d+") == ["dense_01", "dense_02"]
    assert model.get_layer("dense_01").units == 64
    assert _layers_of(model, keras.layers.Dropout) == []

    deeper = build_model("deep_mlp", TINY, 10, depth=5, width=16, dropout=0.2)
    assert len(_groups_named(deeper, r"dense_\d+")) == 5
    assert len(_layers_of(deeper, keras.layers.Dropout)) == 5
    assert _n_params("deep_mlp", width=128) > _n_params("deep_mlp", width=64)


def test_deep_mlp_works_on_tables() -> None:
    assert build_model("deep_mlp", (13,), 3).output_shape == (None, 3)


def _resnet_convs(model: keras.Model) -> list[str]:
    return _groups_named(model, r"stem_conv|s\d_b\d_conv\d")


def test_resnet_blocks_per_stage_sets_depth() -> None:
    one = build_model("resnet", TINY, 10, blocks_per_stage=1)
    two = build_model("resnet", TINY, 10)
    # 6 * blocks_per_stage convs in blocks, plus the stem
    assert len(_resnet_convs(one)) == 7
    assert len(_resnet_convs(two)) == 13
    # projection shortcuts where the width and stride change: stages 2 and 3
    assert _groups_named(two, r".*_proj") == ["s2_b1_proj", "s3_b1_proj"]
    assert len(layer_groups(two)) > len(layer_groups(one))
    assert two.count_params() > one.count_params()


def test_resnet_defaults() -> None:
    model = build_model("resnet", MNIST, 10)
    assert model.get_layer("stem_conv").filters == 16
    assert model.get_layer("s1_b1_conv1").filters == 16
    assert model.get_layer("s2_b1_conv1").filters == 32
    assert model.get_layer("s3_b2_conv2").filters == 64
    assert model.get_layer("s2_b1_conv1").strides == (2, 2)
    assert model.get_layer("s3_b1_conv1").strides == (2, 2)
    assert model.get_layer("s2_b2_conv1").strides == (1, 1)
    assert model.get_layer("s1_b1_conv1").kernel_size == (3, 3)
    assert model.get_layer("s2_b1_proj").kernel_size == (1, 1)
    # 7x7 left of 28x28 after two stride-2 stages
    assert model.get_layer("s3_b2_relu2").output.shape == (None, 7, 7, 64)
    assert len(_layers_of(model, keras.layers.BatchNormalization)) == 15


def test_resnet_width_multiplier_and_kernel() -> None:
    wide = build_model("resnet", TINY, 10, blocks_per_stage=1, width_multiplier=2)
    assert wide.get_layer("s3_b1_conv2").filters == 128
    base = _n_params("resnet", blocks_per_stage=1)
    assert wide.count_params() > base
    assert _n_params("resnet", blocks_per_stage=1, kernel_size=5) > base
    narrow = build_model("resnet", TINY, 10, blocks_per_stage=1, width_multiplier=0.5)
    assert narrow.get_layer("stem_conv").filters == 8


def test_resnet_without_batch_norm() -> None:
    model = build_model("resnet", TINY, 10, blocks_per_stage=1, batch_norm=False)
    assert _layers_of(model, keras.layers.BatchNormalization) == []
    assert model.get_layer("stem_conv").use_bias
    assert model.non_trainable_weights == []


def test_none_means_the_builders_default() -> None:
    assert _n_params("cnn", depth=None, width=None) == _n_params("cnn")


# --- validation -----------------------------------------------------------------


def test_unknown_model_names_the_key() -> None:
    with pytest.raises(ValueError) as info:
        build_model("transformer", MNIST, 10)
    msg = str(info.value)
    assert "model.name" in msg
    assert "'transformer'" in msg
    assert "cnn, deep_mlp, mlp, resnet, seed_cnn, small_cnn" in msg


@pytest.mark.parametrize("n_classes", [1, 0])
def test_fewer_than_two_classes_is_rejected(n_classes: int) -> None:
    with pytest.raises(ValueError, match=f"at least 2 classes, got {n_classes}"):
        build_model("mlp", MNIST, n_classes)


@pytest.mark.parametrize(
    ("name", "key", "value", "allowed"),
    [
        ("cnn", "depth", 0, "integer >= 1"),
        ("cnn", "depth", 2.5, "integer >= 1"),
        ("cnn", "depth", True, "integer >= 1"),
        ("deep_mlp", "width", 0, "integer >= 1"),
        ("cnn", "kernel_size", 4, "odd integer >= 1"),
        ("cnn", "kernel_size", 0, "odd integer >= 1"),
        ("cnn", "batch_norm", "yes", "true or false"),
        ("resnet", "blocks_per_stage", 0, "integer >= 1"),
        ("resnet", "width_multiplier", 0, "number >= 0.0625"),
        ("deep_mlp", "dropout", 1.0, "in [0, 1)"),
        ("cnn", "dropout", -0.1, "in [0, 1)"),
        # validated even where the builder ignores the setting
        ("mlp", "depth", 0, "integer >= 1"),
    ],
)
def test_bad_settings_name_the_key_and_what_is_allowed(
    name: str, key: str, value: object, allowed: str
) -> None:
    with pytest.raises(ValueError) as info:
        build_model(name, TINY, 10, **{key: value})
    msg = str(info.value)
    assert msg.startswith(f"model.{key}: got {value!r}; allowed:")
    assert allowed in msg


def test_builders_validate_when_called_directly() -> None:
    with pytest.raises(ValueError, match="model.kernel_size"):
        cnn(TINY, 10, kernel_size=2)


def test_unknown_setting_names_the_key() -> None:
    with pytest.raises(ValueError) as info:
        build_model("cnn", TINY, 10, depht=3)
    msg = str(info.value)
    assert msg.startswith("model.depht: unknown setting; allowed:")
    assert ", ".join(SETTING_NAMES) in msg


@pytest.mark.parametrize("name", ["cnn", "resnet"])
def test_image_models_reject_tables(name: str) -> None:
    with pytest.raises(ValueError, match=r"model.name: .*needs image inputs"):
        build_model(name, (13,), 2)


# --- smoke fit --------------------------------------------------------------------


def test_cnn_with_batch_norm_trains_one_step() -> None:
    keras.utils.set_random_seed(0)
    model = build_model("cnn", TINY, 10, depth=2, width=8, batch_norm=True)
    model.compile(optimizer="sgd", loss=loss_for(10))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, *TINY)).astype(np.float32)
    y = rng.integers(0, 10, size=8)
    moving_mean = model.get_layer("bn_01").moving_mean.numpy().copy()
    kernel = model.get_layer("conv_01").kernel.numpy().copy()

    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)

    assert np.isfinite(history.history["loss"][0])
    assert not np.allclose(model.get_layer("conv_01").kernel.numpy(), kernel)
    assert not np.allclose(model.get_layer("bn_01").moving_mean.numpy(), moving_mean)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("batch_norm", [None, True, False])
def test_the_registry_knows_which_built_in_models_normalize(
    name: str, batch_norm: bool | None
) -> None:
    """What lets params refuse fedbn before any stage runs
    (fedpipe.core.registry.has_normalization) is what the built model has."""
    from fedpipe.core.registry import has_normalization
    from fedpipe.model.zoo import build_model, model_settings, normalization_layers

    settings = (
        {"batch_norm": batch_norm} if "batch_norm" in model_settings(name) else {}
    )
    model = build_model(name, (32, 32, 3), 10, **settings)
    expected = bool(normalization_layers(model))
    assert has_normalization(name, {"batch_norm": batch_norm}) is expected, name


def test_fedbn_with_a_model_without_normalization_is_refused_in_params() -> None:
    from fedpipe.config.params import ParamsError, parse_params

    raw = {"personalization": {"method": "fedbn"}, "model": {"name": "mlp"},
           "federation": {"rounds": 1}, "round_chain": {"1": 0}}  # fmt: skip
    with pytest.raises(ParamsError, match=r"fedbn .* model.name=mlp has none"):
        parse_params(raw)
    raw["model"] = {"name": "cnn", "batch_norm": True}
    assert parse_params(raw).personalization.method == "fedbn"
