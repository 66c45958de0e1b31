"""(e) A learning rate that makes local training blow up.

Non-finite weights, local training losses far above guessing, client updates
larger than the weights they update, or a global loss that swings up and down.

When the client algorithm adds a proximal term to its local step (its class's
``proximal_setting`` trait: FedProx's ``proximal_mu``), that weight is a knob of
the blow-up too: with plain SGD the term multiplies ``w - w_global`` by
``1 - lr mu`` every step, which overshoots once ``lr mu >``
:data:`PROXIMAL_STABLE` (``train.lr: 0.05`` with ``strategy.proximal_mu: 100``
blows up in round 1 whatever the data), and the finding names it beside
``train.lr``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence

from fedpipe.client import client_class
from fedpipe.core.dotted import lookup
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import finite_clients, global_series, knobs, param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.doctor.outliers import OUTLIER_SEVERE_RATIO, outlier_rounds
from fedpipe.observe.doctor.server_step import server_blowup_round
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text
from fedpipe.strategy import strategy_class

#: median client update norm above this share of the global weight norm: one
#: round of local training moved the weights further than their own size
#: (healthy rounds move them a few percent)
LR_STEP_RATIO = 1.0
#: ... that alone is only supporting evidence (Adam moves every weight by ~lr per
#: step whatever the gradient, so 20 steps at lr 0.01 already reach ~1x while
#: training well); this many times the weight norm is an explosion on its own
LR_STEP_SEVERE = 10.0
#: median local training loss above this multiple of the chance loss ln(C): the
#: clients ended worse than a model that guesses (healthy training starts at ~1x)
LR_LOSS_FACTOR = 3.0
#: a jump of the global loss by more than this share (of the smaller value) ...
OSCILLATION_JUMP = 0.5
#: ... up and down, this many times in a row, is oscillation
OSCILLATION_REVERSALS = 2
#: plain SGD on a proximal term ``mu/2 ||w - a||^2`` multiplies ``w - a`` by
#: ``1 - lr mu`` per step: it shrinks only while ``|1 - lr mu| < 1``, i.e.
#: ``lr mu < 2`` (the step of gradient descent on a quadratic of curvature mu)
PROXIMAL_STABLE = 2.0


def check_learning_rate(run: RunFiles) -> list[Finding]:
    """Non-finite values, exploding training losses or updates, oscillation.

    Rounds after one where a single client's update dominated
    (:data:`OUTLIER_SEVERE_RATIO`) are not judged: what follows is that client's
    doing (see :func:`check_outliers`), whatever the learning rate. Nor are the
    round where the server's step blew up the global model of clients that
    trained normally, and those after it (:func:`server_blowup_round`): the
    server's doing, and later clients start from its broken model.
    """
    severe_outliers = [
        k
        for rounds in outlier_rounds(run).values()
        for k, r in rounds.items()
        if r["ratio"] >= OUTLIER_SEVERE_RATIO
    ]
    horizon = min(severe_outliers, default=math.inf)
    server = server_blowup_round(run)
    if server is not None:
        horizon = min(horizon, server - 1)
    triggers: set[int] = set()
    evidence: list[str] = []
    supporting: list[str] = []
    severe = False
    chance = math.log(run.n_classes) if run.n_classes else None
    for k, h in run.health.items():
        if k > horizon:
            continue
        clients = h.get("clients", [])
        broken = [c["client"] for c in clients if c.get("nonfinite")]
        # NaN clients among as many finite ones are those clients' doing (the
        # failures check names them); most of a round's clients, the learning
        # rate's
        if broken and 2 * len(broken) > len(clients):
            severe = True
            triggers.add(k)
            evidence.append(
                f"round {k}: NaN/inf in the trained weights of "
                f"{len(broken)}/{len(clients)} clients ({_list(broken)})"
            )
        if h.get("global", {}).get("nonfinite"):
            severe = True
            triggers.add(k)
            evidence.append(f"round {k}: NaN/inf in the new global weights")
        losses = [c["train_loss"] for c in clients if c.get("train_loss") is not None]
        if losses and chance:
            median = statistics.median(losses)
            if median > LR_LOSS_FACTOR * chance:
                severe = True
                triggers.add(k)
                evidence.append(
                    f"round {k}: median local training loss {fmt(median)} is "
                    f"{median / chance:.3g}x the loss of guessing (ln {run.n_classes}"
                    f" = {chance:.3g})"
                )
        norms = [c["update_norm"] for c in finite_clients(h)]
        size = h.get("global", {}).get("weight_norm_before")
        if norms and size:
            ratio = statistics.median(norms) / size
            line = (
                f"round {k}: the median client update "
                f"({fmt(statistics.median(norms))}) is {ratio:.3g}x the global "
                f"weight norm ({fmt(size)})"
            )
            if ratio > LR_STEP_SEVERE:
                severe = True
                triggers.add(k)
                evidence.append(line)
            elif ratio > LR_STEP_RATIO:
                supporting.append(line)
    series = {k: v for k, v in global_series(run, "loss").items() if k <= horizon}
    accuracy = global_series(run, "accuracy")
    lost = [k for k, v in series.items() if v is None and accuracy.get(k) is not None]
    if lost:
        severe = True
        triggers.update(lost)
        evidence.append(f"global loss is NaN/inf in {rounds_text(lost)}")
    swings = _oscillation(series)
    if swings:
        triggers.update(swings)
        values = ", ".join(fmt(series[k]) for k in sorted(swings))
        evidence.append(
            f"global loss swings up and down by more than {OSCILLATION_JUMP:.0%} "
            f"in {rounds_text(swings)} ({values})"
        )
    if not triggers:
        return []
    lr = param(run, "train.lr")
    now = knobs(run, "train.lr", "train.optimizer")
    suggestion = f" -> try {lr / 10:g}" if lr is not None else ""
    title = "the learning rate is too high: local training blows up"
    fix = (
        f"lower {now}{suggestion}; if only a few clients blow up, also check their "
        "data scaling"
    )
    term = proximal_term(run)
    if term is not None and lr is not None:
        key, mu = term
        product = lr * mu
        sgd = param(run, "train.optimizer", "sgd") == "sgd"
        if sgd and product > PROXIMAL_STABLE:
            title = (
                f"the learning rate is too high for the proximal term: local "
                f"training blows up (lr·μ = {product:.3g} > {PROXIMAL_STABLE:g})"
            )
            evidence.insert(
                0,
                f"train.lr x {key} = {lr:g} x {mu:g}: lr·μ = {product:.3g} > "
                f"{PROXIMAL_STABLE:g}, so every local step multiplies the distance "
                f"to the global weights by 1 - lr·μ = {1 - product:.3g} (SGD)",
            )
            fix = (
                f"lr·μ = {product:.3g} > {PROXIMAL_STABLE:g}: lower train.lr or "
                f"{key} (now train.lr = {lr:g}, {key} = {mu:g}) until lr·μ < "
                f"{PROXIMAL_STABLE:g} -> try train.lr {1 / mu:g} or {key} "
                f"{1 / lr:g} (lr·μ = 1)"
            )
        else:
            fix += (
                f"; the local step also has the proximal term {key} = {mu:g} "
                f"(lr·μ = {product:.3g}): lower train.lr or {key}"
            )
    return [
        Finding(
            code=codes.LEARNING_RATE_TOO_HIGH,
            severity="error" if severe else "warning",
            title=title,
            evidence=evidence + supporting,
            fix=fix,
            rounds=sorted(triggers),
            side="client training",
        )
    ]


def proximal_term(run: RunFiles) -> tuple[str, float] | None:
    """The key and value of the proximal weight ``mu`` the run's client algorithm
    adds to its local step (its class's ``proximal_setting``), or ``None`` (no
    such term, ``mu`` 0, or the classes or params cannot be read).

    The key is where the value comes from: ``client.options.<setting>``, else the
    strategy's setting it passes on (``strategy.proximal_mu``; a user's strategy:
    ``strategy.options.<setting>``), else the client class's default.
    """
    params = run.params or {}
    try:
        name = str(param(run, "strategy.name", lookup(params, "strategy.name")))
        strategy = strategy_class(name)
        chosen = lookup(params, "client.algorithm") or strategy.client_algorithm
        client = client_class(chosen)
    except Exception:  # an unknown or unloadable component: nothing to name
        return None
    setting = getattr(client, "proximal_setting", None)
    if setting is None:
        return None
    options = lookup(params, "client.options") or {}
    if setting in options:
        key, value = f"client.options.{setting}", options[setting]
    elif setting in strategy.settings:
        key = (
            f"strategy.{setting}" if ":" not in name else f"strategy.options.{setting}"
        )
        value = lookup(params, key)
    else:
        key, value = f"client.options.{setting}", None
    if value is None:  # left to the class's own default
        declared = [s for s in client.settings if s == setting]
        value = getattr(declared[0], "default", None) if declared else None
    try:
        mu = float(value)
    except (TypeError, ValueError):
        return None
    return (key, mu) if mu > 0 else None


def _list(ids: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(str(i) for i in list(ids)[:limit])
    return shown + (f", +{len(ids) - limit} more" if len(ids) > limit else "")


def _oscillation(series: Mapping[int, float | None]) -> list[int]:
    """The longest run of rounds where the loss jumps by more than
    OSCILLATION_JUMP alternately up and down, if it reverses at least
    OSCILLATION_REVERSALS times; else []."""
    points = [(k, v) for k, v in series.items() if v is not None and v > 0]
    best: list[int] = []
    current: list[int] = []
    previous = 0
    for (_, a), (k, b) in itertools.pairwise(points):
        rel = (b - a) / min(a, b)
        sign = 0 if abs(rel) <= OSCILLATION_JUMP else (1 if rel > 0 else -1)
        if sign == 0:
            current = []
        elif current and sign == -previous:
            current.append(k)
        else:
            current = [k]
        previous = sign
        if len(current) > OSCILLATION_REVERSALS and len(current) > len(best):
            best = list(current)
    return best
