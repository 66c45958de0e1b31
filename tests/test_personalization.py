"""Personalization methods: which weights stay on a client, and what it trains."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.client import ClientReply, ClientTask, LocalFit, LocalSGD, LocalTrainer
from fedpipe.client.personal import Ditto, FedPer
from fedpipe.config.params import ParamsError, parse_params
from fedpipe.federation.clientstate import (
    load_client_states,
    merged,
    save_client_states,
)
from fedpipe.federation.personalization import resolve

# a model of three weight-bearing layers: dense (0, 1), batch norm (2..5), head (6, 7)
GROUPS = [("dense", [0, 1]), ("bn", [2, 3, 4, 5]), ("head", [6, 7])]
NORMS = ["bn"]


def _weights(value: float) -> list[np.ndarray]:
    return [np.full((2,), value + j, np.float32) for j in range(8)]


def test_fedper_keeps_the_last_layer_by_default() -> None:
    p = resolve("fedper", GROUPS, NORMS)
    assert p.personal == (6, 7)
    assert p.enabled and isinstance(p.wrap(LocalSGD()), FedPer)


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


class _Trainer(LocalTrainer):
    """Records what it was asked to train from; "trains" by adding 100."""

    def __init__(self) -> None:
        self.starts: list[list[float]] = []
        self.calls: list[dict] = []

    @property
    def trainable(self) -> list[int]:
        return list(range(8))

    def fit(self, weights, *, seed, proximal_mu=0.0, anchor=None, **kw) -> LocalFit:
        self.starts.append([float(w[0]) for w in weights])
        self.calls.append(dict(seed=seed, proximal_mu=proximal_mu, anchor=anchor))
        return LocalFit([np.asarray(w) + 100 for w in weights], 1, 0.5)

    def evaluate(self, weights) -> dict[str, float]:
        return {}


def _task(global_w: list[np.ndarray], state: dict | None = None) -> ClientTask:
    return ClientTask(client=3, round=2, global_weights=global_w, state=state or {})


def test_fedper_trains_from_its_own_layers_sends_the_shared_ones_keeps_its_own() -> (
    None
):
    algo = resolve("fedper", GROUPS, NORMS).wrap(LocalSGD())
    global_w = _weights(0)
    first = algo.train(_task(global_w), trainer := _Trainer())
    # never trained: starts from the global model
    assert trainer.starts[0] == [0, 1, 2, 3, 4, 5, 6, 7]
    # sends its trained shared layers and the global head (a zero update there)
    assert [float(w[0]) for w in first.weights] == [100, 101, 102, 103, 104, 105, 6, 7]
    # keeps its trained head; reports the whole trained model as its local model
    assert sorted(first.state["fedper"]) == ["layer/006", "layer/007"]
    assert first.local_model is not None and float(first.local_model[6][0]) == 106
    # next round it trains from the new global layers plus its own head
    algo.train(_task(_weights(50), dict(first.state)), trainer)
    assert trainer.starts[1] == [50, 51, 52, 53, 54, 55, 106, 107]
    assert algo.frozen == (6, 7)


def test_no_personalization_is_the_inner_algorithm_itself() -> None:
    inner = LocalSGD()
    p = resolve("none", GROUPS, NORMS)
    assert not p.enabled and p.wrap(inner) is inner
    assert not inner.personalized and inner.frozen == ()


def test_ditto_trains_the_global_update_then_its_personal_model() -> None:
    algo = resolve("ditto", GROUPS, NORMS, ditto_lambda=0.3).wrap(LocalSGD())
    assert isinstance(algo, Ditto)
    global_w, own = _weights(0), _weights(10)
    state = {"ditto": {f"personal/{j:03d}": w for j, w in enumerate(own)}}
    trainer = _Trainer()
    reply: ClientReply = algo.train(_task(global_w, state), trainer)
    # the global update from the global weights, the personal one from its own
    assert trainer.starts == [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [10, 11, 12, 13, 14, 15, 16, 17],
    ]
    assert trainer.calls[1]["proximal_mu"] == 0.3
    assert trainer.calls[1]["anchor"] is global_w
    assert trainer.calls[0]["seed"] != trainer.calls[1]["seed"]
    assert float(reply.weights[0][0]) == 100  # sent: the global update
    assert float(reply.state["ditto"]["personal/000"][0]) == 110
    # its personalized model: the kept one, or the global one before it has one
    assert algo.personal_model(_task(global_w, state), trainer) == own
    assert algo.personal_model(_task(global_w), trainer) == global_w


def test_client_state_files_keep_namespaces_apart(tmp_path) -> None:
    states = {1: {"scaffold": {"c_i/000": np.ones(2, np.float32)}}}
    states = merged(states, {1: {"fedper": {"layer/006": np.full(2, 7.0)}}})
    states = merged(states, {3: {"fedper": {"layer/000": np.full(2, 1.0)}}})
    save_client_states(tmp_path / "clients", states)
    back = load_client_states(tmp_path / "clients")
    assert sorted(back) == [1, 3]
    assert sorted(back[1]) == ["fedper", "scaffold"]
    assert float(back[1]["fedper"]["layer/006"][0]) == 7.0
    assert 2 not in back
    # an update replaces the namespace it names and keeps the others
    again = merged(back, {1: {"fedper": {"layer/007": np.full(2, 9.0)}}})
    assert sorted(again[1]["fedper"]) == ["layer/007"]
    assert "c_i/000" in again[1]["scaffold"]


def test_unchanged_clients_give_byte_identical_files(tmp_path) -> None:
    states = {c: {"scaffold": {"c_i/000": np.full(3, c, np.float32)}} for c in range(3)}
    save_client_states(tmp_path / "a", states)
    later = merged(states, {1: {"scaffold": {"c_i/000": np.zeros(3, np.float32)}}})
    save_client_states(tmp_path / "b", later)
    same = [
        (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
        for f in ("client-0000.npz", "client-0001.npz", "client-0002.npz")
    ]
    assert same == [True, False, True]


def _params(**personalization: object) -> dict:
    return {
        "federation": {"rounds": 1},
        "round_chain": {1: 0},
        "personalization": personalization,
    }


def test_params_accept_every_method_and_refuse_unknown_ones() -> None:
    for method in ("none", "fedper", "fedbn", "finetune", "ditto"):
        raw = _params(method=method)
        if method == "fedbn":  # it needs a model with normalization layers
            raw["model"] = {"name": "cnn", "batch_norm": True}
        params = parse_params(raw)
        assert params.personalization.method == method
    with pytest.raises(ParamsError, match="personalization.method"):
        parse_params(_params(method="pfedme"))
    with pytest.raises(ParamsError, match="both set"):
        parse_params(_params(layers=["head"], last_k=1))


def test_normalization_layers_of_real_models() -> None:
    from fedpipe.model.zoo import build_model, normalization_layers

    bn = build_model("cnn", (28, 28, 1), 10, depth=2, width=4, batch_norm=True)
    assert normalization_layers(bn) == ["bn_01", "bn_02"]
    assert normalization_layers(build_model("mlp", (28, 28, 1), 10)) == []
