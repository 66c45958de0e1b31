"""The health record's core: how the clients' updates relate, layer by layer."""

from __future__ import annotations

from typing import Any

from fedpipe.federation.diagnostics.base import FinishedRound
from fedpipe.federation.health import HeldOut, ModelLayers, RoundUpdates, round_health
from fedpipe.model.zoo import layer_info


class UpdateHealth:
    """The updates' record (:func:`fedpipe.federation.health.round_health`) of
    the results the server saw alone, and in ``aggregation`` the weight sum the
    strategy's server step should show (``expected_weight_sum``: the doctor's
    reference; 0 when the round kept the previous model)."""

    def __repr__(self) -> str:
        return "UpdateHealth()"

    def __call__(
        self, finished: FinishedRound, health: dict[str, Any]
    ) -> dict[str, Any]:
        inputs, excluded = finished.inputs, finished.excluded
        # a reply without weights was never seen alone (secure aggregation's,
        # whose server holds only the sum): the record has no row of its update
        seen = [r for r in finished.results if r.update.weights]
        updates = RoundUpdates(
            before=inputs.global_weights,
            after=finished.weights,
            clients={r.client: r.update.weights for r in seen},
            n_train={r.client: r.update.n_samples for r in seen},
            train_loss={r.client: r.train_loss for r in seen},
            excluded=excluded,
        )
        runner = finished.runner
        labels = inputs.data.y_test if finished.completed else None
        out = round_health(
            inputs.round,
            updates,
            ModelLayers(layer_info(runner.model), runner.trainable_indices()),
            HeldOut(finished.probs, labels, finished.losses),
            record=finished.record,
        )
        out.pop("seconds")
        expected = expected_weight_sum(finished, seen)
        if expected is not None:
            out["aggregation"]["expected_weight_sum"] = expected
        return {**health, **out}


def expected_weight_sum(finished: FinishedRound, seen: list[Any]) -> float | None:
    """What the aggregation weights of ``seen`` (the results seen alone) should
    add up to under the round's strategy; 0 when the round kept the previous
    model; None when the round did not complete or the strategy cannot say."""
    if not finished.completed:
        return None
    if finished.record is not None and finished.record.kept:
        return 0.0  # no server step: the weights sum to 0
    aggregated = [r.update for r in seen if r.client not in finished.excluded]
    return finished.inputs.strategy.weight_sum(aggregated)
