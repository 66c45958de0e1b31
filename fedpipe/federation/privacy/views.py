"""Two views of a round under differential privacy: what the server may publish,
and the simulation's oracle diagnostics.

A DP round releases the noised aggregate; epsilon and the settings are public.
Everything else a simulation knows, it knows because it plays every client: the
sampled set (amplification by sampling assumes it is secret), each client's update
norm, cosine, training loss and sample count, the clients' own evaluations, the
exact share of clipped updates and the noise-free signal norm. Published unnoised,
those leak what DP hides (issue 25, item 2).

:func:`split_round` splits a round's three records (the round summary, the health
record, the per-client table) into the **server view** (what goes to the
versioned, DVC-tracked and pushed files: ``metrics/rounds``, ``metrics/health``,
``metrics/clients``) and the **oracle view** (everything, written to
:data:`fedpipe.config.layout.ORACLE_DIR`, ``.fedpipe/oracle/round-K.json``, which
git and DVC ignore and no stage declares). ``privacy.publish_oracle: true`` keeps
everything in the published records, deliberately. Without privacy nothing is
split: the records are the same bits as before.

The doctor and the report read the oracle file when it is there and say which
view they read (:mod:`fedpipe.observe.runfiles`). The oracle file carries what
ties it to its round (:data:`BELONGS_TO`: the md5 of each record published beside
it); they read it only while those records are the round's, and a round rewritten
removes its old oracle file first (issue 36, defect 5).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpipe.config import layout
from fedpipe.core import atomic
from fedpipe.core.jsonio import write_json

if TYPE_CHECKING:
    import pandas as pd

#: the oracle record's key holding what ties it to its round: the md5 of each
#: record the round published beside it (``{path: md5}``, the hashes ``dvc.lock``
#: records for those outputs); a reader uses the oracle record only while the
#: round's published records are these (:mod:`fedpipe.observe.runfiles`)
BELONGS_TO = "belongs_to"

#: round-summary keys that only the oracle knows (who was sampled, who was left
#: out and why, the clients' own unnoised evaluations, their sample weights)
ORACLE_SUMMARY_KEYS = (
    "clients_selected",
    "clients_aggregated",
    "clients_excluded",
    "excluded_counts",
    "clients_partial",
    "clients_scored",
    "model_kept",
    "malicious",
    "aggregation_weight_sum",
    "global_on_clients",
    "global_on_clients_std",
    "local",
    "local_std",
    "personalized",
    "personalized_std",
)

#: privacy-block keys computed from the clients' noise-free updates, and DP-SGD's
#: per-client books (each client's epsilon and steps, the clients out of budget:
#: keyed by client, they say who trained in which round)
ORACLE_PRIVACY_KEYS = (
    "clipped_fraction",
    "update_norm_median",
    "signal_norm",
    "epsilon_clients",
    "steps_clients",
    "stopped",
)

#: ``wire`` keys of the round summary that only the oracle knows: the round's
#: byte totals, which are the per-client figures times the clients that sent
#: (who and how many took part is the oracle's; the per-client bytes and the
#: ratio, properties of the codec and the model, stay public)
ORACLE_WIRE_KEYS = ("uplink_bytes", "downlink_bytes", "clients_sent")

#: health-record keys the server view keeps (the published model on the server's
#: own held-out set, and its units); the rest (per-client norms, cosines, losses,
#: the aggregation's fit to the client updates, per-layer client statistics) is
#: the oracle's
SERVER_HEALTH_KEYS = ("round", "global", "dead_units", "stopped")

#: ``global`` entries of the health record that compare the clients' updates
ORACLE_HEALTH_GLOBAL_KEYS = ("divergence",)

#: the per-client table's columns in the server view: its header only. The
#: server view holds no per-client rows: which rows a round has (the sampled,
#: trained or scored clients) is itself what amplification by sampling assumes
#: secret (issue 36, item 1), so ``metrics/clients/round-K.csv`` is the header
#: alone whatever ``evaluation.clients`` says; the rows are the oracle's
SERVER_TABLE_COLUMNS = ("client",)

#: every key the oracle view adds (what a published file must not contain)
ORACLE_KEYS = (
    *ORACLE_SUMMARY_KEYS,
    *ORACLE_WIRE_KEYS,
    # the health record's own "stopped" (why a round stopped) is the server's
    *(k for k in ORACLE_PRIVACY_KEYS if k not in SERVER_HEALTH_KEYS),
    "clients",
    "aggregation",
    "excluded",
    "layers",
    "gap",
    "divergence",
    "update_norm",
    "cosine_to_mean",
    "train_loss",
)


@dataclass(frozen=True)
class RoundViews:
    """A round's records as published, and its oracle record (None: nothing held
    back, without privacy or with ``privacy.publish_oracle``).

    Attributes
    ----------
    summary, health : dict
        ``metrics/rounds/round-K.json`` and ``metrics/health/round-K.json``.
    clients : list of dict
        ``metrics/clients/round-K.csv``'s rows (none in the server view: the
        rows alone would say which clients were sampled).
    oracle : dict or None
        ``.fedpipe/oracle/round-K.json``: ``round``, ``view``, and the full
        ``summary``, ``health`` and ``clients``.
    """

    summary: dict[str, Any]
    health: dict[str, Any]
    clients: list[dict[str, Any]]
    oracle: dict[str, Any] | None


def split_round(
    summary: Mapping[str, Any],
    health: Mapping[str, Any],
    clients: list[dict[str, Any]],
    *,
    private: bool,
    publish_oracle: bool = False,
) -> RoundViews:
    """The round's published records and its oracle record.

    Parameters
    ----------
    summary, health, clients
        The round's full records (the summary, the health record, the
        per-client table's rows).
    private : bool
        Whether the run has ``privacy.*`` (else nothing changes).
    publish_oracle : bool
        ``privacy.publish_oracle``: publish the full records (marked so in
        ``privacy.view``) and hold nothing back.
    """
    if not private:
        return RoundViews(dict(summary), dict(health), list(clients), None)
    if publish_oracle:
        full = dict(summary)
        if "privacy" in full:
            full["privacy"] = {**full["privacy"], "view": "server+oracle"}
        return RoundViews(full, dict(health), list(clients), None)
    oracle = {
        "round": summary.get("round", health.get("round")),
        "view": "oracle",
        "summary": dict(summary),
        "health": dict(health),
        "clients": list(clients),
    }
    return RoundViews(
        server_summary(summary),
        server_health(health),
        [],  # no row: which clients have one is who was sampled
        oracle,
    )


def server_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The round summary without the oracle's keys (``privacy.view: server``)."""
    out = {k: v for k, v in summary.items() if k not in ORACLE_SUMMARY_KEYS}
    if "privacy" in out:
        kept = {k: v for k, v in out["privacy"].items() if k not in ORACLE_PRIVACY_KEYS}
        out["privacy"] = {**kept, "view": "server"}
    if "wire" in out:
        out["wire"] = {
            k: v for k, v in out["wire"].items() if k not in ORACLE_WIRE_KEYS
        }
    return out


def server_health(health: Mapping[str, Any]) -> dict[str, Any]:
    """The health record's server view: the published model on the held-out set."""
    out: dict[str, Any] = {"view": "server"}
    for key in SERVER_HEALTH_KEYS:
        if key not in health:
            continue
        value = health[key]
        if key == "global" and isinstance(value, Mapping):
            value = {
                k: v for k, v in value.items() if k not in ORACLE_HEALTH_GLOBAL_KEYS
            }
        out[key] = value
    return out


def full_records(oracle: Mapping[str, Any]) -> tuple[dict, dict, list[dict]]:
    """The full summary, health record and client rows an oracle record keeps."""
    return dict(oracle["summary"]), dict(oracle["health"]), list(oracle["clients"])


def write_round_records(
    root: Path,
    round_: int,
    *,
    summary: Mapping[str, Any] | None,
    health: Mapping[str, Any],
    table: pd.DataFrame | None,
    private: bool,
    publish_oracle: bool = False,
) -> pd.DataFrame | None:
    """Write round K's records under ``root``: the published summary, health
    record and client table (``summary`` / ``table`` None: a round that failed,
    only its health record), and under DP the oracle record. Returns the
    published client table. Without privacy: the same files, bit for bit, as
    writing the records directly."""
    import pandas as pd

    rows = (
        []
        if table is None or not private
        else json.loads(table.to_json(orient="records"))
    )
    views = split_round(
        summary or {}, health, rows, private=private, publish_oracle=publish_oracle
    )
    oracle = root / layout.oracle_record(round_)
    # an earlier run's oracle record of this round is not this round's: gone
    # before the round's records are rewritten (issue 36, defect 5)
    oracle.unlink(missing_ok=True)
    written = [layout.health_metrics(round_)]
    write_json(root / written[0], views.health)
    published = None
    if summary is not None and table is not None:
        written += [layout.round_metrics(round_), layout.client_metrics(round_)]
        write_json(root / written[1], views.summary)
        published = (
            table
            if views.oracle is None
            else pd.DataFrame(views.clients, columns=list(SERVER_TABLE_COLUMNS))
        )
        with atomic.writing(root / written[2]) as tmp:
            published.to_csv(tmp, index=False, float_format="%.6g")
    if views.oracle is not None:
        oracle.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tie = {path.as_posix(): file_md5(root / path) for path in written}
        write_json(oracle, {**views.oracle, BELONGS_TO: tie})
    return published


def file_md5(path: Path) -> str:
    """The md5 of the file's bytes: the hash ``dvc.lock`` records for an output
    file (DVC 3's ``md5``)."""
    return hashlib.md5(path.read_bytes()).hexdigest()  # noqa: S324 - DVC's hash
