"""(p) Differential-privacy noise, not the learning rate, holds accuracy down.

Reads the ``privacy`` block of each round's metrics (``metrics/rounds``), which
the round writes only when ``privacy.mechanism`` is set: the expected norm of the
noise the mechanism added to the aggregated update against the norm of the
aggregated clipped update itself (the signal), and the share of clients whose
update the clip scaled down. Runs without privacy have no such block and no
finding.
"""

from __future__ import annotations

import statistics

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: noise norm above this multiple of the signal norm: the step the server takes
#: is mostly noise (at 1x, half its energy is noise; SGD still makes progress at
#: small ratios, which is why DP-FedAvg wants many clients per round)
NOISE_DOMINATES = 1.0
#: ... in at least this share of the rounds (one noisy round is not the story)
NOISY_ROUND_SHARE = 0.5
#: a clip that scales down at least this share of updates on average throws away
#: their size: worth naming beside the noise
CLIPS_MOST = 0.9


def check_privacy(run: RunFiles) -> list[Finding]:
    """Rounds whose DP noise outweighs the clipped update they carry."""
    private = {
        k: r["privacy"] for k, r in sorted(run.rounds.items()) if r.get("privacy")
    }
    ratios = {
        k: p["noise_norm"] / p["signal_norm"]
        for k, p in private.items()
        if p.get("signal_norm") and p.get("noise_norm") is not None
    }
    noisy = [k for k, ratio in ratios.items() if ratio > NOISE_DOMINATES]
    if not ratios or len(noisy) < NOISY_ROUND_SHARE * len(ratios):
        return []
    first, last = private[noisy[0]], private[noisy[-1]]
    clipped = statistics.mean(p.get("clipped_fraction", 0.0) for p in private.values())
    sigma = param(run, "privacy.noise_multiplier")
    clip = param(run, "privacy.clip_norm")
    evidence = [
        f"{len(noisy)}/{len(ratios)} rounds ({rounds_text(noisy)}): the noise in the "
        f"aggregated update is larger than the update (median ratio "
        f"{fmt(statistics.median(ratios[k] for k in noisy))}x)",
        f"round {noisy[0]}: noise norm {fmt(first['noise_norm'])} vs clipped update "
        f"norm {fmt(first['signal_norm'])}; round {noisy[-1]}: "
        f"{fmt(last['noise_norm'])} vs {fmt(last['signal_norm'])}",
        f"clipped updates: {clipped:.0%} of clients per round on average "
        f"(median update norm {fmt(last.get('update_norm_median'))}, clip "
        f"{fmt(last.get('clip_norm'))})",
    ]
    if last.get("epsilon") is not None:
        evidence.append(
            f"privacy spent: ε {fmt(last['epsilon'])} at δ {last.get('delta')} "
            f"after round {noisy[-1]}"
        )
    fix = (
        f"the noise, not train.lr, limits the model: privacy.noise_multiplier="
        f"{sigma} and privacy.clip_norm={clip} put noise of std sigma*C on the sum. "
        "Lower privacy.noise_multiplier (spends more ε), sample more clients per "
        "round (federation.fraction_fit, federation.clients: the noise on the mean "
        "falls as 1/m), or fewer federation.rounds at a higher sigma"
    )
    if clipped >= CLIPS_MOST:
        fix += _clip_fix(run, clip, last.get("clip_norm"))
    return [
        Finding(
            code=codes.PRIVACY_NOISE_DOMINATES,
            severity="warning",
            title="differential-privacy noise outweighs the client updates it protects",
            evidence=evidence,
            fix=fix,
            rounds=noisy,
            side="privacy",
        )
    ]


def _clip_fix(run: RunFiles, clip: object, used: object) -> str:
    """What to change when the clip scales down nearly every update: the clip
    itself, or with adaptive clipping (whose ``clip_norm`` is only where it
    starts) the quantile it adapts to."""
    if param(run, "privacy.adaptive_clip") is True:
        quantile = param(run, "privacy.target_quantile")
        return (
            f"; the adaptive clip (now {fmt(used)}) still clips nearly every update: "
            f"raise privacy.target_quantile={quantile} or privacy.clip_lr="
            f"{param(run, 'privacy.clip_lr')} so that it grows faster"
        )
    return (
        f"; privacy.clip_norm={clip} clips nearly every update: raise it "
        "towards the median update norm, or set privacy.adaptive_clip: true"
    )
