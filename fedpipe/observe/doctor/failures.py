"""(i) Clients left out of rounds: dropped out, failed, non-finite; a round stopped.

The round (:func:`fedpipe.federation.round.run_round`,
:mod:`fedpipe.federation.failures`) leaves out clients that drop out, whose job raises,
whose update holds NaN or inf, or that miss the round's step deadline, and records who
and why (``excluded`` in ``metrics/health/round-K.json`` and ``clients_excluded`` in
``metrics/rounds/round-K.json``). When fewer usable updates than
``federation.min_clients`` remain, the round stops (``stopped`` in its health
record); when fewer than the strategy needs remain (Krum's ``2f + 3``), the
round keeps the previous model (``model_kept`` in its round metrics). Under a
step deadline (``clients_partial``), personal models that stay at about chance
while the global model learns were starved of steps. This check reads those
records only, never the ``faults.*`` params: a planted fault is found the way a
real one would be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fedpipe.federation.failures import (
    DROPOUT,
    FAILED,
    NONFINITE,
    STRAGGLER,
    reason_kind,
)
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import knobs, param
from fedpipe.observe.doctor.collapse import chance_accuracy
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: evidence lines per finding before "... and N more"
MAX_LINES = 6
#: personal models count as at chance within this share of the way from chance
#: to 1 (the collapse check's floor), while the global model on the same clients
#: is at least this share above them
STARVED_FLOOR = 0.1
STARVED_GAP = 0.1


def excluded_by_round(run: RunFiles) -> dict[int, dict[int, str]]:
    """Round -> client -> why it was left out (health records, else round metrics)."""
    out: dict[int, dict[int, str]] = {}
    for k in sorted(set(run.health) | set(run.rounds)):
        found = run.health.get(k, {}).get("excluded")
        if found is None:
            found = run.rounds.get(k, {}).get("clients_excluded")
        if found:
            out[k] = {int(c): str(r) for c, r in found.items()}
    return out


def check_failures(run: RunFiles) -> list[Finding]:
    """Rounds that stopped for lack of clients; clients that failed, sent
    non-finite updates, dropped out or straggled."""
    excluded = excluded_by_round(run)
    findings = [
        _stopped(k, h) for k, h in sorted(run.health.items()) if h.get("stopped")
    ]
    by_kind = _by_kind(excluded)
    if by_kind.get(FAILED):
        findings.append(_failed(by_kind[FAILED]))
    if by_kind.get(NONFINITE):
        findings.append(_nonfinite(by_kind[NONFINITE]))
    if by_kind.get(DROPOUT) or by_kind.get(STRAGGLER):
        findings.append(_dropped(excluded))
    kept = {k: r["model_kept"] for k, r in run.rounds.items() if r.get("model_kept")}
    if kept:
        findings.append(_kept(run, kept))
    starved = _starved(run)
    if starved is not None:
        findings.append(starved)
    now = knobs(
        run,
        "federation.min_clients",
        "federation.fraction_fit",
        "federation.dropout",
        "federation.round_deadline_steps",
    )
    return [replace(f, side="clients", fix=f"{f.fix} (now {now})") for f in findings]


def _by_kind(
    excluded: Mapping[int, Mapping[int, str]],
) -> dict[str, dict[int, dict[int, str]]]:
    """Kind -> client -> round -> reason."""
    out: dict[str, dict[int, dict[int, str]]] = {}
    for k, clients in excluded.items():
        for c, reason in clients.items():
            out.setdefault(reason_kind(reason), {}).setdefault(c, {})[k] = reason
    return out


def _clients(ids: Mapping[int, Any]) -> str:
    """``client 4`` or ``clients 1, 4``."""
    listed = ", ".join(str(c) for c in sorted(ids))
    return f"client {listed}" if len(ids) == 1 else f"clients {listed}"


def _capped(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[:MAX_LINES], f"... and {len(lines) - MAX_LINES} more"]


def _stopped(k: int, health: Mapping[str, Any]) -> Finding:
    return Finding(
        code=codes.ROUND_STOPPED_CLIENTS_LOST,
        severity="error",
        title=f"round {k} stopped: too few usable client updates",
        evidence=[str(health["stopped"])],
        fix=(
            "fix the clients that failed or sent non-finite values (see the "
            "findings on them), or let the round go on with fewer: lower "
            "federation.min_clients, sample more clients (federation.fraction_fit), "
            "lower federation.dropout or raise federation.round_deadline_steps"
        ),
        rounds=[k],
    )


def _failed(clients: Mapping[int, Mapping[int, str]]) -> Finding:
    rounds = sorted({k for by_round in clients.values() for k in by_round})
    evidence = []
    for c, by_round in sorted(clients.items()):
        first = min(by_round)
        message = by_round[first].split(":", 1)[1].strip()
        evidence.append(
            f"client {c}: its job raised in {rounds_text(sorted(by_round))}; "
            f"round {first}: {message}"
        )
    return Finding(
        code=codes.CLIENTS_FAILED,
        severity="warning",
        title=f"{_clients(clients)} failed (the job raised) and left out",
        evidence=_capped(evidence),
        fix=(
            "fix that client's data or code (the error is above and in the run's "
            "log, logs/fedpipe-run-*.log); the rounds went on without it while "
            "federation.min_clients usable updates remained"
        ),
        rounds=rounds,
    )


def _nonfinite(clients: Mapping[int, Mapping[int, str]]) -> Finding:
    rounds = sorted({k for by_round in clients.values() for k in by_round})
    evidence = [
        f"client {c}: NaN/inf in its update in {rounds_text(sorted(by_round))}"
        for c, by_round in sorted(clients.items())
    ]
    return Finding(
        code=codes.CLIENT_UPDATES_NONFINITE,
        severity="warning",
        title=f"{_clients(clients)} sent NaN/inf updates, left out of aggregation",
        evidence=_capped(evidence),
        fix=(
            "inspect those clients' data (values out of range, another scaling) "
            "and training: a learning rate too high for their data blows them up "
            "first (train.lr); the other clients' updates were aggregated"
        ),
        rounds=rounds,
    )


def _dropped(excluded: Mapping[int, Mapping[int, str]]) -> Finding:
    evidence, rounds = [], []
    for k, clients in sorted(excluded.items()):
        parts = []
        for kind in (DROPOUT, STRAGGLER):
            ids = sorted(c for c, r in clients.items() if reason_kind(r) == kind)
            if ids:
                word = "dropped out" if kind == DROPOUT else "missed the deadline"
                parts.append(f"{len(ids)} {word} ({', '.join(map(str, ids))})")
        if parts:
            rounds.append(k)
            evidence.append(f"round {k}: " + "; ".join(parts))
    return Finding(
        code=codes.CLIENTS_DROPPED_OUT,
        severity="info",
        title=f"clients dropped out or missed the deadline in {rounds_text(rounds)}",
        evidence=_capped(evidence),
        fix=(
            "expected with federation.dropout or federation.round_deadline_steps "
            "set; fewer updates per round make the global model noisier: sample "
            "more clients (federation.fraction_fit) to make up for them"
        ),
        rounds=rounds,
    )


def _kept(run: RunFiles, kept: Mapping[int, str]) -> Finding:
    rounds = sorted(kept)
    name = param(run, "strategy.name", "?")
    return Finding(
        code=codes.ROUND_MODEL_KEPT,
        severity="warning",
        title=(
            f"{len(rounds)} round(s) kept the previous model: fewer updates than "
            f"strategy.name={name} needs"
        ),
        evidence=_capped([f"round {k}: {kept[k]}" for k in rounds]),
        fix=(
            "those rounds trained clients but did not move the global model: lower "
            "strategy.num_byzantine (or strategy.num_selected) or federation.dropout, "
            "or sample more clients per round (federation.fraction_fit); "
            "federation.min_clients at the strategy's minimum stops the run instead "
            f"({knobs(run, 'strategy.num_byzantine')})"
        ),
        rounds=rounds,
    )


def _starved(run: RunFiles) -> Finding | None:
    """Personal models at about chance in the last round, the global model on
    the same clients clearly above them, and a step deadline that cut some
    client's round short (``clients_partial``) in the run."""
    if not run.rounds:
        return None
    last = max(run.rounds)
    record = run.rounds[last]
    own = (record.get("personalized") or {}).get("accuracy")
    on_clients = (record.get("global_on_clients") or {}).get("accuracy")
    cut = sorted(k for k, r in run.rounds.items() if r.get("clients_partial"))
    chance = chance_accuracy(run)
    if own is None or on_clients is None or not cut or chance is None:
        return None
    floor = chance + STARVED_FLOOR * (1.0 - chance)
    if own > floor or on_clients < own + STARVED_GAP:
        return None
    partial = run.rounds[cut[-1]]["clients_partial"]
    steps = sorted(set(partial.values()))
    return Finding(
        code=codes.PERSONAL_MODELS_STARVED,
        severity="warning",
        title=(
            f"personal models at about chance ({fmt(own, 3)}, chance "
            f"{fmt(chance, 3)}) while the step deadline cut the clients' fits"
        ),
        evidence=[
            f"round {last}: personalized accuracy {fmt(own, 3)}, the global model "
            f"on the same clients {fmt(on_clients, 3)}",
            f"clients stopped short by the deadline in {rounds_text(cut)}; round "
            f"{cut[-1]}: {len(partial)} client(s) at "
            f"{', '.join(map(str, steps))} step(s)",
        ],
        fix=(
            "the round's steps (federation.round_deadline_steps) are shared among "
            "a client's fits; personal models need steps of their own: raise "
            "federation.round_deadline_steps (or federation.slow_speed), or use "
            f"another personalization.method ("
            f"{knobs(run, 'personalization.method')})"
        ),
        rounds=[last],
    )
