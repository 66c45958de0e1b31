"""examples/seed_question: the question's own createModel() as a model builder."""

from __future__ import annotations

from pathlib import Path

import keras
import pytest

from fedpipe.config.params import ParamsError
from fedpipe.model.zoo import build_model

ROOT = Path(__file__).resolve().parents[2]
MODEL = "examples/seed_question/model.py:createModel"


@pytest.fixture(autouse=True)
def _project_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # references are relative to the project root


def test_builds_the_question_architecture_uncompiled() -> None:
    model = build_model(MODEL, (100, 100, 3), 2)
    assert isinstance(model, keras.Model) and not model.compiled
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds == [
        "Conv2D",
        "MaxPooling2D",
        "Conv2D",
        "MaxPooling2D",
        "Conv2D",
        "Flatten",
        "Dense",
        "Dropout",
        "Dense",
    ]
    assert [layer.filters for layer in model.layers if hasattr(layer, "filters")] == [
        32,
        64,
        64,
    ]
    assert model.layers[-3].units == 64 and model.layers[-2].rate == 0.3
    assert model.layers[-1].units == 1
    assert model.layers[-1].activation.__name__ == "sigmoid"
    assert model.output_shape == (None, 1)
    # the same network as the built-in seed_cnn
    assert (
        model.count_params() == build_model("seed_cnn", (100, 100, 3), 2).count_params()
    )


def test_takes_the_data_shape() -> None:
    assert build_model(MODEL, (24, 24, 1), 2).input_shape == (None, 24, 24, 1)


def test_more_than_two_classes_is_a_params_error_naming_the_key() -> None:
    with pytest.raises(ParamsError, match="model.name=.*binary model"):
        build_model(MODEL, (24, 24, 3), 3)
