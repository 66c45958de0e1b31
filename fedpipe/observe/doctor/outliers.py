"""(d) One client whose update stands apart from the others'.

Far larger (update norm) or pointing away (cosine to the mean update), by robust
z-scores over the round's clients, in most of the rounds it took part in, or once
by so much that it dominates the global model.

A client that took more local steps than the round's median client is allowed a
proportionally larger update: under quantity skew a client with 14x the rows takes
14x the steps, and with Adam (a step of about ``lr`` whatever the gradient) its
update grows about linearly with them; that is expected, not a data fault. Its
norm is divided by ``steps / median steps`` before the comparison
(:func:`local_steps`); a client with fewer steps than the median is compared as it
is (with plain SGD the update grows slower than the steps, so dividing a small
client's update by its few steps would make it look large).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpipe.client.base import LocalTraining
from fedpipe.federation.failures import steps_needed
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import finite_clients, global_series, knobs, robust_z
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt

#: robust z-score (median / 1.4826 MAD) beyond which a value is an outlier: 3.5 is
#: Iglewicz and Hoaglin's usual cut-off for the modified z-score
OUTLIER_Z = 3.5
#: ... and the update must also be this many times the median norm (a tight
#: healthy cohort has a tiny MAD, so z alone flags 10% differences)
OUTLIER_NORM_RATIO = 3.0
#: ... or its cosine to the mean this far below the median cosine (healthy IID
#: cohorts spread by ~0.2; a client with shuffled labels sits ~0.6 below)
OUTLIER_COSINE_GAP = 0.4
#: need this many clients in a round for a median and MAD to mean anything
OUTLIER_MIN_CLIENTS = 4
#: flagged in at least this share of the rounds the client took part in ...
OUTLIER_MIN_SHARE = 0.5
#: ... unless its update was this many times the median once: one such round
#: already dominates the global model
OUTLIER_SEVERE_RATIO = 10.0
#: ... an error when it is persistent, or when that one round harmed the global
#: model: its held-out loss rose by this factor or its accuracy fell by
#: OUTLIER_HARM_ACCURACY. A single large update the model absorbed is a warning
#: (a healthy FedBN client in the doctor corpus sent 44x the median once, after
#: which global accuracy went 0.538 -> 0.528 -> 0.604)
OUTLIER_HARM_LOSS = 1.2
OUTLIER_HARM_ACCURACY = 0.05


def local_steps(run: RunFiles, k: int, clients: Sequence[dict[str, Any]]) -> list[int]:
    """The local optimizer steps each of round ``k``'s ``clients`` took:
    ``train.epochs`` x its batches (``n_train / train.batch_size``, rounded up),
    capped by ``train.local_steps``, or what a partial straggler completed
    (``clients_partial`` of the round's metrics). ``[]`` when the run's
    ``train.*`` or a client's ``n_train`` is unknown."""
    if run.config is None or any(c.get("n_train") is None for c in clients):
        return []
    t = run.config.train
    training = LocalTraining(t.epochs, t.batch_size, t.lr, t.local_steps)
    partial = run.rounds.get(k, {}).get("clients_partial") or {}
    return [
        int(partial.get(str(c["client"]), steps_needed(int(c["n_train"]), training)))
        for c in clients
    ]


def work_factors(steps: Sequence[int]) -> np.ndarray:
    """``max(1, steps / median steps)`` per client (1 each when steps are unknown):
    how much more work than the round's median client each one did."""
    if not steps:
        return np.ones(0)
    s = np.asarray(steps, dtype=np.float64)
    median = float(np.median(s))
    if median <= 0:
        return np.ones(len(s))
    return np.maximum(1.0, s / median)


def outlier_rounds(run: RunFiles) -> dict[int, dict[int, dict[str, Any]]]:
    """Per client, the rounds where its update was an outlier, with the numbers.

    ``ratio`` is the client's update norm over the round's median, after dividing
    it by its :func:`work_factors` (``work``; ``steps`` its local steps, ``None``
    when unknown).
    """
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for k, h in run.health.items():
        clients = finite_clients(h)
        if len(clients) < OUTLIER_MIN_CLIENTS:
            continue
        raw = np.array([c["update_norm"] for c in clients], dtype=np.float64)
        steps = local_steps(run, k, clients)
        work = work_factors(steps) if steps else np.ones(len(clients))
        norms = raw / work
        median_norm = float(np.median(norms))
        z_norm = robust_z(norms)
        cosines = [c.get("cosine_to_mean") for c in clients]
        have_cos = all(v is not None for v in cosines)
        cos = np.array(cosines if have_cos else [0.0] * len(clients), dtype=float)
        median_cos = float(np.median(cos))
        z_cos = robust_z(cos)
        for i, c in enumerate(clients):
            ratio = norms[i] / median_norm if median_norm > 0 else math.inf
            big = z_norm[i] > OUTLIER_Z and ratio > OUTLIER_NORM_RATIO
            off = (
                have_cos
                and z_cos[i] < -OUTLIER_Z
                and cos[i] < median_cos - OUTLIER_COSINE_GAP
            )
            if big or off:
                out.setdefault(int(c["client"]), {})[k] = {
                    "ratio": float(ratio),
                    "norm": float(raw[i]),
                    "median_norm": median_norm,
                    "work": float(work[i]),
                    "steps": steps[i] if steps else None,
                    "median_steps": float(np.median(steps)) if steps else None,
                    "cosine": float(cos[i]) if have_cos else None,
                    "median_cosine": median_cos if have_cos else None,
                    "train_loss": c.get("train_loss"),
                    "big": bool(big),
                    "off": bool(off),
                }
    return out


def check_outliers(run: RunFiles) -> list[Finding]:
    """One client whose update stands apart from the others'."""
    findings = []
    for client, rounds in sorted(outlier_rounds(run).items()):
        took_part = [
            k
            for k, h in run.health.items()
            if any(c["client"] == client for c in finite_clients(h))
        ]
        worst = max(r["ratio"] for r in rounds.values())
        persistent = len(rounds) >= OUTLIER_MIN_SHARE * len(took_part)
        if not persistent and worst < OUTLIER_SEVERE_RATIO:
            continue
        severe = worst >= OUTLIER_SEVERE_RATIO and (
            persistent
            or any(
                _harmed(run, k)
                for k, r in rounds.items()
                if r["ratio"] >= OUTLIER_SEVERE_RATIO
            )
        )
        evidence = []
        for k, r in sorted(rounds.items())[:5]:
            parts = [_size_text(k, r)]
            if r["cosine"] is not None:
                parts.append(
                    f"cosine to the mean update {fmt(r['cosine'], 3)} (median "
                    f"{fmt(r['median_cosine'], 3)})"
                )
            if r["train_loss"] is not None:
                parts.append(f"train loss {fmt(r['train_loss'])}")
            evidence.append("; ".join(parts))
        local = _local_accuracy(run, client, sorted(rounds))
        if local:
            evidence.append(local)
        kind = (
            "far larger than the others"
            if any(r["big"] for r in rounds.values())
            else "pointing away from the others"
        )
        findings.append(
            Finding(
                code=codes.CLIENT_UPDATE_OUTLIER,
                severity="error" if severe else "warning",
                title=f"client {client}'s update is an outlier ({kind}) in "
                f"{len(rounds)}/{len(took_part)} rounds",
                evidence=evidence,
                fix=(
                    f"inspect client {client}'s data (labels shuffled or wrong, "
                    "features scaled differently) and its training; a robust "
                    "strategy limits one client's pull: strategy.name: fedmedian, "
                    "fedtrimmedavg (strategy.beta) or krum / multikrum "
                    "(strategy.num_byzantine: 1); now " + knobs(run, "strategy.name")
                ),
                rounds=sorted(rounds),
                side="data",
            )
        )
    return findings


def _size_text(k: int, r: dict[str, Any]) -> str:
    """``round 3: update norm 1.1 = 5x the median 0.2`` (with the local steps when
    the client did more work than the median: its norm per unit of work)."""
    if r["work"] <= 1.0:
        return (
            f"round {k}: update norm {fmt(r['norm'])} = {r['ratio']:.3g}x the "
            f"median {fmt(r['median_norm'])}"
        )
    return (
        f"round {k}: update norm {fmt(r['norm'])} after {r['steps']} local steps "
        f"({r['work']:.3g}x the median client's {fmt(r['median_steps'])}): "
        f"{fmt(r['norm'] / r['work'])} per median client's work = {r['ratio']:.3g}x "
        f"the median {fmt(r['median_norm'])}"
    )


def _harmed(run: RunFiles, k: int) -> bool:
    """Whether round ``k`` set the global model back (loss up or accuracy down)."""
    loss, accuracy = global_series(run, "loss"), global_series(run, "accuracy")
    before = max((j for j in loss if j < k), default=None)
    if before is None:
        return True  # round 1: nothing to compare with, judge by the size alone
    rose = None not in (loss.get(k), loss.get(before)) and (
        loss[k] > OUTLIER_HARM_LOSS * loss[before]
    )
    fell = None not in (accuracy.get(k), accuracy.get(before)) and (
        accuracy[k] < accuracy[before] - OUTLIER_HARM_ACCURACY
    )
    return bool(rose or fell)


def _local_accuracy(run: RunFiles, client: int, rounds: Sequence[int]) -> str:
    """'local accuracy of client k: x vs median y of the others' for the last round."""
    for k in reversed(rounds):
        table = run.clients.get(k)
        if table is None or "local_accuracy" not in table:
            continue
        selected = table[table["selected"].astype(bool)]
        mine = selected.loc[selected["client"] == client, "local_accuracy"]
        others = selected.loc[selected["client"] != client, "local_accuracy"]
        if len(mine) and len(others):
            return (
                f"round {k}: its local model's accuracy {fmt(float(mine.iloc[0]), 3)}"
                f" vs median {fmt(float(others.median()), 3)} for the others"
            )
    return ""
