"""SecAgg+ (fedpipe.wire.secagg): masks cancel, dropouts, what the server sees,
quantization, determinism, the graph and the settings' problems."""

from __future__ import annotations

import typing
from collections.abc import Iterator

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag

from fedpipe.wire import secagg
from fedpipe.wire.secagg import (
    ClientSecrets,
    SecAggSettings,
    UnmaskError,
    advertise,
    client_secrets,
    default_num_shares,
    default_settings,
    default_threshold,
    dequantize,
    masked_input,
    neighbours,
    quantize,
    reveal,
    run_protocol,
    scale,
    settings_problem,
    share_keys,
    unmask,
)

KEY = bytes(range(32))
C, BITS = 8.0, 20


def _vectors(n: int, length: int = 300, seed: int = 0) -> dict[int, np.ndarray]:
    """Each client's update in [-2c, 2c] (some clipped), quantized."""
    rng = np.random.default_rng(seed)
    return {
        u: quantize(
            rng.uniform(-2 * C, 2 * C, size=length),
            clipping_range=C,
            bits=BITS,
            rng=rng,
        )
        for u in range(n)
    }


def _plain_sum(vectors: dict[int, np.ndarray], dropped: set[int]) -> np.ndarray:
    total = np.zeros_like(next(iter(vectors.values())))
    for u, x in vectors.items():
        if u not in dropped:
            total += x
    return total


def _run(vectors: dict[int, np.ndarray], dropped: set[int], **kw: object):
    settings = kw.pop("settings", None) or default_settings(len(vectors))
    return run_protocol(
        vectors,
        dropped=dropped,
        key=KEY,
        round_=3,
        settings=settings,
        graph_rng=np.random.default_rng(7),
    )


# --------------------------------------------------------------------------- #
# Masks cancel
# --------------------------------------------------------------------------- #


def test_masks_cancel_for_ten_clients() -> None:
    vectors = _vectors(10)
    result = _run(vectors, set())
    assert np.array_equal(result.total, _plain_sum(vectors, set()))


@pytest.mark.parametrize("dropped", [{4}, {2, 8}], ids=["one", "two"])
def test_masks_cancel_when_clients_drop_after_sharing(dropped: set[int]) -> None:
    vectors = _vectors(10)
    result = _run(vectors, dropped)
    assert np.array_equal(result.total, _plain_sum(vectors, dropped))


def test_too_many_dropouts_name_the_client() -> None:
    settings = SecAggSettings(num_shares=4, reconstruction_threshold=3)
    graph = neighbours(range(10), 4, np.random.default_rng(7))  # run's graph
    victim = 5
    dropped = set(graph[victim][:2])  # 2 of its 4 neighbours: 2 shares left
    alive = sorted(set(range(10)) - dropped)
    short = [u for u in alive if len(set(graph[u]) - dropped) < 3]
    assert victim in short
    with pytest.raises(UnmaskError) as caught:
        _run(_vectors(10), dropped, settings=settings)
    assert str(caught.value) == (
        f"secure aggregation: client {short[0]}'s self-mask has 2 shares from "
        "surviving neighbours, threshold 3 (too many clients dropped out)"
    )


def test_masked_input_differs_from_its_vector_almost_everywhere() -> None:
    vectors = _vectors(5, length=2000)
    secrets = {u: client_secrets(KEY, u, 3) for u in vectors}
    keys = {u: advertise(s) for u, s in secrets.items()}
    others = {v: keys[v] for v in vectors if v != 0}
    y = masked_input(0, secrets[0], others, vectors[0], 3)
    assert np.count_nonzero(y == vectors[0]) <= 2  # 1 in 2^32 each


# --------------------------------------------------------------------------- #
# What the server receives
# --------------------------------------------------------------------------- #


def test_unmask_signature_takes_no_client_secrets() -> None:
    hints = typing.get_type_hints(unmask)
    for name, hint in hints.items():
        assert "ClientSecrets" not in repr(hint), name
    assert "secrets" not in hints


def _walk(value: object) -> Iterator[object]:
    yield value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k)
            yield from _walk(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _walk(v)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from _walk(getattr(value, name))


def test_the_servers_inputs_hold_no_secret_and_no_unmasked_vector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[object] = []

    def recording(real):
        def wrapped(*args, **kwargs):
            seen.append((args, kwargs))
            return real(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(secagg, "unmask", recording(secagg.unmask))
    monkeypatch.setattr(secagg, "add_masked", recording(secagg.add_masked))
    vectors = _vectors(10)
    _run(vectors, {6})
    secret_bytes = set()
    for u in vectors:
        s = client_secrets(KEY, u, 3)
        secret_bytes |= {s.mask_private, s.encryption_private, s.self_mask_seed}
    assert len(seen) == 10  # nine masked vectors added, one unmask
    for item in _walk(seen):
        assert not isinstance(item, ClientSecrets)
        if isinstance(item, bytes):
            assert item not in secret_bytes
        if isinstance(item, np.ndarray) and item.shape == vectors[0].shape:
            assert not any(np.array_equal(item, x) for x in vectors.values())


# --------------------------------------------------------------------------- #
# The client's reveal
# --------------------------------------------------------------------------- #


def _three_clients() -> tuple[dict[int, ClientSecrets], dict, dict[int, bytes]]:
    secrets = {u: client_secrets(KEY, u, 3) for u in range(3)}
    keys = {u: advertise(s) for u, s in secrets.items()}
    to_zero = {
        u: share_keys(u, secrets[u], {v: keys[v] for v in range(3) if v != u}, 2, 3)[0]
        for u in (1, 2)
    }
    return secrets, keys, to_zero


def test_reveal_gives_the_self_mask_of_survivors_and_the_key_of_the_dropped() -> None:
    secrets, keys, to_zero = _three_clients()
    shares = reveal(0, secrets[0], keys, to_zero, [1], [2], 3)
    assert {u: s.kind for u, s in shares.items()} == {1: "self_mask", 2: "mask_key"}


def test_reveal_refuses_a_client_both_survived_and_dropped() -> None:
    secrets, keys, to_zero = _three_clients()
    with pytest.raises(ValueError, match="both survived and dropped"):
        reveal(0, secrets[0], keys, to_zero, [1, 2], [2], 3)


def test_reveal_refuses_a_ciphertext_of_another_round() -> None:
    secrets, keys, to_zero = _three_clients()
    with pytest.raises(InvalidTag):
        reveal(0, secrets[0], keys, to_zero, [1, 2], [], 4)


# --------------------------------------------------------------------------- #
# Quantization
# --------------------------------------------------------------------------- #


def test_stochastic_rounding_is_unbiased() -> None:
    s = scale(C, BITS)
    value = (1234 + 0.3) / s  # a fraction of 0.3 of a step
    draws = 20_000
    q = quantize(
        np.full(draws, value), clipping_range=C, bits=BITS, rng=np.random.default_rng(1)
    )
    mean = dequantize(q, clipping_range=C, bits=BITS).mean()
    stderr = np.sqrt(0.3 * 0.7 / draws) / s
    assert abs(mean - value) < 4 * stderr


def test_dequantized_sum_is_within_n_steps_of_the_float_sum() -> None:
    rng = np.random.default_rng(2)
    floats = [rng.uniform(-C, C, size=500) for _ in range(30)]
    total = np.zeros(500, dtype=np.uint32)
    for x in floats:
        total += quantize(x, clipping_range=C, bits=BITS, rng=rng)
    error = dequantize(total, clipping_range=C, bits=BITS) - np.sum(floats, axis=0)
    assert np.max(np.abs(error)) <= len(floats) / scale(C, BITS)


def test_quantize_clips_at_the_range() -> None:
    q = quantize(
        np.array([-100.0, 100.0, 8.5, -8.5]),
        clipping_range=C,
        bits=BITS,
        rng=np.random.default_rng(0),
    )
    back = dequantize(q, clipping_range=C, bits=BITS)
    assert np.array_equal(back, [-C, C, C, -C])


# --------------------------------------------------------------------------- #
# Determinism
# --------------------------------------------------------------------------- #


def _messages(round_: int) -> tuple[bytes, ...]:
    vectors = _vectors(4, length=50)
    secrets = {u: client_secrets(KEY, u, round_) for u in vectors}
    keys = {u: advertise(s) for u, s in secrets.items()}
    others = {v: keys[v] for v in vectors if v != 0}
    ciphertexts = share_keys(0, secrets[0], others, 2, round_)
    y = masked_input(0, secrets[0], others, vectors[0], round_)
    return (
        keys[0].mask,
        keys[0].encryption,
        *(ciphertexts[v] for v in sorted(ciphertexts)),
        y.tobytes(),
    )


def test_same_key_and_round_give_identical_bytes() -> None:
    assert _messages(3) == _messages(3)


def test_another_round_gives_different_bytes() -> None:
    first, other = _messages(3), _messages(4)
    assert all(a != b for a, b in zip(first, other, strict=True))


# --------------------------------------------------------------------------- #
# The graph and the settings
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(("n", "k"), [(100, 14), (9, 4), (6, 5)])
def test_graph_is_k_regular_and_symmetric(n: int, k: int) -> None:
    graph = neighbours(list(range(n)), k, np.random.default_rng(3))
    assert sorted(graph) == list(range(n))
    for u, vs in graph.items():
        assert len(set(vs)) == k and u not in vs
        assert all(u in graph[v] for v in vs)


def test_default_settings_work_from_2_to_5000_clients() -> None:
    for n in [2, 3, 5, 6, 10, 100, 1000, 4000]:
        k = default_num_shares(n)
        assert settings_problem(default_settings(n), n) is None, n
        assert default_threshold(k) <= k


def test_settings_problem_catches_a_sum_that_could_overflow() -> None:
    settings = SecAggSettings(num_shares=20, reconstruction_threshold=11)
    problem = settings_problem(settings, 5000)  # 5000 x (2^19 - 1) >= 2^31
    assert problem is not None and "overflow" in problem


def test_settings_problem_catches_a_threshold_above_k() -> None:
    settings = SecAggSettings(num_shares=4, reconstruction_threshold=5)
    problem = settings_problem(settings, 10)
    assert problem is not None and "reconstruction_threshold 5" in problem


def test_settings_problem_refuses_a_single_client() -> None:
    settings = SecAggSettings(num_shares=0, reconstruction_threshold=1)
    problem = settings_problem(settings, 1)
    assert problem is not None and "at least 2" in problem
