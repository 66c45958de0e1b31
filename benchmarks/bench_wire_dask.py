"""Bytes a Dask worker ships back per round, by codec (``compression.uplink``).

The default workload (the 5,000 MNIST digits, 10 IID clients, small_cnn, every
client each round; :func:`bench_dask_bytes._project`) runs ``--rounds`` rounds of
:func:`fedpipe.federation.loop.run_federation` on one 2-worker ``LocalCluster``
(single-threaded worker processes, as ``runtime.runner: dask`` starts) for each
uplink: ``none``, ``int8``, ``qsgd`` 4-bit and ``topk`` 1 %, all without error
feedback, and ``topk`` 1 % with it (its residual is client state, which the
simulation keeps in the project: it travels back with the result). The jobs go
as ``runtime.runner: dask`` sends them (:func:`tasks.federation.train_on_dask`):
one group a client (up to 10 clients a round), pickled by
:func:`orchestration.usercode.dump_jobs`, run by
:func:`orchestration.usercode.train_shipped` and collected with ``Future.result()``.

How the results come back: the run's process is not a Dask worker, so
``Client.gather`` (``direct=None``, ``distributed.client.direct-to-workers:
null``) asks the scheduler, whose ``gather`` handler fetches each result from
its worker with the worker's ``get_data`` handler and hands the frames on to
the client unchanged (the scheduler does not deserialize). What a worker ships
back is therefore what its ``get_data`` writes: ``Worker.get_data`` logs every
such transfer in ``Worker.transfer_outgoing_log``, whose ``compressed`` field is
the byte count ``comm.write`` returns (frames and their headers as sent; no
compression library is installed, so bytes as pickled). Per round it reports

* ``shipped``: the sum of ``compressed`` over the round's ``get_data`` transfers
  of both workers (read on the workers with ``Client.run``);
* ``Worker.transfer_outgoing_bytes_total``'s increase, for contrast: it adds
  Dask's ``sizeof`` estimate of each result, not its serialized bytes (a tuple
  of dataclasses is sized as the objects' shells, a few hundred bytes);
* the ClientResults pickled (``cloudpickle.dumps``, summed over clients), and
  the part of that which is not the update (the result with no weights and no
  payload: local metrics, ``n_test``, ``train_loss``, the state, class names);
* the codec's payload bytes and ratio from the round record's ``wire`` block
  (``uplink_bytes``, ``uplink_ratio``).

Run from the repository root::

    python benchmarks/bench_wire_dask.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: (label, ``compression.*``) of each variant, in the order run
CODECS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("none", {"uplink": "none"}),
    ("int8", {"uplink": "int8"}),
    ("qsgd 4-bit", {"uplink": "qsgd", "bits": 4}),
    ("topk 1 %", {"uplink": "topk", "fraction": 0.01, "error_feedback": False}),
    (
        "topk 1 % + error feedback",
        {"uplink": "topk", "fraction": 0.01, "error_feedback": True},
    ),
)


async def _shipped(dask_worker: Any) -> tuple[int, int, int]:
    """This worker's finished ``get_data`` transfers, the bytes they wrote
    (``compressed``, summed over its whole log) and its
    ``transfer_outgoing_bytes_total``; waits for a transfer under way to be
    logged."""
    while dask_worker.transfer_outgoing_count:
        await asyncio.sleep(0.01)
    log = dask_worker.transfer_outgoing_log
    return (
        len(log),
        sum(int(e["compressed"]) for e in log),
        dask_worker.transfer_outgoing_bytes_total,
    )


def _on_worker_totals(client: Any) -> tuple[int, int, int]:
    """:func:`_shipped` summed over the workers."""
    per_worker = client.run(_shipped).values()
    return tuple(sum(v[i] for v in per_worker) for i in range(3))  # type: ignore[return-value]


def _without_update(result: Any) -> Any:
    """``result`` with no weights and no payload: what travels besides the
    update."""
    return replace(result, update=replace(result.update, weights=[]), payload=None)


def _on_dask(client: Any, rows: list[dict], label: str) -> Any:
    """A ``map_clients`` sending each client's job to the cluster as
    ``runtime.runner: dask`` does, and adding a row per round to ``rows``."""
    import cloudpickle

    from flows.stages import client_groups
    from orchestration.usercode import dump_jobs, train_shipped

    def run(jobs: Any) -> list:
        before = _on_worker_totals(client)
        groups = client_groups(jobs, None, spread=True)
        futures = [
            client.submit(train_shipped, dump_jobs(g), None, pure=False) for g in groups
        ]
        out = []
        for future in futures:
            results, _compiled = future.result()
            out.extend(results)
        del futures
        after = _on_worker_totals(client)
        rows.append(
            {
                "codec": label,
                "round": jobs[0].task.round,
                "clients": len(out),
                "transfers": after[0] - before[0],
                "shipped": after[1] - before[1],
                "sizeof": after[2] - before[2],
                "pickled": sum(len(cloudpickle.dumps(r)) for r in out),
                "rest": sum(len(cloudpickle.dumps(_without_update(r))) for r in out),
                "state": sum(
                    sum(a.nbytes for ns in r.state.values() for a in ns.values())
                    for r in out
                ),
            }
        )
        return out

    return run


def _table(rows: list[dict], records: dict[str, list[dict]]) -> list[str]:
    """The per-codec summary (means over the rounds) as Markdown lines."""
    kib = 1024
    mean: dict[str, dict[str, float]] = {}
    for label, _ in CODECS:
        mine = [r for r in rows if r["codec"] == label]
        wire = records[label]
        mean[label] = {
            key: sum(r[key] for r in mine) / len(mine)
            for key in ("shipped", "sizeof", "pickled", "rest", "state", "transfers")
        }
        mean[label]["payload"] = sum(w["uplink_bytes"] for w in wire) / len(wire)
        mean[label]["ratio"] = wire[0]["uplink_ratio"]
    base = mean["none"]
    lines = [
        "| uplink | payload KiB/round | codec's `uplink_ratio` | shipped KiB/round "
        "| shipped / none's | shipped - payload KiB | pickled ClientResults KiB "
        "| / none's | not the update KiB | of which state KiB "
        "| `transfer_outgoing_bytes_total` B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, m in mean.items():
        lines.append(
            f"| {label} | {m['payload'] / kib:,.1f} | **{m['ratio']:.4f}** | "
            f"{m['shipped'] / kib:,.1f} | **{m['shipped'] / base['shipped']:.4f}** | "
            f"{(m['shipped'] - m['payload']) / kib:,.1f} | {m['pickled'] / kib:,.1f} | "
            f"{m['pickled'] / base['pickled']:.4f} | {m['rest'] / kib:,.1f} | "
            f"{m['state'] / kib:,.1f} | {m['sizeof']:,.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from bench_dask_bytes import _project
    from benchkit import dask_client

    from fedpipe.config.params import CompressionParams
    from fedpipe.federation.build import model_spec
    from fedpipe.federation.loop import OnRound, first_round, run_federation
    from fedpipe.model.process import runner_for

    params, data = _project("bench-wire-dask-")
    spec = model_spec(params, data.spec)
    rows: list[dict] = []
    records: dict[str, list[dict]] = {}
    with dask_client() as client:
        for label, compression in CODECS:
            settings = params.model_copy(
                update={"compression": CompressionParams(**compression)}
            )
            wire: list[dict] = []
            run_federation(
                first_round(settings, spec=spec, data=data),
                rounds=args.rounds,
                map_clients=_on_dask(client, rows, label),
                runner=runner_for(spec),
                callbacks=[OnRound(lambda out, w=wire: w.append(out.record.wire))],
            )
            records[label] = wire
    print(
        f"default run: {len(data.clients)} clients a round, {spec.name}, "
        f"{args.rounds} rounds per uplink"
    )
    print("| uplink | round | get_data transfers | shipped B | pickled results B |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['codec']} | {r['round']} | {r['transfers']} | "
            f"{r['shipped']:,} | {r['pickled']:,} |"
        )
    print()
    print("\n".join(_table(rows, records)))


if __name__ == "__main__":
    main()
