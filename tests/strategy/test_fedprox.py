"""FedProx: FedAvg on the server, proximal_mu for the clients."""

from __future__ import annotations

import pytest
from strategy_helpers import same_bits, updates, weights

from fedpipe.strategy import FedAvg, FedProx, make_strategy


def test_client_settings_carry_mu() -> None:
    assert FedProx().client_settings() == {"proximal_mu": 0.01}
    assert make_strategy("fedprox", proximal_mu=0.5).client_settings() == {
        "proximal_mu": 0.5
    }
    assert FedAvg().client_settings() == {}


def test_server_side_is_fedavg() -> None:
    start = weights(0)
    round_updates = updates([0, 2, 5], [3, 9, 1])
    got, state = FedProx(proximal_mu=1.0).aggregate_round(start, round_updates, {})
    want, _ = FedAvg().aggregate_round(start, round_updates, {})
    assert same_bits(got, want)
    assert state == {}


def test_zero_mu_is_allowed_and_negative_is_not() -> None:
    assert FedProx(proximal_mu=0).proximal_mu == 0.0
    with pytest.raises(ValueError, match=r"strategy\.proximal_mu: -0\.1 .*>= 0"):
        FedProx(proximal_mu=-0.1)
