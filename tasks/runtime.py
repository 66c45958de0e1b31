"""What one process keeps between rounds: the compiled model and the loaded arrays.

Both are keyed by what they were made from (the model spec; the files' identity),
so a change on disk is never served stale, and a process that runs many rounds pays
for TensorFlow graph building and Parquet decoding once.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fedpipe.data import DatasetSpec, read_table
from fedpipe.federation import FederatedData, federated_data, read_json
from fedpipe.training import ModelRunner, ModelSpec

_lock = threading.Lock()
_runners: dict[ModelSpec, ModelRunner] = {}
_data: dict[tuple, FederatedData] = {}


def runner_for(spec: ModelSpec) -> ModelRunner:
    """The process's compiled model for ``spec`` (built on first use)."""
    with _lock:
        if spec not in _runners:
            _runners[spec] = ModelRunner(spec)
        return _runners[spec]


def _identity(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def data_for(table: Path, manifest: Path, spec: DatasetSpec) -> FederatedData:
    """The federated arrays for these files (re-read when either file changes)."""
    key = (_identity(table), _identity(manifest), spec)
    with _lock:
        if key not in _data:
            _data.clear()
            _data[key] = federated_data(read_table(table), read_json(manifest), spec)
        return _data[key]
