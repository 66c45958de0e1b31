"""Compressed updates in the round: the server's model is the strategy on the
decoded replies, bit for bit; bytes both ways in every round record, with the
codecs' ratios; error feedback's residual kept by the client (privately under
DP: :meth:`Params.split_views`); the console's round line shows the bytes."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers_fl import run_federation, runner_for

from fedpipe.core.seeds import rng_for
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import run_client
from fedpipe.observe.history import progress_line
from fedpipe.strategy import ClientUpdate, make_strategy
from fedpipe.wire.compression import make_codec
from fedpipe.wire.uplink import applied, delta_of


class Jobs:
    """Wraps a round's ``map_clients`` and keeps its jobs."""

    def __init__(self) -> None:
        self.jobs: list[list[ClientJob]] = []

    def __call__(self, mapped: Callable) -> Callable:
        def run(jobs: Sequence[ClientJob]) -> list:
            self.jobs.append(list(jobs))
            return list(mapped(jobs))

        return run


@pytest.mark.parametrize(
    "compression",
    [
        {"uplink": "int8"},
        {"uplink": "qsgd", "bits": 4},
        {"uplink": "topk", "fraction": 0.05},
    ],
    ids=["int8", "qsgd", "topk"],
)
def test_the_server_aggregates_the_decoded_replies(
    tmp_path: Path, compression: dict
) -> None:
    """Round 1's model is FedAvg of each client's update as its payload decodes
    (the client's job re-run without its uplink, encoded with the same seeds)."""
    jobs = Jobs()
    weights: list = []
    run_federation(
        tmp_path, clients=5, rounds=1, n_samples=500, map_clients=jobs,
        wire={"compression": compression}, weights_out=weights,
    )  # fmt: skip
    codec = make_codec(
        compression["uplink"], bits=compression.get("bits"),
        fraction=compression.get("fraction"),
    )  # fmt: skip
    updates = []
    for job in jobs.jobs[0]:
        trained = run_client(replace(job, uplink=None), runner_for(job.spec))
        assert isinstance(trained, ClientResult)
        rng = rng_for(job.task.seed, "compress", job.task.round, job.task.client)
        payload = codec.encode(delta_of(job.task, trained.update.weights), rng)
        decoded = applied(job.task.global_weights, codec.decode(payload))
        updates.append(ClientUpdate(job.task.client, decoded, trained.update.n_samples))
    expected, _ = make_strategy("fedavg").aggregate_round(weights[0], updates, {})
    for got, want in zip(weights[1], expected, strict=True):
        assert got.tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def byte_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    out = {}
    for name, compression in {
        "none": {"uplink": "none"},
        "int8": {"uplink": "int8"},
        "topk": {"uplink": "topk", "fraction": 0.01},
    }.items():
        root = tmp_path_factory.mktemp(name)
        out[name] = run_federation(
            root, clients=4, rounds=2, n_samples=400, wire={"compression": compression}
        )
    return out


def test_every_round_record_has_the_bytes_both_ways(byte_runs: dict) -> None:
    for summaries in byte_runs.values():
        for summary in summaries:
            wire = summary["wire"]
            assert wire["clients_sent"] == 4
            assert wire["uplink_bytes"] == 4 * wire["uplink_bytes_per_client"]
            assert wire["downlink_bytes"] == 4 * wire["downlink_bytes_per_client"]
    plain = byte_runs["none"][0]["wire"]
    assert plain["uplink_ratio"] == 1.0  # float32 weights, as trained
    assert plain["downlink_bytes_per_client"] == plain["uplink_bytes_per_client"]


def test_int8_sends_under_0_3_and_topk_1_percent_under_0_05_of_float32(
    byte_runs: dict,
) -> None:
    plain = byte_runs["none"][0]["wire"]["uplink_bytes_per_client"]
    int8 = byte_runs["int8"][0]["wire"]["uplink_bytes_per_client"]
    topk = byte_runs["topk"][0]["wire"]["uplink_bytes_per_client"]
    assert int8 <= 0.3 * plain and topk <= 0.05 * plain  # indices included
    assert byte_runs["int8"][0]["wire"]["uplink_ratio"] == pytest.approx(int8 / plain)


def test_the_round_line_shows_the_bytes(byte_runs: dict) -> None:
    line = progress_line(byte_runs["topk"][0], 2, 1.0)
    assert "↑ " in line and "↓ " in line and ", topk 0.02" in line
    assert line.endswith("×)")  # inside the line's parentheses


def test_error_feedback_keeps_the_residual_as_client_state(tmp_path: Path) -> None:
    jobs = Jobs()
    run_federation(
        tmp_path, clients=4, rounds=2, n_samples=400, map_clients=jobs,
        wire={"compression": {"uplink": "topk", "fraction": 0.01}},
    )  # fmt: skip
    second = jobs.jobs[1][0]
    kept = second.task.state["compression"]
    assert len(kept) == len(second.task.global_weights)
    assert any(np.any(v != 0) for v in kept.values())


def test_under_dp_the_rounds_byte_totals_are_the_oracles(tmp_path: Path) -> None:
    """The totals are the per-client bytes times the clients that sent: how
    many took part is the oracle's; the per-client figures stay public."""
    run_federation(
        tmp_path, clients=4, rounds=1, n_samples=400,
        privacy={"mechanism": "central", "noise_multiplier": 0.5, "delta": 1e-3},
        wire={"compression": {"uplink": "topk", "fraction": 0.05}},
    )  # fmt: skip
    summary = json.loads((tmp_path / "metrics/rounds/round-1.json").read_text())
    assert "uplink_bytes" not in summary["wire"]  # the round's totals: the oracle's
    assert summary["wire"]["uplink_bytes_per_client"] > 0
    oracle = json.loads((tmp_path / ".fedpipe/oracle/round-1.json").read_text())
    assert oracle["summary"]["wire"]["uplink_bytes"] > 0
