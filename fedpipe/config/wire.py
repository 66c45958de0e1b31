"""What may cross the wire together: the rules that refuse a combination of
``compression.*``, ``secure_aggregation.*``, ``privacy.*``, the strategy and the
attack that cannot work, each in one line naming both keys, before any stage runs.

Secure aggregation hands the server one sum per round. Whatever needs more than
that sum (a robust aggregator's ranking of updates, SCAFFOLD's control variates,
an attack forged from the received updates, a codec whose payloads differ in
shape from client to client, a server that clips and noises each update) is
refused with it; differential privacy under secure aggregation is the
``distributed`` mechanism, whose noise the clients add before masking.
"""

from __future__ import annotations

from typing import Any

from fedpipe.core import registry
from fedpipe.core.errors import SettingError

#: the fewest clients per round secure aggregation runs with: with two, each
#: learns the other's update from the published sum and its own
MIN_SECURE_CLIENTS = 3

#: the modulus of secure aggregation's integer sums (uint32 arithmetic)
MODULUS_BITS = 32


def check_wire(
    *,
    uplink: str,
    secure: str | None,
    num_shares: int | None,
    threshold: int | None,
    quantization_bits: int,
    mechanism: str | None,
    strategy: str,
    attack: str | None,
    per_round: int,
) -> None:
    """Raise ValueError (one line naming the keys) when the wire's settings do not
    fit the rest of the run.

    Parameters
    ----------
    uplink : str
        ``compression.uplink``.
    secure : str or None
        ``secure_aggregation.name``.
    num_shares, threshold, quantization_bits
        ``secure_aggregation.num_shares``, ``.reconstruction_threshold``,
        ``.quantization_bits``.
    mechanism : str or None
        ``privacy.mechanism``.
    strategy : str
        ``strategy.name``.
    attack : str or None
        ``attack.name``.
    per_round : int
        Clients sampled per round (the most a round's sum holds).
    """
    if mechanism == "distributed" and secure is None:
        raise SettingError(
            "privacy.mechanism=distributed has each client add its share of the "
            "noise before secure aggregation masks it; set secure_aggregation.name: "
            "secagg_plus, or privacy.mechanism: central"
        )
    if secure is None:
        return
    if mechanism in ("central", "local"):
        raise SettingError(
            f"privacy.mechanism={mechanism} noises what the server sees of each "
            "update, but secure_aggregation.name="
            f"{secure} shows the server only the sum: use privacy.mechanism: "
            "distributed (each client adds its share of integer noise before "
            "masking), or secure_aggregation.name: null"
        )
    if uplink != "none":
        raise SettingError(
            f"compression.uplink={uplink} does not fit secure_aggregation.name="
            f"{secure}: the masked sum needs every client's vector dense and on "
            "one integer grid, which secure_aggregation.quantization_bits already "
            "sets; set compression.uplink: none (and lower quantization_bits to "
            "send fewer bits)"
        )
    if _strategy_trait(strategy, "linear") is False:
        raise SettingError(
            f"strategy.name={strategy} needs each client's update, but "
            f"secure_aggregation.name={secure} shows the server only their sum; "
            f"use strategy.name in {', '.join(sum_strategies())}"
        )
    if attack is not None and _forges(attack):
        raise SettingError(
            f"attack.name={attack} forges the update the server receives, which "
            f"secure_aggregation.name={secure} masks inside the client's job; use "
            f"attack.name in {', '.join(data_attacks())}, or secure_aggregation."
            "name: null"
        )
    problem = secure_problem(
        per_round=per_round,
        num_shares=num_shares,
        threshold=threshold,
        quantization_bits=quantization_bits,
    )
    if problem:
        raise SettingError(problem)


def secure_problem(
    *,
    per_round: int,
    num_shares: int | None,
    threshold: int | None,
    quantization_bits: int,
) -> str | None:
    """Why secure aggregation's settings cannot work for ``per_round`` clients a
    round (one line naming the key), or None."""
    if per_round < MIN_SECURE_CLIENTS:
        return (
            f"secure_aggregation needs at least {MIN_SECURE_CLIENTS} clients a round "
            f"(federation samples {per_round}): with fewer, a client learns the "
            "others' update from the sum and its own; sample more clients"
        )
    if num_shares is not None and num_shares > per_round - 1:
        return (
            f"secure_aggregation.num_shares={num_shares}: a client has at most "
            f"{per_round - 1} neighbours among the {per_round} clients a round; "
            f"allowed: 2..{per_round - 1} (or null: O(log n))"
        )
    if (
        threshold is not None
        and num_shares is not None
        and not 1 <= threshold <= num_shares
    ):
        return (
            f"secure_aggregation.reconstruction_threshold={threshold} must be "
            f"1..secure_aggregation.num_shares={num_shares}"
        )
    if per_round * (2 ** (quantization_bits - 1) - 1) >= 2 ** (MODULUS_BITS - 1):
        most = MODULUS_BITS - 1 - max(1, (per_round - 1).bit_length())
        return (
            f"secure_aggregation.quantization_bits={quantization_bits}: the sum of "
            f"{per_round} clients could pass the 2^{MODULUS_BITS} modulus and wrap; "
            f"allowed: 2..{most} for {per_round} clients a round"
        )
    return None


def sum_strategies() -> tuple[str, ...]:
    """The built-in strategies whose server step needs only the updates' mean
    (their ``linear`` trait): secure aggregation's and central DP's."""
    return tuple(n for n, cls in registry.classes("strategy").items() if cls.linear)


def data_attacks() -> tuple[str, ...]:
    """The built-in attacks that poison a client's data and send its honest
    update (secure aggregation masks it like any other)."""
    return tuple(n for n in registry.names("attack") if not _forges(n))


def _forges(attack: str) -> bool:
    """Whether the built-in attack ``attack`` forges the update it sends (a
    user's attack is assumed to)."""
    if not registry.is_builtin("attack", attack):
        return True
    return bool(registry.get("attack", attack).forges())


def _strategy_trait(name: str, trait: str) -> Any:
    """A trait of the built-in strategy ``name`` (None for the user's own)."""
    if not registry.is_builtin("strategy", name):
        return None
    return getattr(registry.get("strategy", name), trait)
