"""Client data by reference: memory-mapped features converted per split, pickled
as a reference to the prepared files (fedpipe.data.splits)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from helpers_store import CountingStore, prepared_store

from fedpipe.data.ingest import open_features, read_samples, read_schema
from fedpipe.data.sources import DatasetSpec, to_arrays, to_features
from fedpipe.data.splits import (
    ClientData,
    Features,
    FederatedData,
    StoreChanged,
    federated_data,
    forget_opened,
    open_federated,
)

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- helpers


def _old_arrays(prepared: Path, manifest: Path) -> dict:
    """What federated_data held before: every split through to_arrays."""
    from fedpipe.core.jsonio import read_json

    samples = read_samples(prepared)
    spec = DatasetSpec.from_schema(read_schema(prepared))
    position = {s: i for i, s in enumerate(samples["sample_id"].astype(str))}
    labels = samples["label"].to_numpy(dtype=np.int64)
    features = open_features(prepared)

    def arrays(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return to_arrays(features, labels, [position[i] for i in ids], spec)

    m = read_json(manifest)
    return {
        "heldout": arrays(m["heldout"]),
        "clients": [(arrays(e["train"]), arrays(e["test"])) for e in m["clients"]],
    }


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    forget_opened()
    prepared = prepared_store(tmp_path, 120)
    return prepared, tmp_path / "manifest.json"


# ---------------------------------------------------------------- the data


def test_splits_convert_to_the_same_bits_as_to_arrays(store: tuple) -> None:
    prepared, manifest = store
    old = _old_arrays(prepared, manifest)
    data = open_federated(prepared, manifest)
    assert _same(data.x_test, old["heldout"][0])
    assert _same(data.y_test, old["heldout"][1])
    for client, ((xtr, ytr), (xte, yte)) in zip(
        data.clients, old["clients"], strict=True
    ):
        assert _same(client.x_train, xtr) and _same(client.y_train, ytr)
        assert _same(client.x_test, xte) and _same(client.y_test, yte)


def test_features_stay_uint8_on_disk_memory_mapped(store: tuple) -> None:
    data = open_federated(*store)
    view = data.clients[0].x_train_lazy
    assert isinstance(view, Features)
    assert isinstance(view._store, np.memmap) and view._store.dtype == np.uint8


def test_a_split_is_converted_on_each_read_and_not_kept(store: tuple) -> None:
    data = open_federated(*store)
    client = data.clients[1]
    first, second = client.x_train, client.x_train
    assert first is not second and _same(first, second)
    assert not any(
        isinstance(v, np.ndarray) and v.dtype == np.float32
        for v in (client.x_train_lazy, client.x_test_lazy, data.x_test_lazy)
    )


def test_labels_and_lengths_read_no_features(tmp_path: Path) -> None:
    spec = DatasetSpec("t", (0, 1), (2,), (0.0, 255.0), 255.0, 10)
    counting = CountingStore(np.arange(20, dtype=np.uint8).reshape(10, 2))
    manifest = {
        "heldout": ["s0", "s1"],
        "clients": [{"client": 0, "train": ["s2", "s3", "s4"], "test": ["s5"]}],
    }
    import pandas as pd

    samples = pd.DataFrame(
        {"sample_id": [f"s{i}" for i in range(10)], "label": np.arange(10) % 2}
    )
    data = federated_data(counting, samples, manifest, spec)  # type: ignore[arg-type]
    client = data.clients[0]
    assert (len(client.y_train), len(client.y_test), len(data.y_test)) == (3, 1, 2)
    assert client.y_train.tolist() == [0, 1, 0]
    assert counting.reads == []
    assert (
        client.x_train.tolist()
        == (np.array([[4, 5], [6, 7], [8, 9]]) / 255).astype(np.float32).tolist()
    )
    assert counting.reads == [3]


def test_a_lazy_view_reads_only_the_rows_sliced(store: tuple) -> None:
    data = open_federated(*store)
    view = data.x_test_lazy
    assert len(view) == len(data.y_test) and view.shape[1:] == (6, 6, 1)
    assert _same(view[3:7], data.x_test[3:7])
    assert _same(np.asarray(view), data.x_test)
    with pytest.raises(TypeError, match="slice"):
        view[0]


def test_arrays_built_client_data_holds_its_arrays(store: tuple) -> None:
    x = np.ones((4, 2), np.float32)
    y = np.arange(4, dtype=np.int32)
    client = ClientData(7, x, y, x[:1], y[:1])
    assert client.x_train is x and client.y_train is y and client.client == 7
    data = FederatedData(
        DatasetSpec("t", (0, 1), (2,), (0.0, 1.0), 1.0, 4), x, y, [client]
    )
    assert data.x_test is x and data.clients == (client,)
    splits = data.evaluation_splits()
    assert [len(s[1]) for s in splits] == [4, 1]


# ---------------------------------------------------------------- by reference


def test_opened_once_per_process_and_again_after_a_change(store: tuple) -> None:
    prepared, manifest = store
    data = open_federated(prepared, manifest)
    assert open_federated(prepared, manifest) is data
    st = manifest.stat()
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    reopened = open_federated(prepared, manifest)
    assert reopened is not data and reopened.ref != data.ref


def test_file_backed_client_pickles_as_a_reference(tmp_path: Path) -> None:
    sizes = {}
    for n in (120, 1200):
        forget_opened()
        root = tmp_path / str(n)
        prepared = prepared_store(root, n, shape=(12, 12, 3))
        client = open_federated(prepared, root / "manifest.json").clients[0]
        payload = cloudpickle.dumps(client)
        raw = np.asarray(open_features(prepared)[:5])
        for row in raw:
            assert row.tobytes()[:48] not in payload
        assert client.x_train.tobytes()[:48] not in payload
        sizes[n] = len(payload)
    # the reference does not grow with the client's data (10x the samples, 10x
    # the bytes): only the paths and the files' sizes and times differ
    assert abs(sizes[1200] - sizes[120]) < 32
    assert sizes[120] < 1000


def test_a_reference_opens_the_files_in_another_process(store: tuple) -> None:
    prepared, manifest = store
    client = open_federated(prepared, manifest).clients[2]
    code = (
        "import pickle, sys\n"
        "c = pickle.loads(sys.stdin.buffer.read())\n"
        "sys.stdout.buffer.write(pickle.dumps((c.ref is not None, c.client, "
        "c.x_train.tobytes(), c.y_test.tobytes())))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(client),
        capture_output=True,
        cwd=ROOT.parent,  # another directory: the reference holds absolute paths
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    by_ref, number, x, y = pickle.loads(proc.stdout)
    assert by_ref and number == 2
    assert x == client.x_train.tobytes() and y == client.y_test.tobytes()


def test_a_reference_to_changed_files_is_refused(store: tuple) -> None:
    prepared, manifest = store
    payload = pickle.dumps(open_federated(prepared, manifest).clients[0])
    st = manifest.stat()
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(StoreChanged, match=r"manifest\.json: not the file the run"):
        pickle.loads(payload)


def test_a_reference_to_missing_files_names_the_path_and_the_setup(
    store: tuple,
) -> None:
    prepared, manifest = store
    payload = pickle.dumps(open_federated(prepared, manifest).clients[0])
    forget_opened()
    (prepared / "features.npy").rename(prepared.parent / "elsewhere.npy")
    with pytest.raises(StoreChanged, match=r"features\.npy: not found.*same path"):
        pickle.loads(payload)


def test_arrays_pickle_by_value(store: tuple) -> None:
    x = np.random.default_rng(0).random((5, 3)).astype(np.float32)
    y = np.arange(5, dtype=np.int32)
    back = pickle.loads(pickle.dumps(ClientData(1, x, y, x[:2], y[:2])))
    assert back.ref is None and _same(back.x_train, x) and _same(back.y_test, y[:2])
    # store-backed data without a reference (built from a manifest dict) too
    prepared, manifest = store
    from fedpipe.core.jsonio import read_json

    data = federated_data(
        open_features(prepared),
        read_samples(prepared),
        read_json(manifest),
        DatasetSpec.from_schema(read_schema(prepared)),
    )
    copy = pickle.loads(pickle.dumps(data))
    assert copy.ref is None and _same(copy.x_test, data.x_test)
    assert _same(copy.clients[1].x_train, data.clients[1].x_train)
    assert isinstance(copy.clients[1].x_train_lazy, np.ndarray)


def test_the_tasks_share_the_library_cache(store: tuple) -> None:
    from fedpipe.model.process import data_for

    prepared, manifest = store
    assert data_for(prepared, manifest) is open_federated(prepared, manifest)


def _resident_kb(path: Path) -> int:
    """This process's resident kB of its mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isalnum() and "-" in line.split()[0] and ":" not in line.split()[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux /proc")
def test_rows_read_from_the_memory_map_do_not_stay_resident(tmp_path: Path) -> None:
    path = tmp_path / "features.npy"
    np.save(path, np.arange(16 * 2**20, dtype=np.uint8).reshape(-1, 1024) % 251)
    store = np.load(path, mmap_mode="r")
    spec = DatasetSpec(
        name="t",
        classes=(0, 1),
        input_shape=(1024,),
        value_range=(0, 255),
        scale=255.0,
        n_samples=len(store),
    )
    rows = np.arange(len(store))
    plain = np.asarray(store[rows], dtype=np.float32)  # a read without the release
    held = _resident_kb(path)
    assert held >= 12 * 1024  # the 16 MiB file's pages, resident once read
    x = to_features(store, rows, spec)
    assert _resident_kb(path) < held / 8
    np.testing.assert_array_equal(x, plain / np.float32(255.0))
