"""Checks that need no work: stop before anything runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedpipe.config.params import DataParams, FederationParams, PartitionParams


def preflight(
    data: DataParams, federation: FederationParams, partition: PartitionParams
) -> None:
    """Checks that need no work: stop before anything runs (``data.*``,
    ``federation.clients``, ``partition.min_samples``).

    Raises
    ------
    ParamsError
        Naming the param key: a data path that does not exist, or (for the
        built-in data, whose size is known) more clients than training samples.
    """
    from fedpipe.config.params import ParamsError
    from fedpipe.data.sources import MNIST5K

    if data.source != "mnist5k":
        path = Path(data.path)
        if not path.exists():
            raise ParamsError(f"params.yaml: data.path={data.path!r} does not exist")
        if data.source == "images" and not path.is_dir():
            raise ParamsError(
                f"params.yaml: data.path={data.path!r} must be a folder with one "
                "sub-folder per class for data.source=images"
            )
        if data.source == "table" and not path.is_file():
            raise ParamsError(
                f"params.yaml: data.path={data.path!r} must be a CSV or Parquet file "
                "for data.source=table"
            )
        return
    n = MNIST5K.n_samples
    n_test = min(max(math.floor(data.test_fraction * n + 0.5), 1), n - 1)
    n_train = n - n_test
    clients = federation.clients
    need = clients * partition.min_samples
    if clients > n_train:
        raise ParamsError(
            f"params.yaml: federation.clients={clients} exceeds the {n_train} training "
            f"samples of {MNIST5K.name}; allowed: 1..{n_train}"
        )
    if need > n_train:
        raise ParamsError(
            f"params.yaml: partition.min_samples={partition.min_samples} x "
            f"federation.clients={clients} = {need} exceeds the {n_train} training "
            f"samples; allowed: partition.min_samples <= {n_train // clients}"
        )
