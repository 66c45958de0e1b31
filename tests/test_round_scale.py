"""A round's cost follows its participants: which clients are scored
(``evaluation.*``), and client state read and written per participant."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers_store import CountingStore

from fedpipe.client import make_client
from fedpipe.client.base import LocalTraining
from fedpipe.config.params import EvaluationParams, ParamsError, parse_params
from fedpipe.data import splits
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import ClientData, Features, FederatedData
from fedpipe.federation.clientstate import (
    client_file,
    load_client_states,
    merged,
    save_client_states,
)
from fedpipe.federation.round import ClientEvaluation, RoundInputs, run_round
from fedpipe.model.trainer import run_here
from fedpipe.model.training import (
    ModelRunner,
    ModelSpec,
    initial_weights,
    predict_batch,
)
from fedpipe.observe.history import progress_line
from fedpipe.strategy import make_strategy

# ---------------------------------------------------------------- which clients


def test_all_scores_every_client_every_round() -> None:
    plan = ClientEvaluation("all", rounds=5)
    assert plan.clients_for(2, [3, 7], 10, seed=1) == list(range(10))


def test_participants_score_the_selected_until_the_last_round() -> None:
    plan = ClientEvaluation("participants", rounds=5)
    assert plan.clients_for(2, [7, 3], 10, seed=1) == [3, 7]
    assert plan.clients_for(5, [7, 3], 10, seed=1) == list(range(10))


def test_full_every_k_rounds_and_none_between() -> None:
    plan = ClientEvaluation("none", full_every=3, rounds=10)
    scored = [len(plan.clients_for(k, [1], 6, seed=0)) for k in range(1, 11)]
    assert scored == [0, 0, 6, 0, 0, 6, 0, 0, 6, 6]


def test_auto_scores_everyone_in_a_small_federation() -> None:
    plan = ClientEvaluation("auto", rounds=30)
    assert plan.clients_for(2, [3, 7], 100, seed=1) == list(range(100))
    assert ClientEvaluation().clients == "auto"  # the library's default, as params'
    assert EvaluationParams().clients == "auto"


def test_auto_scores_the_participants_of_a_large_one_and_everyone_every_10() -> None:
    plan = ClientEvaluation("auto", rounds=25)
    scored = [len(plan.clients_for(k, [5, 9], 1000, seed=0)) for k in range(1, 26)]
    full = [k for k, n in enumerate(scored, start=1) if n == 1000]
    assert full == [10, 20, 25]
    assert set(scored) == {2, 1000}
    # a full_every of the user's own is kept
    own = ClientEvaluation("auto", full_every=4, rounds=25)
    assert own.clients_for(4, [5], 101, seed=0) == list(range(101))
    assert own.clients_for(5, [5], 101, seed=0) == [5]


def test_sample_is_seeded_per_round_and_not_the_training_draw() -> None:
    plan = ClientEvaluation("sample", sample_size=4, rounds=10)
    first = plan.clients_for(1, [], 100, seed=7)
    assert first == plan.clients_for(1, [], 100, seed=7)
    assert len(first) == 4 and first == sorted(first)
    assert first != plan.clients_for(2, [], 100, seed=7)
    assert first != plan.clients_for(1, [], 100, seed=8)


def test_sample_without_a_size_is_refused_naming_the_key() -> None:
    raw = {"evaluation": {"clients": "sample"}, "federation": {"rounds": 1}}
    raw["round_chain"] = {1: 0}
    with pytest.raises(ParamsError, match="evaluation.sample_size"):
        parse_params(raw, source="params.yaml")


# ---------------------------------------------------------------- in a round


def _federation(n_clients: int, rng: np.random.Generator) -> FederatedData:
    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n)

    clients = []
    for c in range(n_clients):
        (x_tr, y_tr), (x_te, y_te) = split(12), split(4)
        clients.append(ClientData(c, x_tr, y_tr, x_te, y_te))
    x, y = split(20)
    spec = DatasetSpec("random", (0, 1, 2), (6,), (-5.0, 5.0), 1.0, 20)
    return FederatedData(spec, x, y, tuple(clients))


@pytest.fixture(scope="module")
def setting():
    rng = np.random.default_rng(0)
    data = _federation(8, rng)
    spec = ModelSpec("mlp", (6,), 3, "sgd", 0.1)
    return data, spec, ModelRunner(spec)


def _round(setting, k: int, evaluation: ClientEvaluation, strategy: str = "fedavg"):
    data, spec, runner = setting
    strat = make_strategy(strategy, total_clients=len(data.clients))
    weights = initial_weights(spec, 3)
    inputs = RoundInputs(
        round=k,
        seed=3,
        spec=spec,
        data=data,
        global_weights=weights,
        server_state=strat.init_state(weights),
        client_states={},
        strategy=strat,
        algorithm=make_client(strat.client_algorithm),
        training=LocalTraining(1, 4, 0.1),
        clients_per_round=3,
        evaluation=evaluation,
    )
    return run_round(inputs, map_clients=run_here(runner), runner=runner)


def test_a_participants_round_scores_and_tables_only_its_clients(setting) -> None:
    out = _round(setting, 1, ClientEvaluation("participants", rounds=4))
    selected = out.record.selected
    assert len(selected) == 3
    assert out.record.scored == selected
    table = out.record.client_table()
    assert table["client"].tolist() == selected
    summary = out.record.summary()
    assert summary["clients_scored"] == 3
    assert "(3 clients, global scored on 3, 1.0 s)" in progress_line(summary, 4, 1.0)
    # the same clients, scored as part of a complete round, give the same numbers
    # (to float32 rounding: their rows sit elsewhere in the prediction batches, and
    # on some CPUs a row's logits depend on its batch's shape in the last bit)
    full = _round(setting, 1, ClientEvaluation("all", rounds=4))
    assert "clients_scored" not in full.record.summary()
    assert "scored on" not in progress_line(full.record.summary(), 4, 1.0)
    for c in selected:
        scored, complete = out.record.global_clients[c], full.record.global_clients[c]
        assert scored.keys() == complete.keys()
        for name, value in scored.items():
            assert value == pytest.approx(complete[name], rel=1e-6, abs=1e-9), name
    assert len(full.record.client_table()) == 8
    np.testing.assert_array_equal(out.weights[0], full.weights[0])


def test_the_last_round_scores_everyone(setting) -> None:
    out = _round(setting, 4, ClientEvaluation("none", rounds=4))
    assert out.record.scored == list(range(8))
    empty = _round(setting, 2, ClientEvaluation("none", rounds=4))
    assert empty.record.scored == []
    assert empty.record.summary()["global_on_clients"]["accuracy"] is None
    assert empty.record.client_table()["client"].tolist() == empty.record.selected


def test_a_round_reads_the_held_out_set_a_batch_at_a_time(setting, monkeypatch) -> None:
    # the held-out features as the files give them: a lazy view of a store
    # (20,000 images of 100x100 RGB: 4,000 held out are 480 MB as float32),
    # larger than what is kept in memory
    monkeypatch.setattr(splits, "HELD_OUT_KEPT_BYTES", 1000)
    data, spec, runner = setting
    rng = np.random.default_rng(1)
    held_out = 20_000  # more than a batch: small rows take batches of 16,384
    store = CountingStore(rng.normal(size=(held_out, 6)).astype(np.float32))
    lazy = Features(store, np.arange(held_out), data.spec)  # type: ignore[arg-type]
    y = rng.integers(0, 3, held_out)
    big = FederatedData(data.spec, lazy, y, data.clients)
    _round((big, spec, runner), 2, ClientEvaluation("participants", rounds=4))
    assert sum(store.reads) >= held_out  # every row was scored
    assert max(store.reads) <= predict_batch(spec.input_shape) < held_out


def test_a_small_held_out_set_is_read_once_for_every_round(setting) -> None:
    """A table's held-out set is converted once and kept (it was read and
    standardized again every round), with the bits of the rows as read."""
    data, spec, runner = setting
    rng = np.random.default_rng(1)
    store = CountingStore(rng.normal(size=(3000, 6)).astype(np.float32))
    lazy = Features(store, np.arange(3000), data.spec)  # type: ignore[arg-type]
    small = FederatedData(data.spec, lazy, rng.integers(0, 3, 3000), data.clients)
    first = _round((small, spec, runner), 2, ClientEvaluation("participants", rounds=4))
    reads = list(store.reads)
    again = _round((small, spec, runner), 3, ClientEvaluation("participants", rounds=4))
    # the whole set read once, not per round (the dead-unit probe reads its
    # 64 rows from the view each round)
    assert [n for n in store.reads if n > 64] == [3000]
    assert [n for n in reads if n > 64] == [3000]
    assert small.x_test.tobytes() == lazy[:].tobytes()
    assert (
        first.record.summary()["global"]
        == _round(
            (
                FederatedData(data.spec, lazy[:], small.y_test, data.clients),
                spec,
                runner,
            ),
            2,
            ClientEvaluation("participants", rounds=4),
        ).record.summary()["global"]
    )
    assert again.record.round == 3


# ---------------------------------------------------------------- client state


def _state(value: float) -> dict:
    return {"scaffold": {"c_i/000": np.full(3, value, np.float32)}}


def test_client_state_is_read_only_for_the_clients_looked_up(tmp_path) -> None:
    save_client_states(tmp_path / "r1", {c: _state(c) for c in range(5)})
    stored = load_client_states(tmp_path / "r1")
    assert sorted(stored) == list(range(5)) and 3 in stored and 9 not in stored
    client_file(tmp_path / "r1", 4).unlink()  # an unread client's file is not needed
    assert float(stored[2]["scaffold"]["c_i/000"][0]) == 2.0
    with pytest.raises(FileNotFoundError):
        stored[4]  # noqa: B018 - looked up: read now


def test_unchanged_clients_are_linked_not_rewritten(tmp_path) -> None:
    save_client_states(tmp_path / "r1", {c: _state(c) for c in range(4)})
    later = merged(load_client_states(tmp_path / "r1"), {2: _state(9.0), 5: _state(5)})
    save_client_states(tmp_path / "r2", later)
    same_inode = [
        os.stat(client_file(tmp_path / "r1", c)).st_ino
        == os.stat(client_file(tmp_path / "r2", c)).st_ino
        for c in range(4)
    ]
    assert same_inode == [True, True, False, True]
    # and the folder is byte for byte what writing every client would give
    everything = {c: _state(c) for c in range(4)} | {2: _state(9.0), 5: _state(5)}
    save_client_states(tmp_path / "full", everything)
    for name in sorted(os.listdir(tmp_path / "full")):
        assert (tmp_path / "r2" / name).read_bytes() == (
            tmp_path / "full" / name
        ).read_bytes(), name
    assert sorted(os.listdir(tmp_path / "r2")) == sorted(os.listdir(tmp_path / "full"))


def test_small_rows_take_bigger_prediction_batches_images_keep_theirs() -> None:
    """A table's held-out set grows with the table: its rows go in batches of up
    to 16,384 (one TensorFlow call per 256 rows was most of what a round of 1,000
    small clients cost over one of 100); images keep 256 or fewer; and the
    batch never changes a prediction's bits."""
    assert predict_batch((32,)) == 16384
    assert predict_batch((100,)) == 5242
    assert predict_batch((1,)) == 16384
    assert predict_batch((300,)) == 256  # rows of more than 256 floats
    assert predict_batch((28, 28, 1)) == 256  # the digits: as before
    assert predict_batch((32, 32, 3)) == 256
    assert predict_batch((100, 100, 3)) == 139
    spec = ModelSpec("mlp", (32,), 10, "sgd", 0.05)
    runner = ModelRunner(spec)
    weights = initial_weights(spec, 3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10_000, 32)).astype(np.float32)
    y = rng.integers(0, 10, len(x))
    one = runner.predict_splits(weights, [(x, y)])  # one call
    for batch in (256, 4096, 5000):
        other = runner.predict_splits(weights, [(x, y)], batch)
        assert [a.tobytes() for a in other[0]] == [a.tobytes() for a in one[0]]
