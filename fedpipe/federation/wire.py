"""The server's side of the wire: bytes counted both ways, compressed replies decoded.

:class:`WireStep` is a round step (:mod:`fedpipe.federation.steps`) every run
has. With ``compression.uplink`` it gives each client's job a
:class:`~fedpipe.wire.uplink.CompressedUplink` (:meth:`WireStep.client_job`) and
decodes each payload as it arrives (:meth:`WireStep.receive`), so everything
after (the failure checks, attacks, DP, the strategy, the health record) sees
the weights the server reconstructs. In every round it counts what each job
carries to its client (the global weights and the strategy's broadcast: the
downlink) and what each reply carries back (the payload, or the weights and
extras as they are: the uplink), and adds them to the round record's ``wire``
block (:meth:`WireStep.record`). Under DP the round's totals are the oracle's
(:data:`fedpipe.federation.privacy.views.ORACLE_WIRE_KEYS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from fedpipe.federation.steps import RoundStep, Sampler
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.strategy.aggregate import Weights
from fedpipe.wire.compression import Codec
from fedpipe.wire.uplink import CompressedUplink, applied

#: bytes of a float32 coordinate: the uncompressed reply's, for the ratio
FLOAT32_BYTES = 4


def arrays_nbytes(arrays: Sequence[np.ndarray]) -> int:
    """Bytes of ``arrays`` as they are."""
    return int(sum(np.asarray(a).nbytes for a in arrays))


def reply_nbytes(result: ClientResult) -> int:
    """Bytes a client's reply carries: its payload, or its weights and extras."""
    if result.payload is not None:
        return int(result.payload.nbytes)
    update = result.update
    return arrays_nbytes(update.weights) + sum(
        arrays_nbytes(a) for a in update.extras.values()
    )


def job_nbytes(job: ClientJob) -> int:
    """Bytes the server sends a client: the global weights and the broadcast."""
    task = job.task
    return arrays_nbytes(task.global_weights) + sum(
        arrays_nbytes(a) for a in task.broadcast.values()
    )


class WireStep(RoundStep):
    """Bytes counted both ways and, with ``codec``, replies compressed.

    Parameters
    ----------
    codec : Codec or None
        ``compression.uplink`` (None: ``none``, the weights as trained).
    error_feedback : bool
        ``compression.error_feedback``: the client keeps what its codec left
        out and adds it to its next update.
    """

    def __init__(
        self, codec: Codec | None = None, *, error_feedback: bool = False
    ) -> None:
        self.codec, self.error_feedback = codec, error_feedback
        self.down: list[int] = []
        self.up: list[int] = []
        self.coordinates = 0

    def __repr__(self) -> str:
        name = "none" if self.codec is None else self.codec.name
        return f"WireStep({name}, error_feedback={self.error_feedback})"

    def start(self, round_: int, sampled: Sampler) -> WireStep:
        """A fresh counter for ``round_``."""
        return WireStep(self.codec, error_feedback=self.error_feedback)

    def client_job(self, round_: int, job: ClientJob) -> ClientJob:
        self.down.append(job_nbytes(job))
        self.coordinates = sum(int(np.size(w)) for w in job.task.global_weights)
        if self.codec is None:
            return job
        uplink = CompressedUplink(self.codec, error_feedback=self.error_feedback)
        return replace(job, uplink=uplink)

    def receive(self, round_: int, before: Weights, returned: list[Any]) -> list[Any]:
        out = []
        for reply in returned:
            if isinstance(reply, ClientResult):
                self.up.append(reply_nbytes(reply))
                if self.codec is not None and reply.payload is not None:
                    reply = _decoded(self.codec, before, reply)
            out.append(reply)
        return out

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the round's ``wire`` block."""
        return {**fields, "wire": self.block()}

    def block(self) -> dict[str, Any]:
        """The round's bytes: totals, per client, and the uplink's ratio to the
        float32 weights."""
        sent, jobs = len(self.up), len(self.down)
        up = sum(self.up) / sent if sent else 0.0
        plain = FLOAT32_BYTES * self.coordinates
        return {
            "uplink": "none" if self.codec is None else self.codec.name,
            "clients_sent": sent,
            "uplink_bytes": int(sum(self.up)),
            "downlink_bytes": int(sum(self.down)),
            "uplink_bytes_per_client": round(up, 1),
            "downlink_bytes_per_client": round(sum(self.down) / jobs, 1)
            if jobs
            else 0.0,
            "uplink_ratio": round(up / plain, 6) if plain and sent else None,
        }


def _decoded(codec: Codec, before: Weights, result: ClientResult) -> ClientResult:
    """``result`` with the weights its payload stands for (``before`` plus the
    decoded delta, in the model's dtype) and no payload."""
    assert result.payload is not None
    weights = applied(before, codec.decode(result.payload))
    return replace(result, update=replace(result.update, weights=weights), payload=None)
