"""Shamir sharing (fedpipe.wire.shamir): the textbook vector and 32-byte secrets."""

from __future__ import annotations

import itertools
import secrets

import pytest

from fedpipe.wire.shamir import (
    PRIME,
    combine,
    secret_from_bytes,
    secret_to_bytes,
    share_from_bytes,
    share_to_bytes,
    split,
)

# Wikipedia, "Shamir's secret sharing", the worked example over GF(1613)
WIKI_PRIME = 1613
WIKI_SHARES = {1: 1494, 2: 329, 3: 965, 4: 176, 5: 1188, 6: 775}


def test_split_gives_the_known_shares() -> None:
    shares = split(1234, range(1, 7), [166, 94], prime=WIKI_PRIME)
    assert shares == WIKI_SHARES


def test_every_three_known_shares_give_the_secret() -> None:
    for xs in itertools.combinations(WIKI_SHARES, 3):
        picked = {x: WIKI_SHARES[x] for x in xs}
        assert combine(picked, prime=WIKI_PRIME) == 1234


def _split_32_bytes(secret: bytes) -> dict[int, int]:
    coefficients = [secrets.randbelow(PRIME) for _ in range(2)]  # threshold 3
    return split(secret_from_bytes(secret), range(1, 6), coefficients)


def test_any_three_shares_give_a_32_byte_secret_back() -> None:
    secret = secrets.token_bytes(32)
    shares = _split_32_bytes(secret)
    for xs in itertools.combinations(shares, 3):
        picked = {x: shares[x] for x in xs}
        assert secret_to_bytes(combine(picked)) == secret


def test_two_shares_do_not_give_a_32_byte_secret() -> None:
    secret = secrets.token_bytes(32)
    shares = _split_32_bytes(secret)
    for xs in itertools.combinations(shares, 2):
        assert combine({x: shares[x] for x in xs}) != secret_from_bytes(secret)


def test_combine_refuses_x_zero() -> None:
    with pytest.raises(ValueError, match="must not be 0"):
        combine({0: 5, 1: 7}, prime=WIKI_PRIME)


def test_combine_refuses_points_equal_mod_the_prime() -> None:
    with pytest.raises(ValueError, match="distinct"):
        combine({1: 5, 1 + WIKI_PRIME: 7}, prime=WIKI_PRIME)


def test_share_bytes_round_trip() -> None:
    value = PRIME - 1
    assert share_from_bytes(share_to_bytes(value)) == value
