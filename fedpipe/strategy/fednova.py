"""FedNova (Wang et al., 2020): each update normalized by its client's local steps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.strategy.aggregate import AggregationError, Weights, cast_like, normalized
from fedpipe.strategy.base import ClientUpdate, State, Strategy


class FedNova(Strategy):
    """Normalized averaging: clients that ran more local steps do not pull harder.

    FedAvg weights client i by its share of the samples whatever work it did, so
    a client that ran more local steps (a bigger data set, more epochs) or fewer
    (a partial straggler, ``federation.stragglers: partial``) moves the global
    model in proportion to its steps: the federation minimizes a different,
    step-weighted objective ("objective inconsistency"). FedNova divides each
    update by the client's steps and takes the mean step as many times as the
    clients' steps on average (eq. 7 with plain local SGD, a_i = [1, ..., 1]):

    .. math::

        d_i = \\frac{w_t - w_i}{\\tau_i}, \\qquad
        d = \\sum_{i \\in S} p_i d_i, \\qquad
        \\tau_{\\mathrm{eff}} = \\sum_{i \\in S} p_i \\tau_i, \\qquad
        w_{t+1} = w_t - \\tau_{\\mathrm{eff}}\\, d

    with :math:`p_i = n_i / \\sum_{j \\in S} n_j` and :math:`\\tau_i` the local
    optimizer steps that made :math:`w_i` (``ClientUpdate.steps``, which the
    client reports). With equal :math:`\\tau_i` this is FedAvg. A client that
    took no step (:math:`w_i = w_t`) contributes :math:`d_i = 0` and
    :math:`\\tau_i = 0`. No settings, no state.

    The normalizer is the paper's :math:`\\|a_i\\|_1 = \\tau_i` of plain SGD, the
    local solver of fedpipe's ``train.optimizer: sgd`` (no momentum). Under
    ``train.optimizer: adam`` or a proximal client (FedProx, Ditto's personal
    model is not sent), the paper's :math:`a_i` differ and this rule is only an
    approximation of theirs. Paper: https://arxiv.org/abs/2007.07481
    """

    name = "fednova"

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        taus = [_steps(u) for u in updates]
        p = normalized([u.n_samples for u in updates])
        tau_eff = float(np.dot(p, np.asarray(taus, dtype=np.float64)))
        new: Weights = []
        for layer, w in enumerate(global_weights):
            w64 = np.asarray(w, dtype=np.float64)
            d = np.zeros_like(w64)
            for u, p_i, tau_i in zip(updates, p, taus, strict=True):
                if tau_i > 0 and p_i > 0:
                    d += p_i * (w64 - np.asarray(u.weights[layer], np.float64)) / tau_i
            new.append(w64 - tau_eff * d)
        return cast_like(new, global_weights), {}

    def weight_sum(self, updates: Sequence[ClientUpdate]) -> float:
        """``sum_i p_i tau_eff / tau_i`` over the clients that took steps: the step
        is ``sum_i p_i (tau_eff / tau_i) (w_i - w)``, so its weights sum to more
        than 1 when the clients' steps differ (1 when they are equal)."""
        taus = [_steps(u) for u in updates]
        p = normalized([u.n_samples for u in updates])
        tau_eff = float(np.dot(p, np.asarray(taus, dtype=np.float64)))
        return float(
            sum(p_i * tau_eff / t for p_i, t in zip(p, taus, strict=True) if t > 0)
        )


def _steps(update: ClientUpdate) -> int:
    """Client ``update``'s local steps, or AggregationError naming it."""
    if update.steps is None:
        raise AggregationError(
            f"client {update.client} did not report its local steps "
            "(ClientUpdate.steps), which strategy.name = 'fednova' normalizes by; "
            "a client algorithm sets ClientReply.steps, or leaves it None so the "
            "trainer's count is sent"
        )
    return int(update.steps)
