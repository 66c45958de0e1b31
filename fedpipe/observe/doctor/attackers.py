"""(i) Clients that push against the federation: a planted or real attack.

From the health records alone (never ``attack.*`` nor the records' list of
malicious clients): a client whose update points against the mean update
(cosine to the mean clearly negative) while the round's typical client points
along it, in nearly every round it took part in. A sign-flipping client does
exactly that every round; an honest client on skewed data wanders around zero
and does not stay there; a client that only sends larger updates keeps a
positive cosine (the outlier check names it). A client that cannot fit its own
data (training loss far above the others', as with random labels) also pulls
against the mean, but that is bad data: the outlier check names it instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import finite_clients, knobs
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt

#: a client's cosine to the mean update below this is "against" the others. The
#: mean includes the attackers' own updates, so a reversed update of a typical
#: client sits only a little below 0 (-0.07 to -0.26 for 2 sign-flippers of 8 in
#: the tiny test runs) while honest IID clients sit at 0.4-0.75: the sign is the
#: signal
ATTACK_COSINE = 0.0
#: ... and this far below the round's median cosine
ATTACK_COSINE_GAP = 0.4
#: ... while the round's median cosine is above this (the mean update is a
#: direction most clients agree with; with a drifting or dominated round it is not)
ATTACK_MEDIAN_COSINE = 0.2
#: against the others in at least this share of the rounds it took part in ...
ATTACK_MIN_SHARE = 0.75
#: ... and in at least this many rounds (one round can be noise)
ATTACK_MIN_ROUNDS = 2
#: need this many clients in a round for a median to mean anything
ATTACK_MIN_CLIENTS = 4
#: a client whose own training loss is at least this many times the round's
#: median in its opposed rounds cannot fit its own data: bad labels, not an attack
#: (the outlier check names it, on the data side). Attackers train honestly and
#: tamper afterwards: in the doctor corpus sign-flip and IPM clients sit at
#: 0.97-1.04x the median loss, a client with random labels at 2.1-4.3x
BAD_DATA_LOSS_RATIO = 1.5


def opposed_rounds(run: RunFiles) -> dict[int, dict[int, dict[str, float]]]:
    """Per client, the rounds where its update pointed against the others'."""
    out: dict[int, dict[int, dict[str, float]]] = {}
    for k, h in sorted(run.health.items()):
        rows = [c for c in finite_clients(h) if c.get("cosine_to_mean") is not None]
        if len(rows) < ATTACK_MIN_CLIENTS:
            continue
        median = float(np.median([c["cosine_to_mean"] for c in rows]))
        if median <= ATTACK_MEDIAN_COSINE:
            continue
        for c in rows:
            cosine = c["cosine_to_mean"]
            if cosine < ATTACK_COSINE and cosine < median - ATTACK_COSINE_GAP:
                out.setdefault(int(c["client"]), {})[k] = {
                    "cosine": float(c["cosine_to_mean"]),
                    "median_cosine": median,
                    "norm": float(c["update_norm"]),
                    "loss_ratio": _loss_ratio(c, rows),
                }
    return out


def _loss_ratio(client: dict[str, Any], rows: list[dict[str, Any]]) -> float | None:
    """The client's training loss over the round's median (None: not recorded)."""
    losses = [r["train_loss"] for r in rows if r.get("train_loss") is not None]
    if client.get("train_loss") is None or not losses:
        return None
    median = float(np.median(losses))
    return float(client["train_loss"]) / median if median > 0 else None


def _cannot_fit_own_data(rounds: dict[int, dict[str, float]]) -> bool:
    """Its training loss stays far above the others': bad data, not an attack."""
    ratios = [r["loss_ratio"] for r in rounds.values() if r["loss_ratio"] is not None]
    return bool(ratios) and float(np.median(ratios)) >= BAD_DATA_LOSS_RATIO


def _took_part(run: RunFiles, client: int) -> list[int]:
    return [
        k
        for k, h in run.health.items()
        if any(c["client"] == client for c in finite_clients(h))
    ]


def suspected_attackers(run: RunFiles) -> dict[int, dict[int, dict[str, float]]]:
    """The clients against the others in enough of their rounds, with those rounds."""
    out = {}
    for client, rounds in sorted(opposed_rounds(run).items()):
        took_part = _took_part(run, client)
        if _cannot_fit_own_data(rounds):
            continue
        if len(rounds) >= max(ATTACK_MIN_ROUNDS, ATTACK_MIN_SHARE * len(took_part)):
            out[client] = rounds
    return out


def check_attackers(run: RunFiles) -> list[Finding]:
    """Clients whose updates point against the federation's, round after round."""
    suspects = suspected_attackers(run)
    if not suspects:
        return []
    names = ", ".join(str(c) for c in suspects)
    evidence = [_evidence(run, c, rounds) for c, rounds in suspects.items()]
    all_rounds = sorted({k for rounds in suspects.values() for k in rounds})
    n = len(suspects)
    return [
        Finding(
            code=codes.CLIENTS_AGAINST_FEDERATION,
            severity="error",
            title=(
                f"client{'s' if n > 1 else ''} {names} send{'' if n > 1 else 's'} "
                "updates pointing against the others' in nearly every round "
                "(a sign-flip or similar attack, or reversed labels)"
            ),
            evidence=evidence,
            fix=(
                f"exclude client{'s' if n > 1 else ''} {names} or check their "
                "software and data; a robust strategy limits them: strategy.name: "
                f"bulyan, krum or multikrum with strategy.num_byzantine: {n}, or "
                "fedmedian / fedtrimmedavg (strategy.beta); now "
                + knobs(run, "strategy.name", "strategy.num_byzantine")
            ),
            rounds=all_rounds,
            side="clients",
        )
    ]


def _evidence(run: RunFiles, client: int, rounds: dict[int, dict[str, Any]]) -> str:
    took_part = _took_part(run, client)
    shown = "; ".join(
        f"round {k}: cosine {fmt(r['cosine'], 3)} (median {fmt(r['median_cosine'], 3)})"
        for k, r in sorted(rounds.items())[:3]
    )
    return (
        f"client {client}: against the mean update in {len(rounds)}/"
        f"{len(took_part)} rounds; {shown}"
    )
