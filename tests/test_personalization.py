"""Personalization methods: which weights stay on a client, and what it trains."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.config import ParamsError, parse_params
from fedpipe.personalization import (
    NO_PERSONALIZATION,
    kept_arrays,
    resolve,
    with_kept_arrays,
)

# a model of three weight-bearing layers: dense (0, 1), batch norm (2..5), head (6, 7)
GROUPS = [("dense", [0, 1]), ("bn", [2, 3, 4, 5]), ("head", [6, 7])]
NORMS = ["bn"]


def _weights(value: float) -> list[np.ndarray]:
    return [np.full((2,), value + j, np.float32) for j in range(8)]


def test_fedper_keeps_the_last_layer_by_default() -> None:
    p = resolve("fedper", GROUPS, NORMS)
    assert p.personal == (6, 7)
    assert p.keeps_layers and p.enabled


def test_fedper_keeps_named_layers_or_last_k() -> None:
    assert resolve("fedper", GROUPS, NORMS, layers=["dense"]).personal == (0, 1)
    assert resolve("fedper", GROUPS, NORMS, last_k=2).personal == (2, 3, 4, 5, 6, 7)


def test_fedper_names_unknown_layers_and_the_ones_it_has() -> None:
    with pytest.raises(ParamsError) as err:
        resolve("fedper", GROUPS, NORMS, layers=["dense", "classifier"])
    assert "personalization.layers" in str(err.value)
    assert "classifier" in str(err.value) and "'head'" in str(err.value)


def test_fedper_refuses_to_keep_every_layer() -> None:
    with pytest.raises(ParamsError, match=r"personalization.last_k=3 .* 1\.\.2"):
        resolve("fedper", GROUPS, NORMS, last_k=3)
    with pytest.raises(ParamsError, match="at least one layer shared"):
        resolve("fedper", GROUPS, NORMS, layers=["dense", "bn", "head"])


def test_fedbn_keeps_normalization_layers() -> None:
    assert resolve("fedbn", GROUPS, NORMS).personal == (2, 3, 4, 5)


def test_fedbn_without_normalization_layers_names_the_fix() -> None:
    with pytest.raises(ParamsError, match="model.batch_norm: true"):
        resolve("fedbn", GROUPS, [])


def test_defaults_of_finetune_and_ditto() -> None:
    assert resolve("finetune", GROUPS, NORMS).finetune_epochs == 1
    assert resolve("finetune", GROUPS, NORMS, finetune_epochs=3).finetune_epochs == 3
    assert resolve("ditto", GROUPS, NORMS).ditto_lambda == pytest.approx(0.1)
    assert resolve("ditto", GROUPS, NORMS, ditto_lambda=0.0).ditto_lambda == 0.0
    assert resolve("ditto", GROUPS, NORMS).personal == ()


def test_start_shared_and_restore_for_kept_layers() -> None:
    p = resolve("fedper", GROUPS, NORMS)
    global_w, own = _weights(0), _weights(100)
    kept = p.kept_part(own)
    assert sorted(kept) == [6, 7]
    start = p.start_weights(global_w, kept)
    assert [float(w[0]) for w in start] == [0, 1, 2, 3, 4, 5, 106, 107]
    # what the client sends: personal layers replaced by the global ones
    sent = p.shared_part(own, global_w)
    assert [float(w[0]) for w in sent] == [100, 101, 102, 103, 104, 105, 6, 7]
    # a server that moved the personal layers anyway is undone exactly
    restored = p.restore_personal(_weights(50), global_w)
    assert [float(w[0]) for w in restored] == [50, 51, 52, 53, 54, 55, 6, 7]


def test_nothing_is_kept_without_personalization() -> None:
    global_w, own = _weights(0), _weights(100)
    assert not NO_PERSONALIZATION.enabled
    assert NO_PERSONALIZATION.start_weights(global_w, {6: own[6]})[6] is global_w[6]
    assert NO_PERSONALIZATION.shared_part(own, global_w) == own
    assert NO_PERSONALIZATION.kept_part(own) == {}


def test_ditto_personal_model_is_the_kept_model_or_the_global_one() -> None:
    p = resolve("ditto", GROUPS, NORMS)
    global_w, own = _weights(0), _weights(100)
    assert p.personal_model(global_w, {}) == global_w
    assert p.personal_model(global_w, dict(enumerate(own))) == own
    # ditto trains the global update from the global weights, not its own model
    assert p.start_weights(global_w, dict(enumerate(own))) == global_w


def test_kept_arrays_round_trip_beside_other_client_state() -> None:
    states = {"client-0001/000": np.ones(2, np.float32)}  # a SCAFFOLD control
    states = with_kept_arrays(states, {1: {6: np.full(2, 7.0), 7: np.full(2, 8.0)}})
    states = with_kept_arrays(states, {3: {0: np.full(2, 1.0)}})
    assert kept_arrays(states, 1).keys() == {6, 7}
    assert float(kept_arrays(states, 1)[7][0]) == 8.0
    assert kept_arrays(states, 2) == {}
    assert "client-0001/000" in states
    # replacing a client's arrays drops positions it no longer keeps
    states = with_kept_arrays(states, {1: {7: np.full(2, 9.0)}})
    assert kept_arrays(states, 1).keys() == {7}


def _params(**personalization: object) -> dict:
    return {
        "federation": {"rounds": 1},
        "round_chain": {1: 0},
        "personalization": personalization,
    }


def test_params_accept_every_method_and_refuse_unknown_ones() -> None:
    for method in ("none", "fedper", "fedbn", "finetune", "ditto"):
        params = parse_params(_params(method=method))
        assert params.personalization.method == method
    with pytest.raises(ParamsError, match="personalization.method"):
        parse_params(_params(method="pfedme"))
    with pytest.raises(ParamsError, match="both set"):
        parse_params(_params(layers=["head"], last_k=1))


def test_normalization_layers_of_real_models() -> None:
    from fedpipe.models import build_model, normalization_layers

    bn = build_model("cnn", (28, 28, 1), 10, depth=2, width=4, batch_norm=True)
    assert normalization_layers(bn) == ["bn_01", "bn_02"]
    assert normalization_layers(build_model("mlp", (28, 28, 1), 10)) == []
