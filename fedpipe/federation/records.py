"""What a round reports: :class:`RoundRecord`, written as its metrics files."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.federation.failures import excluded_counts
from fedpipe.model.metrics import METRIC_NAMES, weighted_mean

NAN = float("nan")  # a metric a row does not carry (older code, own trainers)


@dataclass(frozen=True)
class RoundRecord:
    """Everything a round reports; written as the round's metrics outputs.

    Attributes
    ----------
    n_test : dict
        Client id -> size of its local test split (scored and selected clients).
    global_test : dict
        The new global model on the held-out test set.
    global_clients : dict
        Client id -> the new global model on its local test split (the clients
        scored this round, ``evaluation.*``; every client by default).
    local : dict
        Client id -> its locally trained model on its own local test split
        (selected clients only).
    personalized : dict, optional
        Client id -> its personalized model on its own local test split (the
        scored clients), when personalization is on.
    n_clients : int, optional
        Clients in the federation (default: those in ``n_test``).
    excluded : dict, optional
        Client id -> why it was left out of aggregation (``dropout``,
        ``straggler``, ``nonfinite``, ``failed: <message>``; see
        :mod:`fedpipe.federation.failures`). Its local metrics, if it trained, are in
        ``local`` but not in the local means.
    partial : dict, optional
        Client id -> the steps a straggler completed (its partial work used).
    privacy : dict, optional
        The round's differential privacy (``privacy.*``): epsilon at delta after
        this round, the clip, the noise against the signal
    (:mod:`fedpipe.federation.privacy`). malicious : list of int, optional
        The selected clients that attacked this round (``attack.*``); None when
        the run plants no attack (and then not in the summary).
    kept : str, optional
        Why the round kept the previous global model: fewer usable updates
        than the strategy needs (:meth:`fedpipe.strategy.base.Strategy.too_few`;
        ``model_kept`` in the summary). None: the round aggregated.
    wire : dict, optional
        What crossed the wire (:mod:`fedpipe.federation.wire`): the uplink's
        codec, bytes both ways in total and per client, the uplink's ratio to
        float32 weights (and secure aggregation's protocol bytes).

    Lists indexed by client id are accepted for ``n_test``, ``global_clients``
    and ``personalized``.
    """

    round: int
    selected: list[int]
    n_test: Mapping[int, int]
    global_test: dict[str, float]
    global_clients: Mapping[int, dict[str, float]]
    local: dict[int, dict[str, float]]
    aggregation_weight_sum: float
    personalized: Mapping[int, dict[str, float]] | None = None
    n_clients: int | None = None
    excluded: Mapping[int, str] = field(default_factory=dict)
    partial: Mapping[int, int] = field(default_factory=dict)
    privacy: dict[str, Any] | None = None
    malicious: list[int] | None = None
    global_classes: dict[str, list] | None = None
    kept: str | None = None
    wire: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("n_test", "global_clients", "personalized"):
            value = getattr(self, name)
            if isinstance(value, list | tuple):
                object.__setattr__(self, name, dict(enumerate(value)))

    @property
    def scored(self) -> list[int]:
        """Clients the global model was scored on this round, by id."""
        return sorted(self.global_clients)

    @property
    def complete(self) -> bool:
        """Whether every client of the federation was scored this round."""
        size = len(self.n_test) if self.n_clients is None else self.n_clients
        return len(self.global_clients) == size

    def global_clients_mean(self) -> dict[str, float]:
        """Global model on client test splits, mean weighted by test size."""
        return weighted_mean(
            [self.global_clients[c] for c in self.scored],
            [self.n_test[c] for c in self.scored],
        )

    def global_clients_std(self) -> dict[str, float]:
        """Standard deviation of the global model's metrics across clients."""
        return _std([self.global_clients[c] for c in self.scored])

    def personalized_mean(self) -> dict[str, float]:
        """Personalized models on their own test splits, weighted by test size."""
        own = self.personalized or {}
        ids = sorted(own)
        return weighted_mean([own[c] for c in ids], [self.n_test[c] for c in ids])

    def personalized_std(self) -> dict[str, float]:
        """Standard deviation of personalized-model metrics across clients."""
        own = self.personalized or {}
        return _std([own[c] for c in sorted(own)])

    @property
    def aggregated(self) -> list[int]:
        """Selected clients whose updates were aggregated, by id."""
        return [c for c in self.selected if c not in self.excluded]

    def local_mean(self) -> dict[str, float]:
        """Local models on their own test splits, weighted by test size
        (aggregated clients)."""
        rows = [self.local[c] for c in self.aggregated]
        return weighted_mean(rows, [self.n_test[c] for c in self.aggregated])

    def local_std(self) -> dict[str, float]:
        """Standard deviation of local-model metrics across aggregated clients."""
        return _std([self.local[c] for c in self.aggregated])

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
        if not self.complete:
            out["clients_scored"] = len(self.global_clients)
        if self.excluded:
            out["clients_aggregated"] = len(self.aggregated)
            out["clients_excluded"] = {
                str(c): self.excluded[c] for c in sorted(self.excluded)
            }
            out["excluded_counts"] = excluded_counts(self.excluded)
        if self.partial:
            out["clients_partial"] = {
                str(c): self.partial[c] for c in sorted(self.partial)
            }
        if self.malicious is not None:
            out["malicious"] = list(self.malicious)
        if self.kept is not None:
            out["model_kept"] = self.kept
        if self.personalized is not None:
            out["personalized"] = _rounded(self.personalized_mean())
            out["personalized_std"] = _rounded(self.personalized_std())
        if self.privacy is not None:
            out["privacy"] = dict(self.privacy)
        if self.global_classes is not None:
            out["global_classes"] = copy.deepcopy(self.global_classes)
        if self.wire is not None:
            out["wire"] = copy.deepcopy(self.wire)
        return out

    def client_table(self) -> pd.DataFrame:
        """One row per client: local-model and global-model metrics side by side."""
        missing = {m: float("nan") for m in METRIC_NAMES}
        rows = []
        for c in sorted(self.n_test):
            global_row = self.global_clients.get(c, missing)
            local = self.local.get(c, missing)
            row: dict[str, Any] = {
                "client": c,
                "selected": c in self.local,
                "n_test": self.n_test[c],
            }
            if self.excluded:
                row["excluded"] = self.excluded.get(c, "")
            row.update({f"local_{m}": local.get(m, NAN) for m in METRIC_NAMES})
            row.update({f"global_{m}": global_row.get(m, NAN) for m in METRIC_NAMES})
            if self.personalized is not None:
                own = self.personalized.get(c, missing)
                row.update({f"personalized_{m}": own.get(m, NAN) for m in METRIC_NAMES})
            rows.append(row)
        return pd.DataFrame(rows)


def _std(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-metric standard deviation across rows (NaN values ignored)."""
    out = {}
    for m in METRIC_NAMES:
        values = np.asarray([r.get(m, NAN) for r in rows], dtype=float)
        # all NaN (or none): NaN, without numpy's "Degrees of freedom" warning
        known = values.size and not np.isnan(values).all()
        out[m] = float(np.nanstd(values)) if known else float("nan")
    return out


def _rounded(metrics: Mapping[str, float]) -> dict[str, float | None]:
    return {
        k: (None if np.isnan(v) else round(float(v), 6)) for k, v in metrics.items()
    }
