"""DP noise keyed by a secret (issue 25, item 1): nobody with the project's
versioned and pushed files can regenerate and subtract it; the key's owner
reproduces a run bit for bit; the key file stays out of git and DVC."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedpipe.client.base import ClientTask, LocalDP
from fedpipe.client.localdp import released
from fedpipe.config import layout
from fedpipe.config.params import load_params, parse_params, round_chain
from fedpipe.config.privacy import Privacy
from fedpipe.core.errors import FedpipeError
from fedpipe.core.secretkey import SecretKeyError, load_or_create_key
from fedpipe.core.seeds import keyed_rng, rng_for
from fedpipe.core.weights import load_weights
from fedpipe.federation.build import private_strategy
from fedpipe.federation.privacy.mechanism import (
    client_key,
    gaussian_like,
    global_norm,
    privacy_rng,
)
from fedpipe.federation.privacy.rounds import PrivateStrategy, aggregate_round
from fedpipe.observe.history import final_table, progress_line
from fedpipe.strategy import ClientUpdate, make_strategy
from fedpipe_app.project import init_project, template_text

sys.path.insert(0, str(Path(__file__).parent))
from helpers_fl import run_federation  # noqa: E402

SIGMA, CLIP, CLIENTS, ROUNDS = 1.0, 1.0, 4, 2


def _private_run(root: Path, **privacy: object) -> list[dict]:
    """A central-DP FedAvg run (every client every round), weights published."""
    return run_federation(
        root,
        n_samples=300,
        clients=CLIENTS,
        rounds=ROUNDS,
        seed=7,
        privacy={
            "mechanism": "central",
            "noise_multiplier": SIGMA,
            "clip_norm": CLIP,
            **privacy,
        },
        save_models=True,
    )


def _stripped_norm(root: Path, round_: int, rng: np.random.Generator) -> float:
    """The attacker's move: the published round-K update minus the noise drawn
    from ``rng`` (``w_K = w_{K-1} + (sum of clipped deltas + z) / m``), its norm.
    Equal to the recorded noise-free ``signal_norm`` iff ``rng`` is the round's."""
    before = load_weights(root / layout.model_weights(round_ - 1))
    after = load_weights(root / layout.model_weights(round_))
    delta = [
        np.asarray(a, np.float64) - np.asarray(b, np.float64)
        for a, b in zip(after, before, strict=True)
    ]
    noise = gaussian_like(rng, delta, SIGMA * CLIP)
    return global_norm([d - z / CLIENTS for d, z in zip(delta, noise, strict=True)])


def test_the_published_files_do_not_give_the_noise_away(tmp_path: Path) -> None:
    summaries = _private_run(tmp_path)
    seed = load_params(tmp_path / "params.yaml").seed  # all the attacker needs
    key = (tmp_path / layout.DP_KEY).read_bytes()  # what the attacker lacks
    for k, summary in enumerate(summaries, start=1):
        record = summary["privacy"]
        signal, noise = record["signal_norm"], record["noise_norm"]
        assert record["noise_key"] == "secret" and "guarantee" not in record
        assert noise > 5 * signal  # subtracting the noise is the only way in
        # the old derivation (seed and round from params.yaml)
        old = _stripped_norm(tmp_path, k, rng_for(seed, "privacy", k))
        # the new derivation with a guessed key
        guessed = _stripped_norm(tmp_path, k, keyed_rng(bytes(32), seed, "privacy", k))
        for attempt in (old, guessed):
            assert abs(attempt - signal) > 0.5 * noise, (attempt, signal, noise)
        # with the key the same subtraction recovers the signal: the test can fail
        owner = _stripped_norm(tmp_path, k, privacy_rng(seed, k, key=key))
        assert owner == pytest.approx(signal, rel=1e-3, abs=1e-4)


def test_the_debug_mode_says_the_guarantee_does_not_hold(tmp_path: Path) -> None:
    summaries = _private_run(tmp_path, noise_key="params_not_private")
    assert not (tmp_path / layout.DP_KEY).exists()  # no key made or read
    seed = load_params(tmp_path / "params.yaml").seed
    for k, summary in enumerate(summaries, start=1):
        record = summary["privacy"]
        assert record["noise_key"] == "params_not_private"
        assert "epsilon does not hold" in record["guarantee"]
        # and indeed: params.yaml alone strips the noise
        stripped = _stripped_norm(tmp_path, k, rng_for(seed, "privacy", k))
        assert stripped == pytest.approx(record["signal_norm"], rel=1e-3, abs=1e-4)
    assert "NOT PRIVATE" in progress_line(summaries[-1], ROUNDS, 1.0)
    assert "NOT PRIVATE" in final_table(summaries[-1])


# ---------------------------------------------------------------- same key, same bits

BEFORE = [np.zeros((3, 2), np.float32), np.zeros(4, np.float32)]
UPDATES = [
    ClientUpdate(c, [np.full(w.shape, 0.1 * (c + 1), np.float32) for w in BEFORE], 10)
    for c in range(3)
]


def _aggregate(mechanism: str, key: bytes | None, noise_key: str = "secret") -> bytes:
    """The round's new weights; under local DP each client noises its update in
    its job with ``key`` (and the server gets none), else the server does."""
    privacy = Privacy(mechanism, 1.0, 1.0, 1e-5, 10, 3, noise_key=noise_key)
    updates, server_key = UPDATES, key
    if privacy.noised_by_clients:
        dp = LocalDP(1.0, 1.0, key=key)
        updates = [
            ClientUpdate(
                u.client,
                released(dp, ClientTask(u.client, 1, BEFORE, seed=1), u.weights),
                u.n_samples,
            )
            for u in UPDATES
        ]
        server_key = None
    weights, _, _ = aggregate_round(
        privacy,
        make_strategy("fedavg"),
        BEFORE,
        updates,
        {},
        seed=1,
        round_=1,
        key=server_key,
    )
    return b"".join(w.tobytes() for w in weights)


@pytest.mark.parametrize("mechanism", ["central", "local"])
def test_identical_params_differ_by_key_and_repeat_with_it(mechanism: str) -> None:
    one, other = os.urandom(32), os.urandom(32)
    assert _aggregate(mechanism, one) == _aggregate(mechanism, one)
    assert _aggregate(mechanism, one) != _aggregate(mechanism, other)
    assert _aggregate(mechanism, one) != _aggregate(
        mechanism, None, "params_not_private"
    )


def test_two_runs_with_different_key_files_differ(tmp_path: Path) -> None:
    def run(name: str, key: bytes | None = None) -> bytes:
        root = tmp_path / name
        root.mkdir()
        _private_run_with(root, key)
        return (root / layout.model_weights(1)).read_bytes()

    first = run("a")
    again = run("b", (tmp_path / "a" / layout.DP_KEY).read_bytes())
    fresh = run("c")  # its own key file, made at first use
    assert first == again
    assert first != fresh


def _private_run_with(root: Path, key: bytes | None) -> None:
    run_federation(
        root,
        n_samples=200,
        clients=3,
        rounds=1,
        seed=3,
        privacy={"mechanism": "central", "noise_multiplier": 1.0},
        dp_key=key,
        save_models=True,
    )


def test_local_dp_keys_are_per_client_and_not_the_central_one() -> None:
    key = os.urandom(32)
    keys = {client_key(key, c) for c in range(20)}
    assert len(keys) == 20 and key not in keys
    a = privacy_rng(0, 1, 3, key=key).normal(size=4)
    b = keyed_rng(key, 0, "privacy", 1, 3).normal(size=4)  # master key, no derivation
    assert not np.array_equal(a, b)


def test_a_secret_mode_without_a_key_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the project's secret key"):
        _aggregate("central", None)
    with pytest.raises(ValueError, match="pass key=None"):
        _aggregate("central", os.urandom(32), "params_not_private")


def test_local_dps_server_holds_no_key() -> None:
    privacy = Privacy("local", 1.0, 1.0, 1e-5, 10, 3)
    with pytest.raises(ValueError, match="the server holds no key"):
        aggregate_round(
            privacy, make_strategy("fedavg"), BEFORE, UPDATES, {}, seed=1,
            round_=1, key=os.urandom(32),
        )  # fmt: skip
    server = private_strategy(
        make_strategy("fedavg"), privacy, seed=1, key=os.urandom(32)
    )
    assert isinstance(server, PrivateStrategy) and server._key is None


# ---------------------------------------------------------------- the key file


def test_the_key_file_is_made_once_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / layout.DP_KEY
    key = load_or_create_key(path)
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_or_create_key(path) == key
    assert load_or_create_key(tmp_path / "other.key") != key


def test_a_key_file_others_may_read_or_of_the_wrong_size_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dp.key"
    load_or_create_key(path)
    path.chmod(0o644)
    with pytest.raises(SecretKeyError) as err:
        load_or_create_key(path)
    assert isinstance(err.value, FedpipeError)
    assert "chmod 600" in str(err.value) and "\n" not in str(err.value)
    path.chmod(0o600)
    path.write_bytes(b"short")
    with pytest.raises(SecretKeyError, match="expected a secret key of 32 bytes"):
        load_or_create_key(path)


def test_the_round_stage_reads_the_key_from_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedpipe.federation.roundfiles import noise_key

    monkeypatch.chdir(tmp_path)
    base = {"federation": {"rounds": 1}, "round_chain": round_chain(1)}
    assert noise_key(parse_params(base)) is None
    debug = {"mechanism": "central", "noise_key": "params_not_private"}
    assert noise_key(parse_params({**base, "privacy": debug})) is None
    assert not layout.DP_KEY.exists()
    key = noise_key(parse_params({**base, "privacy": {"mechanism": "central"}}))
    assert key == layout.DP_KEY.read_bytes()


def test_no_stage_reads_or_writes_the_key() -> None:
    stages = yaml.safe_load(template_text("dvc.yaml"))["stages"]
    text = yaml.safe_dump(stages)
    assert ".fedpipe" not in text


def test_fedpipe_init_ignores_the_key_in_git_and_dvc(tmp_path: Path) -> None:
    project = init_project(tmp_path / "study", remote=str(tmp_path / "remote"))
    load_or_create_key(project / layout.DP_KEY)
    git = subprocess.run(
        ["git", "check-ignore", "-q", str(layout.DP_KEY)], cwd=project, check=False
    )
    assert git.returncode == 0  # ignored
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".fedpipe" not in status
    dvc = Path(sys.executable).with_name("dvc")
    ignored = subprocess.run(
        [str(dvc), "check-ignore", str(layout.DP_KEY)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, DVC_NO_ANALYTICS="1"),
    )
    assert ignored.returncode == 0, ignored.stdout + ignored.stderr
    assert str(layout.DP_KEY) in ignored.stdout
