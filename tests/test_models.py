"""Tests for fedpipe.models: builders return uncompiled models of the right shape."""

from __future__ import annotations

import keras
import pytest

from fedpipe.models import MODELS, build_model

MNIST = (28, 28, 1)


def _is_uncompiled(model: keras.Model) -> bool:
    return model.compiled is False and getattr(model, "optimizer", None) is None


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


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ten_classes_softmax_head(name: str) -> None:
    model = build_model(name, MNIST, 10)
    assert model.input_shape == (None, 28, 28, 1)
    assert model.output_shape == (None, 10)
    assert model.layers[-1].activation is keras.activations.softmax


@pytest.mark.parametrize("name", sorted(MODELS))
def test_two_classes_single_sigmoid_unit(name: str) -> None:
    model = build_model(name, MNIST, 2)
    assert model.output_shape == (None, 1)
    assert model.layers[-1].activation is keras.activations.sigmoid


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


def test_unknown_model_names_the_key() -> None:
    with pytest.raises(ValueError) as info:
        build_model("resnet", MNIST, 10)
    msg = str(info.value)
    assert "model.name" in msg
    assert "'resnet'" in msg
    assert "mlp, seed_cnn, small_cnn" in msg


@pytest.mark.parametrize("n_classes", [1, 0])
def test_fewer_than_two_classes_is_rejected(n_classes: int) -> None:
    with pytest.raises(ValueError, match=f"at least 2 classes, got {n_classes}"):
        build_model("mlp", MNIST, n_classes)
