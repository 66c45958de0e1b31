"""What one process keeps between rounds: the compiled model and the loaded arrays.

Both are keyed by what they were made from (the model spec; the files' identity),
so a change on disk is never served stale, and a process that runs many rounds pays
for TensorFlow graph building and data decoding once.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fedpipe.data import prepared_spec
from fedpipe.federation import FederatedData, federated_data, read_json
from fedpipe.ingest import FEATURES_FILE, SAMPLES_FILE, open_features, read_samples
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


def data_for(prepared: Path, manifest: Path) -> FederatedData:
    """The federated arrays for these files (re-read when any of them changes)."""
    files = (prepared / FEATURES_FILE, prepared / SAMPLES_FILE, manifest)
    key = tuple(_identity(f) for f in files)
    with _lock:
        if key not in _data:
            _data.clear()
            _data[key] = federated_data(
                open_features(prepared),
                read_samples(prepared),
                read_json(manifest),
                prepared_spec(prepared),
            )
        return _data[key]
