"""make_strategy and settings: defaults, None, and errors that name the key."""

from __future__ import annotations

import pytest

from fedpipe.strategy import STRATEGIES, FedAdam, make_strategy

BAD = [
    ("fedprox", "proximal_mu", -1.0, ">= 0"),
    ("fedavgm", "server_lr", 0.0, "> 0"),
    ("fedavgm", "server_momentum", 1.0, ">= 0 and server_momentum < 1"),
    ("fedavgm", "server_momentum", -0.1, "< 1"),
    ("fedadam", "beta_1", 1.0, "beta_1 < 1"),
    ("fedadam", "beta_2", 1.5, "beta_2 < 1"),
    ("fedyogi", "tau", 0.0, "tau > 0"),
    ("fedadagrad", "server_lr", -0.1, "server_lr > 0"),
    ("fedadagrad", "tau", float("nan"), "tau > 0"),
    ("fedtrimmedavg", "beta", 0.5, "beta >= 0 and beta < 0.5"),
    ("fedtrimmedavg", "beta", -0.1, "beta < 0.5"),
    ("krum", "num_byzantine", -1, "num_byzantine >= 0"),
    ("multikrum", "num_selected", 0, "num_selected >= 1"),
    ("scaffold", "total_clients", 0, "total_clients >= 1"),
    ("scaffold", "server_lr", float("inf"), "server_lr > 0"),
]


@pytest.mark.parametrize(("name", "key", "value", "allowed"), BAD)
def test_bad_value_names_the_key_and_the_range(
    name: str, key: str, value: float, allowed: str
) -> None:
    settings = {"total_clients": 4, key: value}
    with pytest.raises(ValueError) as info:
        make_strategy(name, **settings)
    message = str(info.value)
    assert message.startswith(f"strategy.{key}: ")
    assert "allowed: " in message
    assert allowed in message


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [("fedadam", "tau", "small"), ("fedavgm", "server_lr", True),
     ("krum", "num_byzantine", 2.0), ("scaffold", "total_clients", "10")],
)  # fmt: skip
def test_wrong_type_names_the_key(name: str, key: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^strategy\.{key}: .* is not an? "):
        make_strategy(name, **{"total_clients": 4, key: value})


def test_none_means_the_default() -> None:
    s = make_strategy("fedadam", server_lr=None, beta_1=None, beta_2=0.9, tau=None)
    assert (s.server_lr, s.beta_1, s.beta_2, s.tau) == (0.1, 0.9, 0.9, 1e-3)


def test_settings_are_applied() -> None:
    s = make_strategy("fedadam", server_lr=0.3, beta_1=0.5, beta_2=0.6, tau=0.01)
    assert isinstance(s, FedAdam)
    assert repr(s) == "FedAdam(server_lr=0.3, beta_1=0.5, beta_2=0.6, tau=0.01)"


def test_unknown_name_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError) as info:
        make_strategy("fedsgd", server_lr=1.0)
    message = str(info.value)
    assert message.startswith("strategy.name: unknown 'fedsgd'; allowed: ")
    assert message.endswith(", ".join(sorted(STRATEGIES)))


def test_constructors_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        FedAdam(0.1)  # type: ignore[misc]
