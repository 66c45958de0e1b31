"""Compressed client updates: what a client sends instead of its float32 delta.

A client's update delta is a list of float arrays, one per weight array of the
model in ``model.get_weights()`` order (float32 or float64). A :class:`Codec`
encodes it into a :class:`Payload` (the arrays that cross the wire, plus the
layers' shapes the server already knows) and decodes a payload back to float64
arrays. Decoding is deterministic, so the client's decode and the server's agree
bit for bit; encoding draws from the ``rng`` it is given (the caller's
``rng_for(seed, "compress", round, client)``).

- :class:`Int8Codec`: per array symmetric 8-bit linear quantization with
  unbiased stochastic rounding (1 byte a coordinate, 4 bytes an array).
- :class:`QSGDCodec`: QSGD, Alistarh et al. (2017), "QSGD: Communication-
  Efficient SGD via Gradient Quantization and Encoding",
  https://arxiv.org/abs/1610.02132; sign and level in ``bits`` bits a
  coordinate, unbiased.
- :class:`TopKCodec`: the largest-magnitude fraction of the whole update's
  coordinates (8 bytes each: a float32 value, a uint32 index); biased, so used
  with :func:`with_error_feedback`: Stich et al. (2018), "Sparsified SGD with
  Memory", https://arxiv.org/abs/1809.07599; Karimireddy et al. (2019), "Error
  Feedback Fixes SignSGD and other Gradient Compression Schemes",
  https://arxiv.org/abs/1901.09847.

Pure NumPy: no Keras, Prefect or DVC.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np

from fedpipe.core.errors import SettingError

Weights = list[np.ndarray]
Shapes = tuple[tuple[int, ...], ...]

#: the values of ``compression.uplink``
CODECS = ("none", "int8", "qsgd", "topk")

#: largest int8 code (codes lie in ``[-INT8_LEVELS, INT8_LEVELS]``)
INT8_LEVELS = 127
#: bits a coordinate that :class:`QSGDCodec` accepts, inclusive
QSGD_BITS = (2, 8)
#: bytes a coordinate of the uncompressed reply (float32)
PLAIN_BYTES = 4


@dataclass(frozen=True, eq=False)
class Payload:
    """One compressed update: what a client sends back.

    Equality is identity (the fields hold arrays); compare ``arrays`` to compare
    contents.

    Attributes
    ----------
    codec : str
        The :attr:`Codec.tag` of the codec that made it (e.g. ``"qsgd-4bit"``).
    arrays : tuple of numpy.ndarray
        Exactly what crosses the wire (int8 codes, bit-packed uint8, float32
        scales or norms, uint32 indices, float32 values).
    shapes : tuple of tuple of int
        The layers' shapes, in weight order; known to the server, not counted in
        :attr:`nbytes`.
    """

    codec: str
    arrays: tuple[np.ndarray, ...]
    shapes: Shapes

    @property
    def nbytes(self) -> int:
        """Bytes that cross the wire: the sum of ``arrays``' ``nbytes``."""
        return sum(int(a.nbytes) for a in self.arrays)


class Codec(ABC):
    """Encodes an update into a :class:`Payload` and decodes it back.

    A subclass sets :attr:`name` (its value in :data:`CODECS`) and implements
    :meth:`encode` and :meth:`decode`; ``decode(encode(delta, rng))`` has the
    layers' shapes, and decoding is deterministic.
    """

    name: ClassVar[str]

    @property
    def tag(self) -> str:
        """The label a payload carries: :attr:`name` plus any setting that
        decoding needs."""
        return self.name

    @abstractmethod
    def encode(self, delta: Sequence[np.ndarray], rng: np.random.Generator) -> Payload:
        """Compress ``delta`` (float arrays in weight order), drawing from ``rng``."""

    @abstractmethod
    def decode(self, payload: Payload) -> Weights:
        """The update a payload stands for: float64 arrays of ``payload.shapes``."""

    def check_payload(self, payload: Payload, n_arrays: int) -> None:
        """Refuse a payload that another codec made or that is malformed."""
        if payload.codec != self.tag or len(payload.arrays) != n_arrays:
            raise ValueError(
                f"a {payload.codec!r} payload of {len(payload.arrays)} arrays "
                f"cannot be decoded by the {self.tag!r} codec"
            )


def float64_update(delta: Sequence[np.ndarray]) -> Weights:
    """``delta`` as float64 arrays; a NaN or infinite coordinate is refused."""
    out = [np.asarray(d, dtype=np.float64) for d in delta]
    for i, d in enumerate(out):
        if not np.all(np.isfinite(d)):
            raise ValueError(f"update array {i} has a NaN or infinite value")
    return out


def shapes_of(delta: Sequence[np.ndarray]) -> Shapes:
    """The shapes of ``delta``'s arrays, as tuples of int."""
    return tuple(tuple(int(n) for n in np.shape(d)) for d in delta)


def sizes_of(shapes: Shapes) -> list[int]:
    """Coordinates in each shape."""
    return [math.prod(s) for s in shapes]


def plain_nbytes(shapes: Sequence[Sequence[int]]) -> int:
    """Bytes of the uncompressed reply: 4 (float32) a coordinate of ``shapes``."""
    return PLAIN_BYTES * sum(math.prod(s) for s in shapes)


def split(flat: np.ndarray, shapes: Shapes) -> Weights:
    """A flat float64 vector cut into arrays of ``shapes``, in order."""
    bounds = np.cumsum([0, *sizes_of(shapes)])
    return [
        np.asarray(flat[a:b], dtype=np.float64).reshape(s)
        for a, b, s in zip(bounds[:-1], bounds[1:], shapes, strict=True)
    ]


def float32_at_least(value: float) -> np.float32:
    """The smallest float32 not below ``value`` (a nonnegative float64).

    Scales and norms are sent as float32; rounding them up keeps every
    coordinate within the codes' range.
    """
    out = np.float32(value)
    while float(out) < value:
        out = np.nextafter(out, np.float32(np.inf))
    if not np.isfinite(out):
        raise ValueError(f"{value!r} exceeds float32's range")
    return out


def stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``floor(x)``, or ``floor(x) + 1`` with probability ``x - floor(x)``:
    unbiased, ``E[round(x)] = x`` (float64 in, float64 out)."""
    low = np.floor(x)
    return low + (rng.random(x.shape) < x - low)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned codes (each below ``2**bits``) into ``bits`` bits each,
    big-endian, with :func:`numpy.packbits`: ``ceil(len(codes) * bits / 8)``
    bytes of uint8."""
    columns = np.unpackbits(np.asarray(codes, dtype=np.uint8).reshape(-1, 1), axis=1)
    return np.packbits(columns[:, 8 - bits :].ravel())


def unpack_codes(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The ``count`` codes of ``bits`` bits each in ``packed`` (uint8), the
    inverse of :func:`pack_codes`."""
    flat = np.unpackbits(packed, count=count * bits).reshape(count, bits)
    columns = np.zeros((count, 8), dtype=np.uint8)
    columns[:, 8 - bits :] = flat
    return np.packbits(columns, axis=1).ravel()


@dataclass(frozen=True)
class Int8Codec(Codec):
    """Per array symmetric linear quantization to int8, stochastic rounding.

    ``scale = max|x| / 127`` (float32, rounded up; 0 for an all-zero array),
    codes ``round(x / scale)`` in ``[-127, 127]`` rounded stochastically, so the
    decode ``codes · scale`` is unbiased and within one step (``scale``) of
    ``x``. Payload: the int8 codes of all arrays, concatenated (1 byte a
    coordinate), and one float32 scale an array.
    """

    name: ClassVar[str] = "int8"

    def encode(self, delta: Sequence[np.ndarray], rng: np.random.Generator) -> Payload:
        arrays = float64_update(delta)
        scales = np.zeros(len(arrays), dtype=np.float32)
        codes = []
        for i, x in enumerate(arrays):
            peak = float(np.max(np.abs(x))) if x.size else 0.0
            scales[i] = float32_at_least(peak / INT8_LEVELS)
            y = x.ravel() / float(scales[i]) if peak > 0 else np.zeros(x.size)
            y = np.clip(y, -INT8_LEVELS, INT8_LEVELS)
            codes.append(stochastic_round(y, rng).astype(np.int8))
        flat = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int8)
        return Payload(self.tag, (flat, scales), shapes_of(arrays))

    def decode(self, payload: Payload) -> Weights:
        self.check_payload(payload, 2)
        codes, scales = payload.arrays
        per_coordinate = np.repeat(scales.astype(np.float64), sizes_of(payload.shapes))
        return split(codes.astype(np.float64) * per_coordinate, payload.shapes)


def checked_bits(bits: object) -> int:
    """``bits`` if it is an integer in :data:`QSGD_BITS`, else a ValueError
    naming ``compression.bits``."""
    low, high = QSGD_BITS
    if (
        isinstance(bits, bool)
        or not isinstance(bits, int | np.integer)
        or not low <= int(bits) <= high
    ):
        raise SettingError(
            f"compression.bits: {bits!r} is not allowed; qsgd needs an integer "
            f"{low} <= bits <= {high} (bits a coordinate, sign included)"
        )
    return int(bits)


@dataclass(frozen=True)
class QSGDCodec(Codec):
    """QSGD: each coordinate as sign and one of ``s = 2**(bits-1) - 1`` levels of
    its array's L2 norm (Alistarh et al., 2017).

    Per array: ``ℓ_i = floor(|x_i| / ||x|| · s)``, raised to ``ℓ_i + 1`` with
    probability ``|x_i| / ||x|| · s - ℓ_i``; decoded ``||x|| · sign(x_i) · ℓ_i /
    s``, unbiased and within one step (``||x|| / s``) of ``x_i``. Payload: one
    float32 norm an array (rounded up) and every coordinate's sign bit and level
    packed in ``bits`` bits (:func:`pack_codes`).

    Parameters
    ----------
    bits : int
        Bits a coordinate, sign included: ``2 <= bits <= 8``.
    """

    name: ClassVar[str] = "qsgd"
    bits: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "bits", checked_bits(self.bits))

    @property
    def tag(self) -> str:
        return f"qsgd-{self.bits}bit"

    @property
    def levels(self) -> int:
        """``s = 2**(bits-1) - 1``, the number of nonzero levels."""
        return 2 ** (self.bits - 1) - 1

    def encode(self, delta: Sequence[np.ndarray], rng: np.random.Generator) -> Payload:
        arrays = float64_update(delta)
        s = self.levels
        norms = np.zeros(len(arrays), dtype=np.float32)
        codes = []
        for i, x in enumerate(arrays):
            norm = math.sqrt(float(np.sum(np.square(x))))
            norms[i] = float32_at_least(norm)
            flat = x.ravel()
            ratio = np.abs(flat) / float(norms[i]) * s if norm > 0 else flat * 0.0
            level = stochastic_round(np.minimum(ratio, s), rng).astype(np.uint8)
            sign = (flat < 0).astype(np.uint8) << (self.bits - 1)
            codes.append(sign | level)
        flat_codes = np.concatenate(codes) if codes else np.zeros(0, dtype=np.uint8)
        packed = pack_codes(flat_codes, self.bits)
        return Payload(self.tag, (norms, packed), shapes_of(arrays))

    def decode(self, payload: Payload) -> Weights:
        self.check_payload(payload, 2)
        norms, packed = payload.arrays
        sizes = sizes_of(payload.shapes)
        codes = unpack_codes(packed, self.bits, sum(sizes))
        sign = np.where(codes >> (self.bits - 1), -1.0, 1.0)
        level = (codes & self.levels).astype(np.float64)
        step = np.repeat(norms.astype(np.float64) / self.levels, sizes)
        return split(sign * level * step, payload.shapes)


def checked_fraction(fraction: object) -> float:
    """``fraction`` if it is a number in ``(0, 1]``, else a ValueError naming
    ``compression.fraction``."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float | np.integer | np.floating)
        or not 0 < float(fraction) <= 1
    ):
        raise SettingError(
            f"compression.fraction: {fraction!r} is not allowed; topk needs a "
            "number 0 < fraction <= 1 (the share of coordinates kept)"
        )
    return float(fraction)


def top_k_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Ascending indices of the ``k`` largest ``|values|``, ties broken by the
    lower index (deterministic; O(n) with :func:`numpy.partition`)."""
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    magnitude = np.abs(values)
    threshold = np.partition(magnitude, magnitude.size - k)[magnitude.size - k]
    above = np.flatnonzero(magnitude > threshold)
    tied = np.flatnonzero(magnitude == threshold)[: k - above.size]
    return np.sort(np.concatenate([above, tied]))


@dataclass(frozen=True)
class TopKCodec(Codec):
    """The ``k = ceil(fraction · d)`` largest-magnitude coordinates of the whole
    update (its ``d`` coordinates flattened and concatenated in weight order);
    the rest decode to zero. Ties go to the lower index; the rng is unused.

    ``fraction`` counts as written (``0.07`` of 100 coordinates keeps 7, not the
    8 that its binary float times 100 would round up to). Payload: float32
    values and uint32 flat indices (ascending), 8 bytes a kept coordinate.

    Parameters
    ----------
    fraction : float
        Share of the coordinates kept, ``0 < fraction <= 1``.
    """

    name: ClassVar[str] = "topk"
    fraction: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "fraction", checked_fraction(self.fraction))

    def k(self, d: int) -> int:
        """Coordinates kept of ``d``: ``ceil(fraction · d)``."""
        return math.ceil(Fraction(repr(self.fraction)) * d)

    def encode(self, delta: Sequence[np.ndarray], rng: np.random.Generator) -> Payload:
        arrays = float64_update(delta)
        flat = np.concatenate([x.ravel() for x in arrays]) if arrays else np.zeros(0)
        if flat.size > np.iinfo(np.uint32).max:
            raise ValueError(
                f"topk indexes at most 2**32 - 1 coordinates, not {flat.size}"
            )
        kept = top_k_indices(flat, self.k(flat.size))
        values = flat[kept].astype(np.float32)
        return Payload(self.tag, (values, kept.astype(np.uint32)), shapes_of(arrays))

    def decode(self, payload: Payload) -> Weights:
        self.check_payload(payload, 2)
        values, indices = payload.arrays
        flat = np.zeros(sum(sizes_of(payload.shapes)), dtype=np.float64)
        flat[indices.astype(np.int64)] = values.astype(np.float64)
        return split(flat, payload.shapes)


def with_error_feedback(
    codec: Codec,
    delta: Sequence[np.ndarray],
    residual: Sequence[np.ndarray] | None,
    rng: np.random.Generator,
) -> tuple[Payload, Weights]:
    """Compress ``delta + residual`` and carry what was lost to the next round.

    Returns the payload and the new residual ``(delta + residual) -
    decode(payload)`` (float64, the layers' shapes), so over rounds the decoded
    updates plus the last residual sum to the deltas (Stich et al., 2018;
    Karimireddy et al., 2019). ``residual`` None is a zero residual (the first
    round).
    """
    compensated = float64_update(delta)
    if residual is not None:
        carried = float64_update(residual)
        if shapes_of(carried) != shapes_of(compensated):
            raise ValueError(
                f"the residual's shapes {shapes_of(carried)} differ from the "
                f"update's {shapes_of(compensated)}"
            )
        compensated = [d + r for d, r in zip(compensated, carried, strict=True)]
    payload = codec.encode(compensated, rng)
    decoded = codec.decode(payload)
    return payload, [c - d for c, d in zip(compensated, decoded, strict=True)]


def make_codec(
    name: str, *, bits: int | None = None, fraction: float | None = None
) -> Codec | None:
    """The codec of ``compression.uplink``: None for ``"none"`` (plain float32).

    Parameters
    ----------
    name : str
        One of :data:`CODECS`.
    bits : int or None, default None
        ``compression.bits`` for ``"qsgd"`` (required there, ignored elsewhere).
    fraction : float or None, default None
        ``compression.fraction`` for ``"topk"`` (required there, ignored
        elsewhere).

    Raises
    ------
    ValueError
        One line naming the key (``compression.uplink``, ``compression.bits``,
        ``compression.fraction``) and what it accepts.
    """
    if name == "none":
        return None
    if name == "int8":
        return Int8Codec()
    if name == "qsgd":
        return QSGDCodec(bits=checked_bits(bits))
    if name == "topk":
        return TopKCodec(fraction=checked_fraction(fraction))
    raise SettingError(
        f"compression.uplink: {name!r} is not a codec; allowed: {', '.join(CODECS)}"
    )
