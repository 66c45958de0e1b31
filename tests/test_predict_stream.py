"""ModelRunner.predict_splits streams: batches over the splits laid end to end, as
over their concatenation, built from only the rows each batch needs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_store import CountingStore

from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import Features
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

SPEC = ModelSpec(
    name="mlp", input_shape=(4, 4, 1), n_classes=3, optimizer="sgd", lr=0.1
)
DATA = DatasetSpec("t", (0, 1, 2), (4, 4, 1), (0.0, 255.0), 255.0, 0)


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner(SPEC)


def _store(n: int) -> CountingStore:
    rng = np.random.default_rng(3)
    return CountingStore(rng.integers(0, 256, (n, 4, 4, 1), dtype=np.uint8))


def _concatenated_predict(runner, weights, splits, batch_size):
    """What predict_splits did before: one array of every split, then slices."""
    x = np.concatenate([np.asarray(xs) for xs, _ in splits])
    y = np.concatenate([ys for _, ys in splits])
    runner.model.set_weights(weights)
    probs, losses = [], []
    import tensorflow as tf

    for start in range(0, len(x), batch_size):
        p, loss = runner._predict(
            tf.constant(x[start : start + batch_size]),
            tf.constant(runner._target(y[start : start + batch_size])),
        )
        probs.append(p.numpy())
        losses.append(loss.numpy().reshape(-1))
    probs, losses = np.concatenate(probs), np.concatenate(losses)
    out, start = [], 0
    for _, ys in splits:
        out.append((probs[start : start + len(ys)], losses[start : start + len(ys)]))
        start += len(ys)
    return out


@pytest.mark.parametrize("batch_size", [1024, 7])
def test_lazy_splits_give_the_bits_of_the_concatenated_pass(runner, batch_size) -> None:
    store = _store(300)
    order = np.random.default_rng(0).permutation(300)
    sizes = [61, 5, 0, 120, 114]
    cuts = np.cumsum([0, *sizes])
    y = (np.arange(300) % 3).astype(np.int32)
    lazy = [
        (Features(store, order[a:b], DATA), y[order[a:b]])
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]
    weights = initial_weights(SPEC, 1)
    want = _concatenated_predict(runner, weights, lazy, batch_size)
    got = runner.predict_splits(weights, lazy, batch_size=batch_size)
    arrays = [(np.asarray(x), ys) for x, ys in lazy]
    assert [len(p) for p, _ in got] == sizes
    for (gp, gl), (wp, wl), (ap, al) in zip(  # noqa: B905
        got, want, runner.predict_splits(weights, arrays, batch_size=batch_size)
    ):
        assert gp.tobytes() == wp.tobytes() == ap.tobytes()
        assert gl.tobytes() == wl.tobytes() == al.tobytes()


def test_a_batch_reads_only_its_rows(runner) -> None:
    store = _store(250)
    y = (np.arange(250) % 3).astype(np.int32)
    splits = [
        (Features(store, np.arange(0, 90), DATA), y[:90]),
        (Features(store, np.arange(90, 250), DATA), y[90:]),
    ]
    runner.predict_splits(initial_weights(SPEC, 1), splits, batch_size=64)
    # batches of 64 over 90 + 160 rows: the third batch spans both splits
    assert store.reads == [64, 26, 38, 64, 58]
    assert max(store.reads) <= 64


def test_predict_takes_a_lazy_view_and_empty_splits(runner) -> None:
    store = _store(40)
    y = (np.arange(40) % 3).astype(np.int32)
    view = Features(store, np.arange(40), DATA)
    weights = initial_weights(SPEC, 2)
    p_lazy, l_lazy = runner.predict(weights, view, y)
    p, loss = runner.predict(weights, np.asarray(view), y)
    assert p_lazy.tobytes() == p.tobytes() and l_lazy.tobytes() == loss.tobytes()
    empty = runner.predict_splits(
        weights, [(np.zeros((0, 4, 4, 1), np.float32), y[:0])]
    )
    assert empty[0][0].shape == (0, 1) and empty[0][1].shape == (0,)
