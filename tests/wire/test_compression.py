"""Compressed client updates (fedpipe.wire.compression): sizes, unbiasedness, error
bounds, top-k selection, error feedback, determinism and the edge cases.

The update of the size tests is 10,000 coordinates in four arrays (a dense layer,
its bias, a second dense layer, its bias), float32 as a Keras model gives it.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedpipe.wire.compression import (
    CODECS,
    Codec,
    Int8Codec,
    Payload,
    QSGDCodec,
    TopKCodec,
    make_codec,
    pack_codes,
    plain_nbytes,
    unpack_codes,
    with_error_feedback,
)

SHAPES = ((95, 100), (100,), (99, 4), (4,))  # 9,500 + 100 + 396 + 4 = 10,000
STOCHASTIC = [Int8Codec(), QSGDCodec(bits=4), QSGDCodec(bits=2), QSGDCodec(bits=8)]
EVERY = [*STOCHASTIC, TopKCodec(fraction=0.01), TopKCodec(fraction=1.0)]


def label(codec: Codec) -> str:
    """A test id: the codec's tag, and a top-k codec's fraction."""
    if isinstance(codec, TopKCodec):
        return f"{codec.tag}-{codec.fraction:g}"
    return codec.tag


def update(seed: int = 0, shapes=SHAPES, dtype=np.float32) -> list[np.ndarray]:
    """A heavy-tailed update of ``shapes`` (Student t, layers of unequal scale)."""
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_t(3, size=s) * 10.0**-i).astype(dtype)
        for i, s in enumerate(shapes)
    ]


def ratio(codec: Codec) -> float:
    """Payload bytes over plain float32 bytes for the 10,000-coordinate update."""
    payload = codec.encode(update(), np.random.default_rng(1))
    return payload.nbytes / plain_nbytes(SHAPES)


def step_of(codec: Codec, x: np.ndarray) -> float:
    """One quantization step of ``codec`` for the array ``x``."""
    if isinstance(codec, QSGDCodec):
        return float(np.linalg.norm(x.astype(np.float64))) / codec.levels
    return float(np.max(np.abs(x))) / 127


def standard_error(step: float, x: np.ndarray, n: int) -> np.ndarray:
    """The standard error of the mean of ``n`` stochastic roundings of ``x`` to
    multiples of ``step`` (``step · sqrt(p (1 - p) / n)``, ``p`` the fraction of
    a step rounded), plus 1e-4 of a step for the float32 scale's rounding."""
    p = np.abs(x) / step % 1.0
    return step * np.sqrt(p * (1 - p) / n) + 1e-4 * step


def test_the_update_has_ten_thousand_coordinates() -> None:
    assert plain_nbytes(SHAPES) == 40_000


def test_int8_payload_is_within_0_3_of_plain_float32() -> None:
    assert ratio(Int8Codec()) <= 0.3


def test_qsgd_4_bit_payload_is_within_0_15_of_plain_float32() -> None:
    assert ratio(QSGDCodec(bits=4)) <= 0.15


def test_topk_1_percent_payload_with_indices_is_within_0_05_of_plain() -> None:
    assert ratio(TopKCodec(fraction=0.01)) <= 0.05


@pytest.mark.parametrize("codec", STOCHASTIC, ids=label)
def test_stochastic_codecs_are_unbiased(codec: Codec) -> None:
    x = np.array([0.3, -1.7, 0.01, 2.2, -0.45, 0.0, 1e-3, -2.5], dtype=np.float64)
    rng = np.random.default_rng(7)
    decodes = np.stack([codec.decode(codec.encode([x], rng))[0] for _ in range(2000)])
    step = step_of(codec, x)
    assert np.all(np.abs(decodes.mean(axis=0) - x) <= 4 * standard_error(step, x, 2000))


@pytest.mark.parametrize("codec", STOCHASTIC, ids=label)
def test_decoded_values_are_within_one_quantization_step(codec: Codec) -> None:
    delta = update(seed=3)
    decoded = codec.decode(codec.encode(delta, np.random.default_rng(3)))
    for x, y in zip(delta, decoded, strict=True):
        assert np.max(np.abs(y - x)) <= step_of(codec, x) * (1 + 1e-6)


def test_topk_keeps_exactly_the_k_largest_and_zeroes_the_rest() -> None:
    delta = update(seed=4)
    flat = np.concatenate([d.ravel() for d in delta]).astype(np.float64)
    decoded = TopKCodec(fraction=0.01).decode(
        TopKCodec(fraction=0.01).encode(delta, np.random.default_rng(0))
    )
    out = np.concatenate([d.ravel() for d in decoded])
    largest = np.argsort(-np.abs(flat), kind="stable")[:100]
    expected = np.zeros_like(flat)
    expected[largest] = flat[largest]
    assert np.count_nonzero(out) == 100
    assert np.array_equal(out, expected)


def test_topk_breaks_ties_by_the_lower_index() -> None:
    delta = [np.array([1.0, -3.0, 2.0]), np.array([[3.0, -2.0], [3.0, 0.5]])]
    decoded = TopKCodec(fraction=0.5).decode(  # k = ceil(3.5) = 4
        TopKCodec(fraction=0.5).encode(delta, np.random.default_rng(0))
    )
    # the three 3s, then 2.0 (index 2) before -2.0 (index 4)
    assert np.array_equal(decoded[0], [0.0, -3.0, 2.0])
    assert np.array_equal(decoded[1], [[3.0, 0.0], [3.0, 0.0]])


def test_topk_counts_the_fraction_as_written() -> None:
    x = np.arange(1.0, 101.0)  # 0.07 * 100 is 7.000000000000001 in floats
    payload = TopKCodec(fraction=0.07).encode([x], np.random.default_rng(0))
    assert payload.arrays[0].size == 7


@pytest.mark.parametrize("codec", EVERY, ids=label)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decode_gives_float64_arrays_of_the_layers_shapes(codec: Codec, dtype) -> None:
    payload = codec.encode(update(dtype=dtype), np.random.default_rng(0))
    decoded = codec.decode(payload)
    assert [d.shape for d in decoded] == list(SHAPES)
    assert all(d.dtype == np.float64 for d in decoded)


@pytest.mark.parametrize("codec", EVERY, ids=label)
def test_error_feedback_telescopes_over_20_rounds(codec: Codec) -> None:
    shapes = ((30, 4), (4,), (7,))
    rng = np.random.default_rng(5)
    residual = None
    sent = [np.zeros(s) for s in shapes]
    total = [np.zeros(s) for s in shapes]
    for t in range(20):
        delta = update(seed=100 + t, shapes=shapes, dtype=np.float64)
        payload, residual = with_error_feedback(codec, delta, residual, rng)
        sent = [a + b for a, b in zip(sent, codec.decode(payload), strict=True)]
        total = [a + b for a, b in zip(total, delta, strict=True)]
    for s, r, d in zip(sent, residual, total, strict=True):
        assert r.dtype == np.float64
        np.testing.assert_allclose(s + r, d, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("codec", EVERY, ids=label)
def test_the_same_seed_gives_the_same_payload_bytes(codec: Codec) -> None:
    def payload_bytes(seed: int) -> list[bytes]:
        payload = codec.encode(update(), np.random.default_rng(seed))
        return [a.tobytes() for a in payload.arrays]

    assert payload_bytes(11) == payload_bytes(11)


@pytest.mark.parametrize("codec", STOCHASTIC, ids=label)
def test_another_seed_gives_other_stochastic_rounding(codec: Codec) -> None:
    def payload_bytes(seed: int) -> list[bytes]:
        payload = codec.encode(update(), np.random.default_rng(seed))
        return [a.tobytes() for a in payload.arrays]

    assert payload_bytes(11) != payload_bytes(12)


@pytest.mark.parametrize("codec", EVERY, ids=label)
def test_a_payload_pickles_to_within_1_kb_of_its_nbytes(codec: Codec) -> None:
    payload = codec.encode(update(), np.random.default_rng(0))
    pickled = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(pickled) <= payload.nbytes + 1024
    again = pickle.loads(pickled)
    assert [a.tobytes() for a in again.arrays] == [a.tobytes() for a in payload.arrays]


@pytest.mark.parametrize("codec", EVERY, ids=label)
def test_all_zero_empty_and_single_coordinate_arrays_work(codec: Codec) -> None:
    delta = [np.zeros((3, 2)), np.zeros(0), np.array([0.7]), np.zeros(1)]
    decoded = codec.decode(codec.encode(delta, np.random.default_rng(0)))
    assert [d.shape for d in decoded] == [(3, 2), (0,), (1,), (1,)]
    assert not np.any(decoded[0]) and not np.any(decoded[3])
    assert abs(decoded[2][0] - 0.7) <= step_of(codec, delta[2]) * (1 + 1e-6)


@pytest.mark.parametrize("codec", EVERY, ids=label)
def test_an_all_zero_update_decodes_to_zeros(codec: Codec) -> None:
    delta = [np.zeros((4, 3)), np.zeros(5)]
    decoded = codec.decode(codec.encode(delta, np.random.default_rng(0)))
    assert all(not np.any(d) for d in decoded)


@pytest.mark.parametrize("bits", range(2, 9))
def test_packed_codes_unpack_to_themselves(bits: int) -> None:
    codes = np.random.default_rng(bits).integers(0, 2**bits, size=37, dtype=np.uint8)
    packed = pack_codes(codes, bits)
    assert packed.nbytes == -(-37 * bits // 8)
    assert np.array_equal(unpack_codes(packed, bits, 37), codes)


def test_a_payload_is_refused_by_another_codec() -> None:
    payload = QSGDCodec(bits=4).encode(update(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="qsgd-4bit"):
        QSGDCodec(bits=8).decode(payload)


def test_a_non_finite_update_is_refused() -> None:
    with pytest.raises(ValueError, match="array 1 has a NaN"):
        Int8Codec().encode([np.zeros(2), np.array([np.nan])], np.random.default_rng(0))


def test_make_codec_builds_each_codec() -> None:
    assert make_codec("none") is None
    assert make_codec("int8") == Int8Codec()
    assert make_codec("qsgd", bits=4) == QSGDCodec(bits=4)
    assert make_codec("topk", fraction=0.01) == TopKCodec(fraction=0.01)
    assert CODECS == ("none", "int8", "qsgd", "topk")


@pytest.mark.parametrize(
    ("name", "settings", "key"),
    [
        ("gzip", {}, "compression.uplink"),
        ("qsgd", {}, "compression.bits"),
        ("qsgd", {"bits": 1}, "compression.bits"),
        ("qsgd", {"bits": 9}, "compression.bits"),
        ("qsgd", {"bits": 4.0}, "compression.bits"),
        ("qsgd", {"bits": True}, "compression.bits"),
        ("topk", {}, "compression.fraction"),
        ("topk", {"fraction": 0.0}, "compression.fraction"),
        ("topk", {"fraction": 1.5}, "compression.fraction"),
        ("topk", {"fraction": float("nan")}, "compression.fraction"),
    ],
)
def test_make_codec_refuses_in_one_line_naming_the_key(name, settings, key) -> None:
    with pytest.raises(ValueError) as caught:
        make_codec(name, **settings)
    message = str(caught.value)
    assert message.startswith(f"{key}: ") and "\n" not in message
    assert "allowed" in message or "needs" in message


def test_payload_nbytes_sums_its_arrays_nbytes() -> None:
    payload = Payload("int8", (np.zeros(3, np.int8), np.zeros(1, np.float32)), ((3,),))
    assert payload.nbytes == 7
