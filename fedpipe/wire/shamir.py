"""Shamir's secret sharing over a prime field, with Python ints.

A secret ``s`` is the constant term of a polynomial of degree ``t - 1`` over
GF(p); share ``x`` is the polynomial's value at ``x`` (never 0). Any ``t``
shares give ``s`` back by Lagrange interpolation at 0; fewer reveal nothing
about it. The ``t - 1`` random coefficients are the caller's, so a split is a
pure, reproducible function (secure aggregation derives them from a client's
own secrets, :mod:`fedpipe.wire.secagg`).

The default field is GF(2^521 - 1), a Mersenne prime above any 32-byte secret
(:func:`secret_from_bytes`, :func:`secret_to_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: the default field's prime, 2^521 - 1 (a Mersenne prime, > 2^256)
PRIME = 2**521 - 1

#: bytes of a secret the byte helpers take and give (a key or a seed)
SECRET_BYTES = 32

#: bytes of one share's value in GF(:data:`PRIME`) (521 bits, big-endian)
SHARE_BYTES = (PRIME.bit_length() + 7) // 8


def _evaluate(coefficients: Sequence[int], x: int, prime: int) -> int:
    """The polynomial ``coefficients[0] + coefficients[1] x + ...`` at ``x``."""
    value = 0
    for c in reversed(coefficients):
        value = (value * x + c) % prime
    return value


def split(
    secret: int,
    xs: Sequence[int],
    coefficients: Sequence[int],
    prime: int = PRIME,
) -> dict[int, int]:
    """The shares of ``secret`` at the points ``xs``, by x.

    Parameters
    ----------
    secret
        The secret, ``0 <= secret < prime``.
    xs
        Distinct nonzero points in ``1 .. prime - 1`` (one per shareholder).
    coefficients
        The polynomial's ``t - 1`` random coefficients (degree 1 upward), each
        reduced mod ``prime``; the threshold is ``len(coefficients) + 1``.
    prime
        The field's prime (default :data:`PRIME`).

    Raises
    ------
    ValueError
        A secret outside the field, a point 0 (mod ``prime``) or a repeated one.
    """
    if not 0 <= secret < prime:
        raise ValueError(f"a secret must lie in 0 .. prime - 1, got {secret}")
    _check_points(xs, prime)
    poly = [secret, *(int(c) % prime for c in coefficients)]
    return {int(x): _evaluate(poly, int(x), prime) for x in xs}


def combine(shares: Mapping[int, int], prime: int = PRIME) -> int:
    """The secret from ``shares`` (x to y), by Lagrange interpolation at 0.

    With at least the threshold's number of shares this is the secret; with
    fewer it is a value unrelated to it (no error can tell).

    Raises
    ------
    ValueError
        No shares, a point 0 (mod ``prime``), or two points equal mod ``prime``.
    """
    if not shares:
        raise ValueError("no shares to combine")
    xs = [int(x) for x in shares]
    _check_points(xs, prime)
    secret = 0
    for i, xi in enumerate(xs):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if i != j:
                num = num * (-xj) % prime
                den = den * (xi - xj) % prime
        secret = (secret + shares[xi] * num * pow(den, -1, prime)) % prime
    return secret


def _check_points(xs: Sequence[int], prime: int) -> None:
    reduced = [int(x) % prime for x in xs]
    if 0 in reduced:
        raise ValueError("a share's x must not be 0 (mod the prime): it is the secret")
    if len(set(reduced)) != len(reduced):
        raise ValueError(f"shares' x must be distinct (mod the prime), got {list(xs)}")


def secret_from_bytes(secret: bytes) -> int:
    """A :data:`SECRET_BYTES`-byte secret as an int (big-endian).

    Raises
    ------
    ValueError
        Not :data:`SECRET_BYTES` bytes.
    """
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a secret has {SECRET_BYTES} bytes, got {len(secret)}")
    return int.from_bytes(secret, "big")


def secret_to_bytes(secret: int) -> bytes:
    """An int below 2^256 as a :data:`SECRET_BYTES`-byte secret (big-endian).

    Raises
    ------
    ValueError
        The int does not fit in :data:`SECRET_BYTES` bytes (e.g. combined from
        too few shares).
    """
    if not 0 <= secret < 1 << (8 * SECRET_BYTES):
        raise ValueError(
            f"the combined value does not fit in {SECRET_BYTES} bytes "
            "(too few shares, or shares of another secret)"
        )
    return secret.to_bytes(SECRET_BYTES, "big")


def share_to_bytes(value: int) -> bytes:
    """A share's value in GF(:data:`PRIME`) as :data:`SHARE_BYTES` bytes."""
    return int(value).to_bytes(SHARE_BYTES, "big")


def share_from_bytes(data: bytes) -> int:
    """A share's value from :data:`SHARE_BYTES` bytes (:func:`share_to_bytes`)."""
    if len(data) != SHARE_BYTES:
        raise ValueError(f"a share has {SHARE_BYTES} bytes, got {len(data)}")
    return int.from_bytes(data, "big")
