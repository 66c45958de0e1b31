"""What crosses the wire, against accuracy: every uplink codec (none, int8, QSGD
4-bit, top-k 1 % with error feedback) crossed with secure aggregation (none,
SecAgg+) and differential privacy (none; central DP-FedAvg without secure
aggregation, distributed Skellam DP with it), 3 seeds, on two data sets:

- ``mnist5k``: the default workload (``params.yaml`` as it is: the 5,000 built-in
  MNIST digits, 10 IID clients, ``small_cnn``, 10 rounds);
- ``breast_cancer``: scikit-learn's breast cancer table (569 rows, 30 numeric
  columns, ``sklearn.datasets.load_breast_cancer``), the ``mlp``, 10 IID clients,
  fedpipe's federated standardization (the ``preprocess`` stage's fit).

Each cell's settings are built as a ``params.yaml`` would be and validated by
:func:`fedpipe.config.params.parse_params`; a cell its rules refuse (a codec
under secure aggregation, :mod:`fedpipe.config.wire`) is a row naming the rule,
not run. The others run in this process through the library's rounds
(:func:`fedpipe.federation.loop.run_federation`), each seed on its own partition
(``seed`` drives the partition, the initial model, sampling and the codecs).

Per run cell: the global model's held-out accuracy after the last round (mean ±
std over seeds); from the last round record's ``wire`` block the uplink bytes per
client (what each reply carried), SecAgg+'s key-agreement and reveal bytes per
client (its ``secure_aggregation`` block, apart), the uplink's ratio to float32
weights and the downlink bytes per client; wall seconds per round (the median
over a run's rounds, mean over seeds); and epsilon at delta with its accountant
(the last round's ``privacy`` block).

    python scripts/wire_table.py [--seeds 0 1 2] [--rounds 10]
        [--datasets mnist5k breast_cancer] [--uplinks none int8 qsgd4 topk1]
        [--secure none secagg_plus] [--dp off on] [--quick] [--out DIR]

Prints Markdown and writes ``wire_table.md`` and ``wire_table.json`` to ``--out``
(default ``docs/benchmarks/wire_table``). ``--quick``: the table data set, seed 0,
2 rounds (the smoke test's size).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fedpipe.config.params import (  # noqa: E402
    MNIST5K_PATH,
    FederationParams,
    Params,
    ParamsError,
    parse_params,
    round_chain,
)

#: ``compression.*`` of each uplink column value
UPLINKS: dict[str, dict[str, Any]] = {
    "none": {"uplink": "none"},
    "int8": {"uplink": "int8"},
    "qsgd4": {"uplink": "qsgd", "bits": 4},
    "topk1": {"uplink": "topk", "fraction": 0.01, "error_feedback": True},
}
UPLINK_LABELS = {
    "none": "none",
    "int8": "int8",
    "qsgd4": "qsgd 4-bit",
    "topk1": "top-k 1 % + EF",
}
SECURE = ("none", "secagg_plus")
DP = ("off", "on")

#: the DP setting of every DP cell (central without secure aggregation,
#: distributed with it)
NOISE_MULTIPLIER = 0.3
CLIP_NORM = 1.0
DELTA = 1e-3

SOURCE = "wire_table"  # parse_params' name for the cell's settings


@dataclass(frozen=True)
class Dataset:
    """A data set of the table: its settings over ``params.yaml``'s."""

    name: str
    label: str  # for the table's heading
    settings: dict[str, Any]


DATASETS = {
    "mnist5k": Dataset(
        "mnist5k",
        "the default workload: 5,000 built-in MNIST digits, 10 IID clients, "
        "small_cnn (params.yaml's defaults)",
        {},
    ),
    "breast_cancer": Dataset(
        "breast_cancer",
        "scikit-learn breast cancer (569 rows, 30 numeric columns), 10 IID "
        "clients, mlp, federated standardization",
        {
            "data": {"source": "table", "label_column": "target"},
            "model": {"name": "mlp"},
        },
    ),
}


# ------------------------------------------------------------------ settings


def base_settings() -> dict[str, Any]:
    """``params.yaml`` of the repository as a mapping (its round chain left
    out: each cell's is made from its rounds)."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw.pop("round_chain", None)
    return raw


def cell_settings(
    base: dict[str, Any],
    dataset: Dataset,
    *,
    uplink: str,
    secure: str,
    dp: str,
    seed: int,
    rounds: int,
    data_path: str,
    noise_multiplier: float = NOISE_MULTIPLIER,
    clip_norm: float = CLIP_NORM,
) -> dict[str, Any]:
    """The ``params.yaml`` mapping of one cell of the table."""
    raw = _merged(base, dataset.settings)
    raw["seed"] = seed
    raw["data"]["path"] = data_path
    fed = raw["federation"]
    fed["rounds"] = rounds
    # every sampled client must survive for a round to count: distributed DP
    # accounts each round with this many clients' noise
    fed["min_clients"] = FederationParams.model_validate(
        {**fed, "min_clients": 1}
    ).clients_per_round()
    raw["compression"] = {**raw.get("compression", {}), **_compression(uplink)}
    raw["secure_aggregation"] = {
        **raw.get("secure_aggregation", {}),
        "name": None if secure == "none" else secure,
    }
    privacy = raw.setdefault("privacy", {})
    if dp == "on":
        privacy.update(
            mechanism="central" if secure == "none" else "distributed",
            noise_multiplier=noise_multiplier,
            clip_norm=clip_norm,
            delta=DELTA,
        )
    else:
        privacy["mechanism"] = None
    raw["round_chain"] = round_chain(rounds)
    return raw


def _compression(uplink: str) -> dict[str, Any]:
    return {"bits": None, "fraction": None, "error_feedback": None, **UPLINKS[uplink]}


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for section, values in over.items():
        if isinstance(values, dict):
            out.setdefault(section, {}).update(values)
        else:
            out[section] = values
    return out


def parsed(raw: dict[str, Any]) -> Params | str:
    """The cell's params, or the one line of the rule that refuses it."""
    try:
        return parse_params(raw, source=SOURCE)
    except ParamsError as exc:
        lines = str(exc).splitlines()
        return "; ".join(line.removeprefix(f"{SOURCE}: ") for line in lines)


# ------------------------------------------------------------------ data


def prepare(dataset: Dataset, scratch: Path) -> tuple[Path, str]:
    """The data set prepared (the ingest stage's files) under ``scratch``; the
    prepared directory and the ``data.path`` the cells name."""
    from fedpipe.data import sources as fdata

    prepared = scratch / dataset.name / "prepared"
    if dataset.name == "mnist5k":
        table = scratch / dataset.name / MNIST5K_PATH
        fdata.write_table(fdata.load_mnist5k(), table)
        data_path = MNIST5K_PATH  # data.source mnist5k names no other path
    else:
        table = scratch / dataset.name / "data" / f"{dataset.name}.csv"
        table.parent.mkdir(parents=True, exist_ok=True)
        _breast_cancer().to_csv(table, index=False)
        data_path = str(table)
    raw = cell_settings(
        base_settings(), dataset, uplink="none", secure="none", dp="off",
        seed=0, rounds=1, data_path=data_path,
    )  # fmt: skip
    params = parse_params(raw, source=SOURCE)
    data = params.data.model_copy(update={"path": str(table)})
    fdata.ingest(data, prepared)
    return prepared, data_path


def _breast_cancer() -> Any:
    import sklearn.datasets

    return sklearn.datasets.load_breast_cancer(as_frame=True).frame


def federation(params: Params, prepared: Path, folder: Path) -> tuple[Any, Any]:
    """The partition (``partition.*``, ``params.seed``) and the federated
    preprocessing of the prepared data, as the partition and preprocess stages
    write them under ``folder``; the federated data and the model spec."""
    from fedpipe.core.jsonio import write_json
    from fedpipe.data.partition.deal import partition_prepared
    from fedpipe.data.preprocess import fit_prepared
    from fedpipe.data.sources import prepared_spec
    from fedpipe.data.splits import input_spec, open_federated
    from fedpipe.federation.build import model_spec

    folder.mkdir(parents=True, exist_ok=True)
    spec = prepared_spec(prepared)
    manifest = partition_prepared(
        prepared, classes=spec.classes, **params.partition_arguments()
    )
    write_json(folder / "manifest.json", manifest)
    transform = fit_prepared(prepared, folder / "manifest.json", params.preprocess)
    write_json(folder / "transform.json", transform.to_json())
    data = open_federated(prepared, folder / "manifest.json", folder / "transform.json")
    model = model_spec(
        params, input_spec(prepared, folder / "transform.json"), manifest
    )
    return data, model


# ------------------------------------------------------------------ runs

_runners: dict[Any, Any] = {}


def runner_for(spec: Any) -> Any:
    """One compiled model per spec for the whole table."""
    from fedpipe.model.training import ModelRunner

    if spec not in _runners:
        _runners[spec] = ModelRunner(spec)
    return _runners[spec]


def run_cell(params: Params, data: Any, spec: Any, scratch: Path) -> dict[str, Any]:
    """One seed of one cell through :func:`run_federation`: the last round's
    numbers and the wall seconds of each round."""
    from fedpipe.core.secretkey import load_or_create_key
    from fedpipe.federation.build import needs_key
    from fedpipe.federation.loop import RoundTimes, first_round, run_federation
    from fedpipe.model.trainer import run_here

    key = (
        load_or_create_key(scratch / ".fedpipe" / "dp.key")
        if needs_key(params)
        else None
    )
    runner = runner_for(spec)
    times = RoundTimes()
    out = run_federation(
        first_round(params, spec=spec, data=data, key=key),
        rounds=params.federation.rounds,
        map_clients=run_here(runner),
        runner=runner,
        callbacks=[times],
    )
    seconds = times.seconds()
    last = out.record.summary()
    wire = last.get("wire") or {}
    protocol = wire.get("secure_aggregation") or {}
    return {
        "seed": params.seed,
        "accuracy": last["global"]["accuracy"],
        "loss": last["global"]["loss"],
        "uplink_bytes_per_client": wire.get("uplink_bytes_per_client"),
        "downlink_bytes_per_client": wire.get("downlink_bytes_per_client"),
        "uplink_ratio": wire.get("uplink_ratio"),
        "protocol_bytes_per_client": (
            protocol["key_bytes_per_client"] + protocol["reveal_bytes_per_client"]
            if protocol
            else None
        ),
        "epsilon": (last.get("privacy") or {}).get("epsilon"),
        "seconds_per_round": statistics.median(seconds),
        "seconds_by_round": [round(t, 3) for t in seconds],
        "wire": wire,
        "privacy": last.get("privacy"),
    }


def table_rows(
    dataset: Dataset,
    scratch: Path,
    *,
    seeds: Sequence[int],
    rounds: int,
    uplinks: Sequence[str],
    secure: Sequence[str],
    dp: Sequence[str],
    noise_multiplier: float = NOISE_MULTIPLIER,
    clip_norm: float = CLIP_NORM,
) -> list[dict[str, Any]]:
    """Every cell of one data set: refused, or run for each seed."""
    prepared, data_path = prepare(dataset, scratch)
    base = base_settings()
    cells = [(u, s, d) for s in secure for d in dp for u in uplinks]
    rows: list[dict[str, Any]] = []
    datas: dict[int, tuple[Any, Any]] = {}
    for uplink, sec, private in cells:
        row: dict[str, Any] = {
            "dataset": dataset.name,
            "uplink": uplink,
            "secure_aggregation": sec,
            "dp": private,
        }
        runs = []
        for seed in seeds:
            raw = cell_settings(
                base, dataset, uplink=uplink, secure=sec, dp=private,
                seed=seed, rounds=rounds, data_path=data_path,
                noise_multiplier=noise_multiplier, clip_norm=clip_norm,
            )  # fmt: skip
            params = parsed(raw)
            if isinstance(params, str):
                row["refused"] = params
                break
            row["mechanism"] = params.privacy.mechanism
            if seed not in datas:
                datas[seed] = federation(
                    params, prepared, scratch / dataset.name / f"seed-{seed}"
                )
            try:
                runs.append(run_cell(params, *datas[seed], scratch))
            except Exception as exc:  # a row of the table, not the table's end
                row["failed"] = f"seed {seed}: {type(exc).__name__}: {exc}"
                break
        if runs and "failed" not in row:
            row.update(_summarized(runs))
        rows.append(row)
        print(_progress(row), file=sys.stderr, flush=True)
    return rows


def _summarized(runs: list[dict[str, Any]]) -> dict[str, Any]:
    acc = [r["accuracy"] for r in runs]
    last = runs[-1]
    eps = [r["epsilon"] for r in runs if r["epsilon"] is not None]
    return {
        "accuracy_mean": statistics.mean(acc),
        "accuracy_std": statistics.stdev(acc) if len(acc) > 1 else None,
        "uplink_bytes_per_client": last["uplink_bytes_per_client"],
        "protocol_bytes_per_client": last["protocol_bytes_per_client"],
        "uplink_ratio": last["uplink_ratio"],
        "downlink_bytes_per_client": last["downlink_bytes_per_client"],
        "seconds_per_round": statistics.mean(r["seconds_per_round"] for r in runs),
        "epsilon": max(eps) if eps else None,
        "accountant": (last["privacy"] or {}).get("accountant"),
        "runs": runs,
    }


def _progress(row: dict[str, Any]) -> str:
    what = (
        f"{row['dataset']} {row['uplink']} {row['secure_aggregation']} dp={row['dp']}"
    )
    if _not_run(row):
        return f"{what}: {_not_run(row)}"
    return (
        f"{what}: accuracy {_accuracy(row)}, ratio {row['uplink_ratio']}, "
        f"{row['seconds_per_round']:.1f} s/round"
    )


# ------------------------------------------------------------------ table

HEADER = (
    "| uplink | secure aggregation | DP | global accuracy | uplink B/client "
    "| SecAgg+ keys + reveal B/client | uplink / float32 | downlink B/client "
    "| s/round | ε |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
)


def _not_run(row: dict[str, Any]) -> str | None:
    """Why the cell has no numbers: the rule that refused it, or the error that
    stopped it (its first line)."""
    for why in ("refused", "failed"):
        if why in row:
            return f"{why}: {row[why].splitlines()[0]}"
    return None


def _accuracy(row: dict[str, Any]) -> str:
    if row["accuracy_std"] is None:
        return f"{row['accuracy_mean']:.4f}"
    return f"{row['accuracy_mean']:.4f} ± {row['accuracy_std']:.4f}"


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _dp_label(row: dict[str, Any]) -> str:
    if row["dp"] == "off":
        return "none"
    if _not_run(row):
        return "central" if row["secure_aggregation"] == "none" else "distributed"
    return row["mechanism"]


def markdown_row(row: dict[str, Any]) -> str:
    """One cell of the table as a Markdown row."""
    head = (
        f"| {UPLINK_LABELS[row['uplink']]} | {row['secure_aggregation']} "
        f"| {_dp_label(row)} |"
    )
    if _not_run(row):
        return f"{head} {_not_run(row)} | | | | | | |"
    eps = "-"
    if row["epsilon"] is not None:
        eps = f"{row['epsilon']:.3g} ({row['accountant']})"
    ratio = "-" if row["uplink_ratio"] is None else f"{row['uplink_ratio']:.4f}"
    return (
        f"{head} {_accuracy(row)} | {_bytes(row['uplink_bytes_per_client'])} "
        f"| {_bytes(row['protocol_bytes_per_client'])} | {ratio} "
        f"| {_bytes(row['downlink_bytes_per_client'])} "
        f"| {row['seconds_per_round']:.2f} | {eps} |"
    )


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The header (command, date, commit, settings) and one table per data set."""
    lines = [
        "# What crosses the wire, against accuracy",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; commit `{meta['commit']}`",
        "",
        f"{meta['rounds']} rounds, seeds {meta['seeds']} (accuracy: the global "
        "model on the held-out set after the last round, mean ± std over seeds). "
        "Everything else is params.yaml's defaults (FedAvg, every client every "
        "round, 1 local epoch, batch 32, sgd lr 0.05), with federation.min_clients "
        "= the clients per round (10). DP: privacy.mechanism central (DP-FedAvg) "
        "without secure aggregation, distributed (each client's Skellam noise "
        f"under SecAgg+) with it; noise_multiplier {meta['noise_multiplier']:g}, "
        f"clip_norm {meta['clip_norm']:g}, delta {DELTA:g}, the noise keyed by a "
        "secret key; ε at that delta after the last round. SecAgg+: "
        "secure_aggregation's defaults (20 quantization bits, clipping range 8, "
        "O(log n) neighbours). Top-k keeps 1 % of the coordinates with error "
        "feedback.",
        "",
        "Bytes are from the last round record's `wire` block: uplink B/client is "
        "what each reply carried (under SecAgg+ the masked vector: every "
        "quantized value in a 32-bit word modulo 2^32, and without DP one more "
        "word for the client's weight, so its ratio is 1), the SecAgg+ column "
        "its key agreement (public keys, share ciphertexts) and its reveal of "
        "shares; uplink / float32 the reply against the model's float32 "
        "weights; the downlink is the float32 model either way. s/round: wall "
        "seconds, the median over a run's rounds (the first round of the first "
        "cell compiles the model), mean over seeds, on 2 CPU cores shared with "
        "other work: compare them loosely. A refused cell names the params rule "
        "(fedpipe/config/wire.py) and is not run.",
        "",
        "ε between the two mechanisms: both accountants bound replace-one "
        "neighbours (one client's data swapped for another's, sensitivity 2C): "
        "central DP's `rdp-fixed` (m of n clients without replacement; with every "
        "client in every round, no amplification) and distributed DP's "
        "`rdp-skellam` (the Skellam bound on the integers). The Skellam bound "
        "holds at integer Rényi orders only; at a small noise multiplier the "
        "Gaussian's best order is below 2, which central's accountant reaches "
        "and distributed's does not, so distributed's ε is then the larger; at "
        "σ ≥ 1 the two agree within 5 % (tests/test_secure_aggregation.py). At "
        "these settings ε is large either way: it is reported, not a privacy "
        "claim. The secret key is made afresh in each invocation's scratch "
        "folder, so the cells with DP or secure aggregation draw other noise "
        "(and other roundings) each time the table is made; the other cells are "
        "the same bits every time.",
    ]
    for name in meta["datasets"]:
        lines += ["", f"## {name}: {DATASETS[name].label}", "", HEADER]
        lines += [markdown_row(r) for r in rows if r["dataset"] == name]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=None, help="federation.rounds")
    ap.add_argument(
        "--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS)
    )
    ap.add_argument(
        "--uplinks", nargs="+", choices=list(UPLINKS), default=list(UPLINKS)
    )
    ap.add_argument("--secure", nargs="+", choices=SECURE, default=list(SECURE))
    ap.add_argument("--dp", nargs="+", choices=DP, default=list(DP))
    ap.add_argument(
        "--noise-multiplier", type=float, default=NOISE_MULTIPLIER,
        help="privacy.noise_multiplier of the DP cells",
    )  # fmt: skip
    ap.add_argument(
        "--clip-norm", type=float, default=CLIP_NORM,
        help="privacy.clip_norm of the DP cells",
    )  # fmt: skip
    ap.add_argument(
        "--quick", action="store_true",
        help="the table data set, seed 0, 2 rounds (a smoke test)",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks/wire_table"))
    args = ap.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds = ["breast_cancer"], [0]
        args.rounds = args.rounds or 2
    rounds = args.rounds or base_settings()["federation"]["rounds"]
    given = sys.argv[1:] if argv is None else argv
    meta = {
        "command": shlex.join(["python", "scripts/wire_table.py", *given]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "rounds": rounds,
        "seeds": list(args.seeds),
        "datasets": list(args.datasets),
        "noise_multiplier": args.noise_multiplier,
        "clip_norm": args.clip_norm,
        "delta": DELTA,
    }
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wire-table-") as tmp:
        for name in args.datasets:
            rows += table_rows(
                DATASETS[name], Path(tmp), seeds=args.seeds, rounds=rounds,
                uplinks=args.uplinks, secure=args.secure, dp=args.dp,
                noise_multiplier=args.noise_multiplier, clip_norm=args.clip_norm,
            )  # fmt: skip
    meta["seconds"] = round(time.perf_counter() - started, 1)
    text = markdown(rows, meta)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "wire_table.md").write_text(text)
    document = {"meta": meta, "rows": rows}
    (args.out / "wire_table.json").write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
