"""What a round reports: :class:`RoundRecord`, written as its metrics files."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.metrics import METRIC_NAMES, weighted_mean


@dataclass(frozen=True)
class RoundRecord:
    """Everything a round reports; written as the round's metrics outputs.

    Attributes
    ----------
    global_test : dict
        The new global model on the held-out test set.
    global_clients : list of dict
        The new global model on each client's local test split (all clients).
    local : dict
        Client id -> its locally trained model on its own local test split
        (selected clients only).
    personalized : list of dict, optional
        Each client's personalized model on its own local test split (all
        clients), when personalization is on.
    """

    round: int
    selected: list[int]
    n_test: list[int]
    global_test: dict[str, float]
    global_clients: list[dict[str, float]]
    local: dict[int, dict[str, float]]
    aggregation_weight_sum: float
    personalized: list[dict[str, float]] | None = None

    def global_clients_mean(self) -> dict[str, float]:
        """Global model on client test splits, mean weighted by test size."""
        return weighted_mean(self.global_clients, self.n_test)

    def global_clients_std(self) -> dict[str, float]:
        """Standard deviation of the global model's metrics across clients."""
        return _std(self.global_clients)

    def personalized_mean(self) -> dict[str, float]:
        """Personalized models on their own test splits, weighted by test size."""
        return weighted_mean(self.personalized or [], self.n_test)

    def personalized_std(self) -> dict[str, float]:
        """Standard deviation of personalized-model metrics across clients."""
        return _std(self.personalized or [])

    def local_mean(self) -> dict[str, float]:
        """Local models on their own test splits, weighted by test size."""
        rows = [self.local[c] for c in self.selected]
        return weighted_mean(rows, [self.n_test[c] for c in self.selected])

    def local_std(self) -> dict[str, float]:
        """Standard deviation of local-model metrics across selected clients."""
        return _std([self.local[c] for c in self.selected])

    @functools.cached_property
    def _summary(self) -> dict[str, Any]:
        return self._build_summary()

    def summary(self) -> dict[str, Any]:
        """The round's metrics file: global test, client means, bookkeeping
        (computed once; a copy each call)."""
        return copy.deepcopy(self._summary)

    def _build_summary(self) -> dict[str, Any]:
        out = {
            "round": self.round,
            "clients_selected": self.selected,
            "aggregation_weight_sum": self.aggregation_weight_sum,
            "global": _rounded(self.global_test),
            "global_on_clients": _rounded(self.global_clients_mean()),
            "global_on_clients_std": _rounded(self.global_clients_std()),
            "local": _rounded(self.local_mean()),
            "local_std": _rounded(self.local_std()),
        }
        if self.personalized is not None:
            out["personalized"] = _rounded(self.personalized_mean())
            out["personalized_std"] = _rounded(self.personalized_std())
        return out

    def client_table(self) -> pd.DataFrame:
        """One row per client: local-model and global-model metrics side by side."""
        rows = []
        for c, global_row in enumerate(self.global_clients):
            local = self.local.get(c, {m: float("nan") for m in METRIC_NAMES})
            row: dict[str, Any] = {
                "client": c,
                "selected": c in self.local,
                "n_test": self.n_test[c],
            }
            row.update({f"local_{m}": local[m] for m in METRIC_NAMES})
            row.update({f"global_{m}": global_row[m] for m in METRIC_NAMES})
            if self.personalized is not None:
                own = self.personalized[c]
                row.update({f"personalized_{m}": own[m] for m in METRIC_NAMES})
            rows.append(row)
        return pd.DataFrame(rows)


def _std(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-metric standard deviation across rows (NaN values ignored)."""
    if not rows:
        return {m: float("nan") for m in METRIC_NAMES}
    return {m: float(np.nanstd([r[m] for r in rows])) for m in METRIC_NAMES}


def _rounded(metrics: Mapping[str, float]) -> dict[str, float | None]:
    return {
        k: (None if np.isnan(v) else round(float(v), 6)) for k, v in metrics.items()
    }
