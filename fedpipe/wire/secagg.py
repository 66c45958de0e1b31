"""Secure aggregation: SecAgg+ (Bell et al., CCS 2020; Flower's SecAggPlusWorkflow).

The server learns the sum of the surviving clients' quantized updates and
nothing about any one of them, even when clients drop out after sharing their
keys. The protocol is split by who does what: the client's functions take its
:class:`ClientSecrets`; the server's (:func:`unmask`) take only what clients
sent (public keys, masked vectors, revealed shares), never a client's secrets
or one client's unmasked vector.

One round:

1. every client derives its secrets (:func:`client_secrets`) and sends its two
   X25519 public keys (:func:`advertise`); the server draws a k-regular graph
   (:func:`neighbours`) and sends each client its neighbours' keys;
2. each client Shamir-shares its mask key ``s_u`` and self-mask seed ``b_u``
   among its neighbours, one AEAD ciphertext per neighbour (:func:`share_keys`),
   which the server forwards;
3. each client sends ``y_u = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv)
   - sum_{v < u} PRG(s_uv)`` mod 2^32 (:func:`masked_input`); the server adds
   the ``y_u`` it receives;
4. each surviving client reveals, for each neighbour, the share of ``b_u`` if
   that neighbour survived, of ``s_u`` if it dropped, never both
   (:func:`reveal`);
5. the server rebuilds the survivors' ``b_u`` and the dropped clients' ``s_u``
   from at least ``t`` shares and removes every mask left (:func:`unmask`).

Floats enter and leave as fixed point modulo 2^32 (:func:`quantize`,
:func:`dequantize`). :func:`run_protocol` plays a round in one process (tests,
benchmarks/bench_secagg.py). Every piece takes picklable inputs (bytes, ints,
NumPy arrays, frozen dataclasses of them) so a client's part can run in its own
job. Semi-honest server model: the server is trusted to draw the graph and to
report survivors and dropouts consistently (no consistency checks, no
signatures).
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from fedpipe.core.errors import FedpipeError, SettingError
from fedpipe.core.secretkey import derived_key
from fedpipe.wire import shamir

#: the label of a client's secure-aggregation key (:func:`client_secrets`)
CLIENT_KEY_LABEL = "fedpipe/secagg/client"

#: the masked vectors' modulus: uint32 arithmetic that wraps
MODULUS_BITS = 32

#: bytes of an X25519 key, public or private
KEY_BYTES = 32

#: bytes of a ciphertext of :func:`share_keys`: two share values and the tag
CIPHERTEXT_BYTES = 2 * shamir.SHARE_BYTES + 16

#: bytes of one share :func:`reveal` sends (its value; sender and kind are the
#: position in the server's request)
REVEALED_SHARE_BYTES = shamir.SHARE_BYTES

#: bytes of a client id in the lists the server sends (uint32)
ID_BYTES = 4

_NONCE = bytes(12)  # every AEAD key encrypts one message (see _aead_key)
_STREAM_NONCE = bytes(16)  # every PRG key gives one stream


class UnmaskError(FedpipeError, ValueError):
    """Too few shares to rebuild a client's mask: too many clients dropped out."""


# --------------------------------------------------------------------------- #
# Settings
# --------------------------------------------------------------------------- #


@dataclass(frozen=True, kw_only=True)
class SecAggSettings:
    """A round's secure-aggregation settings.

    Attributes
    ----------
    num_shares
        k: each client's neighbours in the graph (shares of its secrets);
        even, or ``n - 1`` for the complete graph.
    reconstruction_threshold
        t: shares needed to rebuild a secret, ``1 <= t <= k``.
    clipping_range
        c: update coordinates are clipped to ``[-c, c]`` before quantizing
        (same units as the update; default 8.0).
    quantization_bits
        b: a clipped coordinate becomes an integer in ``[-(2^(b-1) - 1),
        2^(b-1) - 1]`` (default 20; 2..30).
    """

    num_shares: int
    reconstruction_threshold: int
    clipping_range: float = 8.0
    quantization_bits: int = 20


def default_num_shares(n_clients: int) -> int:
    """SecAgg+'s k = O(log n): ``2 ceil(log2 n)`` (even), at least 4, and
    ``n - 1`` (the complete graph) when that is no more."""
    if n_clients < 2:
        return 0
    k = max(4, 2 * math.ceil(math.log2(n_clients)))
    return n_clients - 1 if k >= n_clients - 1 else k


def default_threshold(num_shares: int) -> int:
    """A majority of a client's neighbours: ``k // 2 + 1`` (1 for k = 0)."""
    return num_shares // 2 + 1


def default_settings(n_clients: int) -> SecAggSettings:
    """:func:`default_num_shares` and :func:`default_threshold` for ``n_clients``,
    the default clipping range and bits."""
    k = default_num_shares(n_clients)
    return SecAggSettings(num_shares=k, reconstruction_threshold=default_threshold(k))


def settings_problem(settings: SecAggSettings, n_clients: int) -> str | None:
    """Why ``settings`` cannot work for ``n_clients``, in one line, or None."""
    k, t = settings.num_shares, settings.reconstruction_threshold
    b, c = settings.quantization_bits, settings.clipping_range
    if not 2 <= b <= 30:
        return f"secure aggregation: quantization_bits is {b}; allowed: 2 to 30"
    if not c > 0:
        return f"secure aggregation: clipping_range is {c}; allowed: > 0"
    if n_clients < 2:
        return (
            f"secure aggregation: {n_clients} client(s); it needs at least 2 (a "
            "client's masks are rebuilt from its neighbours' shares)"
        )
    if k > n_clients - 1:
        return (
            f"secure aggregation: num_shares {k} exceeds the {n_clients - 1} other "
            f"clients of {n_clients}; allowed: up to {n_clients - 1}"
        )
    if k < 0 or (k % 2 and k != n_clients - 1):
        return (
            f"secure aggregation: num_shares {k} must be even (a ring's k/2 "
            f"neighbours on each side) or {n_clients - 1} (every other client)"
        )
    if not 1 <= t <= max(k, 1):
        return (
            f"secure aggregation: reconstruction_threshold {t} must lie in 1 to "
            f"num_shares {k}"
        )
    top = (1 << (b - 1)) - 1
    if n_clients * top >= 1 << (MODULUS_BITS - 1):
        return (
            f"secure aggregation: {n_clients} clients x {top} (the largest "
            f"{b}-bit value) could overflow the signed 32-bit sum; allowed: "
            f"quantization_bits <= {_max_bits(n_clients)} for {n_clients} clients"
        )
    return None


def _max_bits(n_clients: int) -> int:
    bits = 2
    while n_clients * ((1 << bits) - 1) < 1 << (MODULUS_BITS - 1):
        bits += 1
    return bits


# --------------------------------------------------------------------------- #
# Quantization
# --------------------------------------------------------------------------- #


def scale(clipping_range: float, bits: int) -> float:
    """Integer steps per unit of the update: ``(2^(b-1) - 1) / c``."""
    return ((1 << (bits - 1)) - 1) / clipping_range


def quantize(
    values: np.ndarray, *, clipping_range: float, bits: int, rng: np.random.Generator
) -> np.ndarray:
    """``values`` (float) clipped to ``[-c, c]``, scaled by :func:`scale` and
    rounded stochastically without bias (floor, plus 1 with probability the
    fraction), as uint32 (negatives wrap, two's complement)."""
    scaled = np.clip(
        np.asarray(values, dtype=np.float64), -clipping_range, clipping_range
    )
    scaled = scaled * scale(clipping_range, bits)
    floor = np.floor(scaled)
    up = rng.random(scaled.shape) < (scaled - floor)
    return (floor.astype(np.int64) + up).astype(np.uint32)


def dequantize(total: np.ndarray, *, clipping_range: float, bits: int) -> np.ndarray:
    """A uint32 sum back to float64: centred (values >= 2^31 are negative),
    divided by :func:`scale`."""
    signed = np.asarray(total, dtype=np.uint32).view(np.int32)
    return signed.astype(np.float64) / scale(clipping_range, bits)


# --------------------------------------------------------------------------- #
# The graph
# --------------------------------------------------------------------------- #


def neighbours(
    clients: Sequence[int], k: int, rng: np.random.Generator
) -> dict[int, tuple[int, ...]]:
    """A random k-regular graph over ``clients`` (SecAgg+'s Harary graph).

    The clients are put on a ring in a random order (``rng``, e.g.
    ``rng_for(seed, "secagg_graph", round)``) and each is joined to the
    ``k / 2`` nearest on either side; ``k = n - 1`` is the complete graph.

    Returns
    -------
    dict
        Each client's neighbours, sorted; symmetric.

    Raises
    ------
    ValueError
        ``k`` odd (and not ``n - 1``), negative, or above ``n - 1``.
    """
    ids = [int(c) for c in clients]
    n = len(ids)
    if not 0 <= k <= max(n - 1, 0) or (k % 2 and k != n - 1):
        raise SettingError(
            f"a ring of {n} clients takes an even k up to {n - 1}, or {n - 1}; "
            f"got k = {k}"
        )
    if k == n - 1:
        return {u: tuple(sorted(v for v in ids if v != u)) for u in ids}
    ring = [ids[i] for i in rng.permutation(n)]
    joined: dict[int, set[int]] = {u: set() for u in ids}
    for i, u in enumerate(ring):
        for step in range(1, k // 2 + 1):
            v = ring[(i + step) % n]
            joined[u].add(v)
            joined[v].add(u)
    return {u: tuple(sorted(vs)) for u, vs in joined.items()}


# --------------------------------------------------------------------------- #
# A client's secrets and messages
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class PublicKeys:
    """What a client advertises: two raw X25519 public keys (32 bytes each)."""

    mask: bytes
    encryption: bytes

    @property
    def nbytes(self) -> int:
        """Bytes on the wire."""
        return len(self.mask) + len(self.encryption)


@dataclass(frozen=True)
class ClientSecrets:
    """A client's secrets for one round; they never leave the client's job.

    Attributes
    ----------
    mask_private
        s_u: the raw X25519 private key of the pairwise masks (32 bytes).
    encryption_private
        The raw X25519 private key of the shares' encryption (32 bytes).
    self_mask_seed
        b_u: the key of the self-mask's stream (32 bytes).
    """

    mask_private: bytes = field(repr=False)
    encryption_private: bytes = field(repr=False)
    self_mask_seed: bytes = field(repr=False)


@dataclass(frozen=True)
class Share:
    """A share a client reveals for one neighbour ``owner``: of its self-mask
    seed (``"self_mask"``, the owner survived) or of its mask key
    (``"mask_key"``, the owner dropped), at point ``x``."""

    owner: int
    kind: Literal["self_mask", "mask_key"]
    x: int
    value: int


def _hkdf(material: bytes, info: str, length: int = 32) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=length, salt=None, info=info.encode()
    ).derive(material)


def _public(private: bytes) -> bytes:
    key = X25519PrivateKey.from_private_bytes(private).public_key()
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _exchange(private: bytes, public: bytes) -> bytes:
    key = X25519PrivateKey.from_private_bytes(private)
    return key.exchange(X25519PublicKey.from_public_bytes(public))


def client_secrets(key: bytes, client: int, round_: int) -> ClientSecrets:
    """Client ``client``'s secrets in ``round_``, derived from the project's
    32-byte ``key``: ``derived_key(key, "fedpipe/secagg/client", client,
    round_)`` expanded by HKDF-SHA256 into the two X25519 private keys and the
    self-mask seed. Whoever lacks ``key`` cannot derive them."""
    own = derived_key(key, CLIENT_KEY_LABEL, client, round_)
    material = _hkdf(own, "fedpipe/secagg/client-secrets", 3 * KEY_BYTES)
    return ClientSecrets(
        mask_private=material[:KEY_BYTES],
        encryption_private=material[KEY_BYTES : 2 * KEY_BYTES],
        self_mask_seed=material[2 * KEY_BYTES :],
    )


def advertise(secrets: ClientSecrets) -> PublicKeys:
    """The public keys a client sends first."""
    return PublicKeys(
        mask=_public(secrets.mask_private),
        encryption=_public(secrets.encryption_private),
    )


def _coefficients(secrets: ClientSecrets, what: str, count: int) -> list[int]:
    """``count`` coefficients of the polynomial sharing ``what``, from the
    client's own secrets (80 bytes each, reduced mod the prime: no visible bias)."""
    if count == 0:
        return []
    material = secrets.mask_private + secrets.encryption_private
    material += secrets.self_mask_seed
    stream = _hkdf(material, f"fedpipe/secagg/shamir/{what}", 80 * count)
    return [
        int.from_bytes(stream[80 * i : 80 * (i + 1)], "big") % shamir.PRIME
        for i in range(count)
    ]


def _aead_key(
    own_private: bytes, their_public: bytes, sender: int, receiver: int, round_: int
) -> bytes:
    """The key of the one message ``sender`` sends ``receiver`` in ``round_``
    (a key per direction, so the fixed nonce is never reused)."""
    shared = _exchange(own_private, their_public)
    return _hkdf(shared, f"fedpipe/secagg/aead/{sender}/{receiver}/{round_}")


def _associated(sender: int, receiver: int, round_: int) -> bytes:
    return f"fedpipe/secagg/share/{sender}/{receiver}/{round_}".encode()


def share_keys(
    client: int,
    secrets: ClientSecrets,
    neighbour_keys: Mapping[int, PublicKeys],
    threshold: int,
    round_: int,
) -> dict[int, bytes]:
    """Client ``client``'s shares of ``s_u`` and ``b_u``, one ciphertext per
    neighbour (``neighbour_keys``: its neighbours' advertised keys).

    Each secret is split with threshold ``threshold`` at ``x = v + 1`` for
    neighbour ``v``; the pair of shares (:data:`shamir.SHARE_BYTES` each) is
    encrypted with ChaCha20-Poly1305 under HKDF(X25519(own encryption key,
    v's)), bound to (client, v, round) as associated data.

    Returns
    -------
    dict
        Neighbour id to ciphertext (:data:`CIPHERTEXT_BYTES` bytes).
    """
    xs = [int(v) + 1 for v in neighbour_keys]
    mask_key = shamir.secret_from_bytes(secrets.mask_private)
    seed = shamir.secret_from_bytes(secrets.self_mask_seed)
    mask_shares = shamir.split(
        mask_key, xs, _coefficients(secrets, "mask_key", threshold - 1)
    )
    seed_shares = shamir.split(
        seed, xs, _coefficients(secrets, "self_mask", threshold - 1)
    )
    out: dict[int, bytes] = {}
    for v, keys in neighbour_keys.items():
        plain = shamir.share_to_bytes(mask_shares[int(v) + 1])
        plain += shamir.share_to_bytes(seed_shares[int(v) + 1])
        aead = _aead_key(secrets.encryption_private, keys.encryption, client, v, round_)
        out[int(v)] = ChaCha20Poly1305(aead).encrypt(
            _NONCE, plain, _associated(client, v, round_)
        )
    return out


def prg(seed: bytes, length: int) -> np.ndarray:
    """``length`` uint32 words of the ChaCha20 keystream of the 32-byte ``seed``
    (little-endian, zero nonce and counter: one stream per seed)."""
    cipher = Cipher(algorithms.ChaCha20(seed, _STREAM_NONCE), mode=None)
    stream = cipher.encryptor().update(bytes(4 * length))
    return np.frombuffer(stream, dtype="<u4").astype(np.uint32, copy=False)


def _pair_seed(private: bytes, public: bytes, u: int, v: int, round_: int) -> bytes:
    """s_uv: the pairwise mask's seed, the same from either end."""
    low, high = sorted((int(u), int(v)))
    shared = _exchange(private, public)
    return _hkdf(shared, f"fedpipe/secagg/pair/{low}/{high}/{round_}")


def masked_input(
    client: int,
    secrets: ClientSecrets,
    neighbour_keys: Mapping[int, PublicKeys],
    vector: np.ndarray,
    round_: int,
) -> np.ndarray:
    """``y = x + PRG(b_u) + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv)``
    mod 2^32, for the uint32 ``vector`` x (e.g. :func:`quantize`'s)."""
    x = np.asarray(vector, dtype=np.uint32)
    n = x.size
    y = x.reshape(-1) + prg(secrets.self_mask_seed, n)
    for v, keys in neighbour_keys.items():
        pad = prg(_pair_seed(secrets.mask_private, keys.mask, client, v, round_), n)
        if v > client:
            y += pad
        else:
            y -= pad
    return y.reshape(x.shape)


def reveal(
    client: int,
    secrets: ClientSecrets,
    neighbour_keys: Mapping[int, PublicKeys],
    ciphertexts: Mapping[int, bytes],
    survivors: Collection[int],
    dropped: Collection[int],
    round_: int,
) -> dict[int, Share]:
    """The shares client ``client`` reveals, by sender: of ``b_u`` for a sender
    that survived, of ``s_u`` for one that dropped, never both.

    Parameters
    ----------
    ciphertexts
        Addressed to this client, by sender (:func:`share_keys`'s output).
    neighbour_keys
        The senders' advertised keys (to decrypt).
    survivors, dropped
        Ids the server reports; a sender in neither is left out.

    Raises
    ------
    ValueError
        A client both survived and dropped, or a ciphertext fails to decrypt
        (altered, or not from that sender for this client and round).
    """
    alive, gone = {int(u) for u in survivors}, {int(u) for u in dropped}
    if alive & gone:
        raise ValueError(
            f"secure aggregation: clients {sorted(alive & gone)} are reported both "
            "survived and dropped; a client reveals one share of each, never both"
        )
    out: dict[int, Share] = {}
    for u, ciphertext in ciphertexts.items():
        u = int(u)
        if u not in alive and u not in gone:
            continue
        aead = _aead_key(
            secrets.encryption_private, neighbour_keys[u].encryption, u, client, round_
        )
        plain = ChaCha20Poly1305(aead).decrypt(
            _NONCE, ciphertext, _associated(u, client, round_)
        )
        half = shamir.SHARE_BYTES
        if u in alive:
            value = shamir.share_from_bytes(plain[half:])
            out[u] = Share(owner=u, kind="self_mask", x=client + 1, value=value)
        else:
            value = shamir.share_from_bytes(plain[:half])
            out[u] = Share(owner=u, kind="mask_key", x=client + 1, value=value)
    return out


# --------------------------------------------------------------------------- #
# The server
# --------------------------------------------------------------------------- #


def add_masked(total: np.ndarray | None, masked: np.ndarray) -> np.ndarray:
    """The server's running sum of masked vectors (uint32, wraps)."""
    y = np.asarray(masked, dtype=np.uint32)
    return y.copy() if total is None else total + y


_KIND_NAMES = {"self_mask": "self-mask", "mask_key": "mask key"}


def _rebuild(
    owner: int,
    kind: Literal["self_mask", "mask_key"],
    revealed: Mapping[int, Mapping[int, Share]],
    threshold: int,
) -> bytes:
    points: dict[int, int] = {}
    for by, shares in revealed.items():
        share = shares.get(owner)
        if share is not None and share.kind == kind:
            points[int(by) + 1] = share.value
    if len(points) < threshold:
        raise UnmaskError(
            f"secure aggregation: client {owner}'s {_KIND_NAMES[kind]} has "
            f"{len(points)} shares from surviving neighbours, threshold {threshold} "
            "(too many clients dropped out)"
        )
    try:
        return shamir.secret_to_bytes(shamir.combine(points))
    except ValueError as err:
        raise UnmaskError(
            f"secure aggregation: client {owner}'s {_KIND_NAMES[kind]} cannot be "
            f"rebuilt from {len(points)} shares ({err})"
        ) from err


def unmask(
    masked_sum: np.ndarray,
    *,
    public_keys: Mapping[int, PublicKeys],
    graph: Mapping[int, Sequence[int]],
    revealed: Mapping[int, Mapping[int, Share]],
    survivors: Collection[int],
    dropped: Collection[int],
    threshold: int,
    round_: int,
) -> np.ndarray:
    """The sum of the survivors' vectors (uint32, wraps), from the sum of their
    masked vectors.

    Parameters
    ----------
    masked_sum
        The uint32 sum of the survivors' :func:`masked_input` vectors.
    public_keys
        Every client's advertised keys.
    graph
        Each client's neighbours (:func:`neighbours`).
    revealed
        By revealing neighbour, its :func:`reveal` output.
    survivors, dropped
        The clients whose masked vector is in the sum, and those that shared
        their keys but sent none.
    threshold
        t: shares needed to rebuild a secret.

    Raises
    ------
    UnmaskError
        A survivor's self-mask seed or a dropped client's mask key has fewer
        than ``threshold`` shares, or its rebuilt mask key does not match the
        public key it advertised.
    """
    total = np.asarray(masked_sum, dtype=np.uint32).reshape(-1).copy()
    n = total.size
    for u in sorted(int(c) for c in survivors):
        total -= prg(_rebuild(u, "self_mask", revealed, threshold), n)
    alive = {int(c) for c in survivors}
    for u in sorted(int(c) for c in dropped):
        private = _rebuild(u, "mask_key", revealed, threshold)
        if _public(private) != public_keys[u].mask:
            raise UnmaskError(
                f"secure aggregation: client {u}'s mask key rebuilt from its shares "
                "does not match the key it advertised (a share was altered)"
            )
        for v in graph[u]:
            if v not in alive:
                continue
            pad = prg(_pair_seed(private, public_keys[v].mask, u, v, round_), n)
            # v added +PRG(s_vu) when u > v, -PRG(s_vu) when u < v: undo it
            if u > v:
                total -= pad
            else:
                total += pad
    return total.reshape(np.shape(masked_sum))


# --------------------------------------------------------------------------- #
# Bytes on the wire, and a whole round in one process
# --------------------------------------------------------------------------- #


@dataclass(frozen=True, kw_only=True)
class MessageBytes:
    """Bytes one client sends, by message (payloads only: ids and framing are
    left out)."""

    public_keys: int = 0
    ciphertexts: int = 0
    masked_vector: int = 0
    revealed_shares: int = 0

    @property
    def total(self) -> int:
        """All four messages."""
        return (
            self.public_keys
            + self.ciphertexts
            + self.masked_vector
            + self.revealed_shares
        )


def client_bytes(
    *, degree: int, length: int, survived: bool, revealed: int
) -> MessageBytes:
    """What a client with ``degree`` neighbours sends for a vector of ``length``
    uint32 words: two public keys, ``degree`` ciphertexts, and, if it survived,
    the masked vector (4 bytes a word) and ``revealed`` shares."""
    return MessageBytes(
        public_keys=2 * KEY_BYTES,
        ciphertexts=degree * CIPHERTEXT_BYTES,
        masked_vector=4 * length if survived else 0,
        revealed_shares=revealed * REVEALED_SHARE_BYTES if survived else 0,
    )


def server_bytes(graph: Mapping[int, Sequence[int]], survivors: Collection[int]) -> int:
    """What the server sends: each client its neighbours' public keys and the
    ciphertexts addressed to it; each survivor the ids of its neighbours, each
    marked survived or dropped (4 bytes an id)."""
    alive = {int(c) for c in survivors}
    total = 0
    for u, vs in graph.items():
        total += len(vs) * (2 * KEY_BYTES + CIPHERTEXT_BYTES)
        if u in alive:
            total += len(vs) * ID_BYTES
    return total


@dataclass(frozen=True, kw_only=True)
class ProtocolResult:
    """One round of :func:`run_protocol`.

    Attributes
    ----------
    total
        The unmasked uint32 sum of the survivors' vectors.
    graph
        Each client's neighbours.
    client_bytes
        Bytes each client sent, by message.
    server_bytes
        Bytes the server sent (:func:`server_bytes`).
    seconds
        Wall-clock seconds per phase, for all clients together: ``keys``
        (secrets and advertise), ``share``, ``mask``, ``sum``, ``reveal``,
        ``unmask``.
    """

    total: np.ndarray
    graph: dict[int, tuple[int, ...]]
    client_bytes: dict[int, MessageBytes]
    server_bytes: int
    seconds: dict[str, float]


def run_protocol(
    vectors: Mapping[int, np.ndarray],
    *,
    dropped: Collection[int],
    key: bytes,
    round_: int,
    settings: SecAggSettings,
    graph_rng: np.random.Generator,
) -> ProtocolResult:
    """One round played in one process: every client in ``vectors`` shares its
    keys, those not in ``dropped`` send their masked vector and reveal, the
    server unmasks.

    Parameters
    ----------
    vectors
        Each client's uint32 vector (same length; a dropped client's is unused).
    dropped
        Clients that drop out after sharing their keys.
    key
        The project's 32-byte secret key.
    settings
        k and t (the quantization settings are not used here).
    graph_rng
        The graph's generator (e.g. ``rng_for(seed, "secagg_graph", round_)``).

    Raises
    ------
    ValueError
        :func:`settings_problem` for these clients.
    UnmaskError
        Too many clients dropped out.
    """
    clients = sorted(int(c) for c in vectors)
    problem = settings_problem(settings, len(clients))
    if problem is not None:
        raise ValueError(problem)
    gone = {int(c) for c in dropped}
    alive = [u for u in clients if u not in gone]
    t = settings.reconstruction_threshold
    seconds: dict[str, float] = {}

    start = time.perf_counter()
    secrets = {u: client_secrets(key, u, round_) for u in clients}
    keys = {u: advertise(secrets[u]) for u in clients}
    graph = neighbours(clients, settings.num_shares, graph_rng)
    seconds["keys"] = time.perf_counter() - start

    start = time.perf_counter()
    inbox: dict[int, dict[int, bytes]] = {u: {} for u in clients}
    for u in clients:
        own = {v: keys[v] for v in graph[u]}
        for v, ciphertext in share_keys(u, secrets[u], own, t, round_).items():
            inbox[v][u] = ciphertext
    seconds["share"] = time.perf_counter() - start

    start = time.perf_counter()
    masked = {
        u: masked_input(
            u, secrets[u], {v: keys[v] for v in graph[u]}, vectors[u], round_
        )
        for u in alive
    }
    seconds["mask"] = time.perf_counter() - start

    start = time.perf_counter()
    total: np.ndarray | None = None
    for u in alive:
        total = add_masked(total, masked[u])
    seconds["sum"] = time.perf_counter() - start
    if total is None:
        raise UnmaskError("secure aggregation: every client dropped out")

    start = time.perf_counter()
    revealed = {
        v: reveal(
            v,
            secrets[v],
            {u: keys[u] for u in graph[v]},
            inbox[v],
            [u for u in graph[v] if u not in gone],
            [u for u in graph[v] if u in gone],
            round_,
        )
        for v in alive
    }
    seconds["reveal"] = time.perf_counter() - start

    start = time.perf_counter()
    result = unmask(
        total,
        public_keys=keys,
        graph=graph,
        revealed=revealed,
        survivors=alive,
        dropped=sorted(gone),
        threshold=t,
        round_=round_,
    )
    seconds["unmask"] = time.perf_counter() - start

    length = int(np.asarray(next(iter(vectors.values()))).size)
    sent = {
        u: client_bytes(
            degree=len(graph[u]),
            length=length,
            survived=u not in gone,
            revealed=len(revealed.get(u, {})),
        )
        for u in clients
    }
    return ProtocolResult(
        total=result,
        graph=graph,
        client_bytes=sent,
        server_bytes=server_bytes(graph, alive),
        seconds=seconds,
    )
