"""The run doctor: read a run's recorded files, name what went wrong, suggest a fix.

:func:`diagnose` reads what the pipeline wrote (``metrics/rounds``,
``metrics/health``, ``metrics/clients``, ``params.yaml``, the prepared data and the
partition manifest) and returns :class:`Finding` s, most important first: root
causes (labels the loss cannot take, a learning rate that blows up, aggregation
weights that do not sum to 1, an outlier client, normalization statistics that
disagree, client drift) before the symptoms they cause (a global loss that rises
while accuracy holds). Each finding carries its evidence (rounds, layers, clients,
numbers) and a fix naming the ``params.yaml`` keys to change.

Every threshold is a named constant below with the reason for its value. They are
set so that a healthy run (the default: small_cnn, IID, 10 clients, lr 0.05, 10
rounds) has no findings, and each symptom produced on purpose in
``tests/test_doctor.py`` is found.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe import layout
from fedpipe.federation import read_json

# ---------------------------------------------------------------- thresholds

# (a) loss rising while accuracy holds
#: the last global loss must exceed the best earlier one by this factor: a 50% rise
#: is far beyond round-to-round noise of a held-out loss on hundreds of samples
LOSS_RISE_FACTOR = 1.5
#: ... and by this much in absolute terms, so a tiny loss (0.01 -> 0.02) is no rise
LOSS_RISE_MIN = 0.05
#: accuracy "holds" if it is no more than this below its value at the best loss
#: (two points: the noise of accuracy on a few hundred held-out samples)
ACCURACY_HOLD = 0.02
#: a rise by this factor is an error: the seed question's 10k loss is this kind
LOSS_RISE_SEVERE = 10.0
#: a layer "grew" if its weight norm rose by more than this share since the best
#: round (healthy layers drift a few percent over a run)
LAYER_GROWTH = 0.10

# (b) aggregation weights
#: the fit explains the server's step as a combination of client updates only if
#: the residual is below this share of the step (linear rules leave ~1e-6 from
#: float32 rounding; server optimizers and medians leave 0.1 .. 1)
FIT_RESIDUAL_MAX = 0.01
#: effective weights may sum to the expected value +- this (rounding leaves ~1e-6)
WEIGHT_SUM_TOL = 0.02

# (c) labels: exact, no threshold (a label is in 0 .. C-1 or it is not)

# (d) outlier client
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

# (e) learning rate
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

# (f) client drift
#: divergence normalized by its value for K unrelated updates (1 - 1/K) above
#: this: the clients' updates have almost nothing in common (healthy IID runs
#: stay below ~0.7, Dirichlet(0.1) label skew is at ~0.95)
DRIFT_DIVERGENCE = 0.85
#: ... and the median cosine of an update to the mean update below this
#: (about sqrt(1 - D): 0.5 for D = 0.75)
DRIFT_COSINE = 0.5
#: ... and the local models beat the global model on their own test splits by
#: more than this accuracy (gap.accuracy below -DRIFT_GAP). Near convergence
#: IID updates are mostly SGD noise, so divergence alone rises there too (the
#: default run reaches D/(1-1/K) ~0.8 by round 10); what drift adds is local
#: optima that differ, which the local models' edge on their own data shows
#: (Dirichlet(0.1): -0.2 .. -0.4; IID: >= 0)
DRIFT_GAP = 0.05
#: in at least this share of the rounds
DRIFT_MIN_SHARE = 0.5

# (g) normalization statistics
#: divergence of the clients' moving-statistics changes above this: the clients
#: pull the statistics in different directions (IID clients move them together,
#: D ~0.001; clients with differently scaled inputs: ~0.5)
STATS_DIVERGENCE = 0.3
#: ... and the clients' statistics spread by more than this share of their size
#: (IID ~0.001; a client population with two input scales: ~0.2)
STATS_SPREAD = 0.05
#: in at least this share of the rounds
STATS_MIN_SHARE = 0.5

#: not-learning: the global accuracy stays within this of guessing (1 / classes)
#: after at least NOT_LEARNING_ROUNDS rounds: an untrained model sits there, and a
#: model that learned anything at all on the default data is 30+ points above it
CHANCE_MARGIN = 0.05
NOT_LEARNING_ROUNDS = 3
#: ... and the local models are "learning" when they beat guessing by this much
LOCAL_LEARNS = 0.15

SEVERITIES = ("error", "warning", "info")

#: root causes before the symptoms they cause (used after severity)
PRIORITY = {
    "labels-outside-loss-range": 0,
    "learning-rate-too-high": 1,
    "aggregation-weights-not-normalized": 2,
    "client-update-outlier": 3,
    "norm-statistics-disagree": 4,
    "client-drift": 5,
    "loss-rising-accuracy-holds": 6,
    "not-learning": 7,
    "health-records-missing": 9,
}


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found.

    Attributes
    ----------
    code : str
        Stable id, e.g. ``"loss-rising-accuracy-holds"``.
    severity : str
        ``"error" | "warning" | "info"``.
    title : str
        The line a person reads first.
    evidence : list of str
        Lines naming the rounds, layers, clients and numbers.
    fix : str
        Suggested fix, naming ``params.yaml`` keys where one applies.
    rounds : list of int
        The rounds concerned.
    """

    code: str
    severity: str
    title: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    rounds: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return asdict(self)


# ---------------------------------------------------------------- the run's files


@dataclass
class Run:
    """What :func:`load_run` read; every part may be missing (empty / None)."""

    root: Path
    params: Any = None
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)
    health: dict[int, dict[str, Any]] = field(default_factory=dict)
    clients: dict[int, pd.DataFrame] = field(default_factory=dict)
    schema: dict[str, Any] | None = None
    labels: np.ndarray | None = None
    sample_ids: np.ndarray | None = None
    manifest: dict[str, Any] | None = None

    @property
    def n_classes(self) -> int | None:
        """Classes the model was built for (its loss expects 0 .. C-1)."""
        return None if self.schema is None else len(self.schema["classes"])


def _numbered(folder: Path, suffix: str) -> dict[int, Path]:
    out = {}
    for path in folder.glob(f"round-*{suffix}"):
        number = path.name.removeprefix("round-").removesuffix(suffix)
        if number.isdigit():
            out[int(number)] = path
    return dict(sorted(out.items()))


def load_run(root: Path) -> Run:
    """Read the files of the run under ``root`` (missing ones are left empty).

    Raises
    ------
    FileNotFoundError
        If no round has been recorded (``metrics/rounds/round-K.json``).
    """
    root = Path(root)
    run = Run(root=root)
    run.rounds = {
        k: read_json(p)
        for k, p in _numbered(root / layout.ROUND_METRICS_DIR, ".json").items()
    }
    run.health = {
        k: read_json(p)
        for k, p in _numbered(root / layout.HEALTH_METRICS_DIR, ".json").items()
    }
    if not run.rounds and not run.health:
        raise FileNotFoundError(
            f"{root / layout.ROUND_METRICS_DIR}: no round-K.json; run the pipeline "
            "(fedpipe run) before asking the doctor"
        )
    run.clients = {
        k: pd.read_csv(p)
        for k, p in _numbered(root / layout.CLIENT_METRICS_DIR, ".csv").items()
    }
    params_file = root / "params.yaml"
    if params_file.is_file():
        from fedpipe.config import ParamsError, load_params

        try:
            run.params = load_params(params_file)
        except ParamsError:
            run.params = None
    schema = root / layout.PREPARED_SCHEMA
    if schema.is_file():
        run.schema = read_json(schema)
    samples = root / layout.PREPARED_DIR / "samples.parquet"
    if samples.is_file():
        table = pd.read_parquet(samples, columns=["sample_id", "label", "status"])
        table = table[table["status"] == "ok"]
        run.labels = table["label"].to_numpy(dtype=np.int64)
        run.sample_ids = table["sample_id"].astype(str).to_numpy()
    if (root / layout.MANIFEST).is_file():
        run.manifest = read_json(root / layout.MANIFEST)
    return run


# ---------------------------------------------------------------- small helpers


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def _rounds_text(rounds: Sequence[int]) -> str:
    rounds = sorted(rounds)
    if len(rounds) > 2 and rounds == list(range(rounds[0], rounds[-1] + 1)):
        return f"rounds {rounds[0]}-{rounds[-1]}"
    label = "round" if len(rounds) == 1 else "rounds"
    return f"{label} " + ", ".join(str(r) for r in rounds)


def robust_z(values: Sequence[float]) -> np.ndarray:
    """Modified z-scores ``(x - median) / (1.4826 MAD)``; 0 where MAD is 0 and the
    value is the median, +-inf where MAD is 0 and it is not."""
    x = np.asarray(values, dtype=np.float64)
    median = float(np.median(x))
    mad = 1.4826 * float(np.median(np.abs(x - median)))
    if mad == 0.0:
        return np.where(x > median, np.inf, np.where(x < median, -np.inf, 0.0))
    return (x - median) / mad


def _global_series(run: Run, key: str) -> dict[int, float | None]:
    """Held-out global ``key`` per round (rounds metrics, else health)."""
    out: dict[int, float | None] = {}
    for k in sorted(set(run.rounds) | set(run.health)):
        if k in run.rounds:
            out[k] = run.rounds[k].get("global", {}).get(key)
        else:
            out[k] = run.health[k].get("global", {}).get(key)
    return out


def _param(run: Run, dotted: str, default: Any = None) -> Any:
    value: Any = run.params
    for part in dotted.split("."):
        if value is None:
            return default
        value = getattr(value, part, None)
    return default if value is None else value


def _finite_clients(health: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in health.get("clients", []) if c.get("update_norm") is not None]


# ---------------------------------------------------------------- (c) labels


def check_labels(run: Run) -> list[Finding]:
    """Labels outside ``0 .. C-1`` (``0/1`` for one sigmoid output)."""
    c = run.n_classes
    evidence: list[str] = []
    rounds: list[int] = []
    if c is not None and run.labels is not None and run.labels.size:
        values, counts = np.unique(run.labels, return_counts=True)
        bad = (values < 0) | (values >= c)
        if bad.any():
            expected = "0/1 (one sigmoid output)" if c == 2 else f"0..{c - 1}"
            shown = ", ".join(
                f"{int(v)} ({int(n)} samples)"
                for v, n in zip(values[bad], counts[bad], strict=True)
            )
            evidence.append(
                f"data/prepared/samples.parquet: labels {shown} outside {expected}; "
                f"schema.json declares {c} classes, so the model has "
                f"{'one sigmoid output' if c == 2 else f'{c} softmax outputs'}"
            )
            holders = _clients_holding(run, set(int(v) for v in values[bad]))
            if holders:
                evidence.append(
                    "clients training on them: "
                    + ", ".join(f"client {k} ({n})" for k, n in holders[:10])
                )
    negative = {
        k: v for k, v in _global_series(run, "loss").items() if v is not None and v < 0
    }
    if negative:
        k = min(negative, key=lambda r: negative[r])
        rounds = sorted(negative)
        evidence.append(
            f"global held-out loss is negative in {_rounds_text(rounds)} (down to "
            f"{_fmt(negative[k])} in round {k}): cross-entropy cannot be negative "
            "with labels the loss accepts"
        )
    if not evidence:
        return []
    return [
        Finding(
            code="labels-outside-loss-range",
            severity="error",
            title="labels outside the range the model's loss expects",
            evidence=evidence,
            fix=(
                "map labels to 0..C-1 before ingest (0/1 for a binary task: the "
                "sigmoid output's cross-entropy rewards a label of 2 for an "
                "ever larger logit, so the loss falls without bound and the weights "
                "grow); for tables set data.label_column / data.num_classes to "
                "match; then rerun from ingest"
            ),
            rounds=rounds,
        )
    ]


def _clients_holding(run: Run, bad: set[int]) -> list[tuple[int, int]]:
    """(client, number of training samples with a bad label), most first."""
    if run.manifest is None or run.labels is None or run.sample_ids is None:
        return []
    label_of = dict(zip(run.sample_ids, run.labels, strict=True))
    out = []
    for entry in run.manifest.get("clients", []):
        n = sum(1 for sid in entry.get("train", []) if label_of.get(sid) in bad)
        if n:
            out.append((int(entry["client"]), n))
    return sorted(out, key=lambda item: -item[1])


# ---------------------------------------------------------------- (e) learning rate


def check_learning_rate(run: Run) -> list[Finding]:
    """Non-finite values, exploding training losses or updates, oscillation.

    Rounds after one where a single client's update dominated
    (:data:`OUTLIER_SEVERE_RATIO`) are not judged: what follows is that client's
    doing (see :func:`check_outliers`), whatever the learning rate.
    """
    severe_outliers = [
        k
        for rounds in outlier_rounds(run).values()
        for k, r in rounds.items()
        if r["ratio"] >= OUTLIER_SEVERE_RATIO
    ]
    horizon = min(severe_outliers, default=math.inf)
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
        if broken:
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
                    f"round {k}: median local training loss {_fmt(median)} is "
                    f"{median / chance:.3g}x the loss of guessing (ln {run.n_classes}"
                    f" = {chance:.3g})"
                )
        norms = [c["update_norm"] for c in _finite_clients(h)]
        size = h.get("global", {}).get("weight_norm_before")
        if norms and size:
            ratio = statistics.median(norms) / size
            line = (
                f"round {k}: the median client update "
                f"({_fmt(statistics.median(norms))}) is {ratio:.3g}x the global "
                f"weight norm ({_fmt(size)})"
            )
            if ratio > LR_STEP_SEVERE:
                severe = True
                triggers.add(k)
                evidence.append(line)
            elif ratio > LR_STEP_RATIO:
                supporting.append(line)
    series = {k: v for k, v in _global_series(run, "loss").items() if k <= horizon}
    accuracy = _global_series(run, "accuracy")
    lost = [k for k, v in series.items() if v is None and accuracy.get(k) is not None]
    if lost:
        severe = True
        triggers.update(lost)
        evidence.append(f"global loss is NaN/inf in {_rounds_text(lost)}")
    swings = _oscillation(series)
    if swings:
        triggers.update(swings)
        values = ", ".join(_fmt(series[k]) for k in sorted(swings))
        evidence.append(
            f"global loss swings up and down by more than {OSCILLATION_JUMP:.0%} "
            f"in {_rounds_text(swings)} ({values})"
        )
    if not triggers:
        return []
    lr = _param(run, "train.lr")
    optimizer = _param(run, "train.optimizer")
    now = f" (now {lr:g}, {optimizer})" if lr is not None else ""
    suggestion = f"; try {lr / 10:g}" if lr is not None else ""
    return [
        Finding(
            code="learning-rate-too-high",
            severity="error" if severe else "warning",
            title="the learning rate is too high: local training blows up",
            evidence=evidence + supporting,
            fix=f"lower train.lr{now}{suggestion}; if only a few clients blow up, "
            "also check their data scaling",
            rounds=sorted(triggers),
        )
    ]


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


# ---------------------------------------------------------------- (b) aggregation


#: strategies whose step is a linear combination of client updates, with the
#: weight sum they apply (None: read it from strategy.server_lr, default 1)
LINEAR_STRATEGIES: dict[str, float | None] = {
    "fedavg": 1.0,
    "fedprox": 1.0,
    "krum": 1.0,
    "multikrum": 1.0,
    "fedavgm": None,
    "scaffold": None,
}


def expected_weight_sum(run: Run) -> float:
    """What the configured strategy's effective weights should sum to."""
    name = _param(run, "strategy.name", "fedavg")
    expected = LINEAR_STRATEGIES.get(name, 1.0)
    if expected is None:
        expected = float(_param(run, "strategy.server_lr", 1.0))
    return expected


def check_aggregation(run: Run) -> list[Finding]:
    """Effective aggregation weights that do not sum to what the strategy applies."""
    expected = expected_weight_sum(run)
    flagged: dict[int, dict[str, Any]] = {}
    for k, h in run.health.items():
        agg = h.get("aggregation", {})
        total, residual = agg.get("weight_sum"), agg.get("fit_residual")
        if total is None or residual is None or residual > FIT_RESIDUAL_MAX:
            continue
        if abs(total - expected) > WEIGHT_SUM_TOL:
            flagged[k] = agg
    if not flagged:
        return []
    first = min(flagged)
    agg = flagged[first]
    evidence = [
        f"round {k}: effective weights sum to {_fmt(a['weight_sum'])} (expected "
        f"{expected:g}); fit residual {_fmt(a['fit_residual'], 2)}"
        + (
            f", old global weights scaled by {_fmt(1 + a['global_coefficient'])}"
            if a.get("global_coefficient") not in (None, 0)
            and abs(a["global_coefficient"]) > WEIGHT_SUM_TOL
            else ""
        )
        for k, a in sorted(flagged.items())[:5]
    ]
    if len(flagged) > 5:
        evidence.append(f"... and {len(flagged) - 5} more rounds")
    h = run.health[first]
    by_client = {c["client"]: c for c in h.get("clients", [])}
    nominal = agg.get("nominal_weights", {})
    pairs = [
        f"client {c}: {_fmt(by_client[int(c)].get('aggregation_weight'), 3)} "
        f"(n_k share {_fmt(w, 3)})"
        for c, w in list(nominal.items())[:4]
        if int(c) in by_client
    ]
    if pairs:
        evidence.append(
            f"round {first} effective vs nominal weights: " + "; ".join(pairs)
        )
    norms = {k: run.health[k]["global"].get("weight_norm") for k in sorted(flagged)}
    known = [v for v in norms.values() if v is not None]
    if len(known) >= 2:
        evidence.append(
            f"global weight norm {_fmt(known[0])} -> {_fmt(known[-1])} over "
            f"{_rounds_text(sorted(flagged))}"
        )
    name = _param(run, "strategy.name", "fedavg")
    return [
        Finding(
            code="aggregation-weights-not-normalized",
            severity="error",
            title=f"aggregation weights sum to {_fmt(agg['weight_sum'], 3)}, not "
            f"{expected:g}",
            evidence=evidence,
            fix=(
                "the server must average: weights n_k / sum of n_k over the clients "
                "aggregated this round (they sum to 1); a sum S multiplies the global "
                "weights by S every round, so logits and loss grow while accuracy "
                f"holds. Check the aggregation code of strategy.name={name}; a larger "
                "step on purpose is strategy.server_lr with fedavgm"
            ),
            rounds=sorted(flagged),
        )
    ]


# ---------------------------------------------------------------- (d) outlier


def outlier_rounds(run: Run) -> dict[int, dict[int, dict[str, Any]]]:
    """Per client, the rounds where its update was an outlier, with the numbers."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for k, h in run.health.items():
        clients = _finite_clients(h)
        if len(clients) < OUTLIER_MIN_CLIENTS:
            continue
        norms = np.array([c["update_norm"] for c in clients], dtype=np.float64)
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
                    "norm": float(norms[i]),
                    "median_norm": median_norm,
                    "cosine": float(cos[i]) if have_cos else None,
                    "median_cosine": median_cos if have_cos else None,
                    "train_loss": c.get("train_loss"),
                    "big": bool(big),
                    "off": bool(off),
                }
    return out


def check_outliers(run: Run) -> list[Finding]:
    """One client whose update stands apart from the others'."""
    findings = []
    for client, rounds in sorted(outlier_rounds(run).items()):
        took_part = [
            k
            for k, h in run.health.items()
            if any(c["client"] == client for c in _finite_clients(h))
        ]
        worst = max(r["ratio"] for r in rounds.values())
        if (
            len(rounds) < OUTLIER_MIN_SHARE * len(took_part)
            and worst < OUTLIER_SEVERE_RATIO
        ):
            continue
        evidence = []
        for k, r in sorted(rounds.items())[:5]:
            parts = [
                f"round {k}: update norm {_fmt(r['norm'])} = {r['ratio']:.3g}x "
                f"the median {_fmt(r['median_norm'])}"
            ]
            if r["cosine"] is not None:
                parts.append(
                    f"cosine to the mean update {_fmt(r['cosine'], 3)} (median "
                    f"{_fmt(r['median_cosine'], 3)})"
                )
            if r["train_loss"] is not None:
                parts.append(f"train loss {_fmt(r['train_loss'])}")
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
                code="client-update-outlier",
                severity="error" if worst >= OUTLIER_SEVERE_RATIO else "warning",
                title=f"client {client}'s update is an outlier ({kind}) in "
                f"{len(rounds)}/{len(took_part)} rounds",
                evidence=evidence,
                fix=(
                    f"inspect client {client}'s data (labels shuffled or wrong, "
                    "features scaled differently) and its training; a robust "
                    "strategy limits one client's pull: strategy.name: fedmedian, "
                    "fedtrimmedavg (strategy.beta) or krum / multikrum "
                    "(strategy.num_byzantine: 1)"
                ),
                rounds=sorted(rounds),
            )
        )
    return findings


def _local_accuracy(run: Run, client: int, rounds: Sequence[int]) -> str:
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
                f"round {k}: its local model's accuracy {_fmt(float(mine.iloc[0]), 3)}"
                f" vs median {_fmt(float(others.median()), 3)} for the others"
            )
    return ""


# ---------------------------------------------------------------- (f) drift


def check_drift(run: Run) -> list[Finding]:
    """Client updates with little in common: drift from non-i.i.d. data."""
    outliers = {k for rounds in outlier_rounds(run).values() for k in rounds}
    method, partition_params, skew = _partition(run)
    non_iid = method is not None and method != "iid"
    judged: list[int] = []
    flagged: dict[int, tuple[float, float, float]] = {}
    for k, h in run.health.items():
        clients = _finite_clients(h)
        d = h.get("global", {}).get("divergence")
        cos = [
            c["cosine_to_mean"] for c in clients if c.get("cosine_to_mean") is not None
        ]
        if len(clients) < 2 or d is None or not cos or k in outliers:
            continue
        judged.append(k)
        normalized = d / (1.0 - 1.0 / len(clients))
        median_cos = statistics.median(cos)
        gap = h.get("gap", {}).get("accuracy")
        local_wins = gap < -DRIFT_GAP if gap is not None else non_iid
        if normalized > DRIFT_DIVERGENCE and median_cos < DRIFT_COSINE and local_wins:
            flagged[k] = (d, normalized, median_cos)
    if not flagged or len(flagged) < DRIFT_MIN_SHARE * len(judged):
        return []
    evidence = [
        f"{_rounds_text(sorted(flagged))} of {len(judged)}: divergence "
        f"{_fmt(min(v[0] for v in flagged.values()), 3)}-"
        f"{_fmt(max(v[0] for v in flagged.values()), 3)} (unrelated updates: "
        f"{1 - 1 / len(_finite_clients(run.health[min(flagged)])):.2g}); median cosine "
        f"to the mean update {_fmt(min(v[2] for v in flagged.values()), 3)}-"
        f"{_fmt(max(v[2] for v in flagged.values()), 3)}"
    ]
    layers = _mean_layer(run, sorted(flagged), "divergence")
    if layers:
        evidence.append(
            "most divergent layers: "
            + ", ".join(f"{name} {_fmt(v, 3)}" for name, v in layers[:3])
        )
    if method is not None:
        settings = ", ".join(
            f"{key}={partition_params[key]}"
            for key in ("alpha", "classes_per_client", "shards_per_client")
            if key in partition_params and method != "iid"
        )
        evidence.append(
            f"partition: {method}{f' ({settings})' if settings else ''}"
            + (
                f", label skew {skew:.2f} (0 = every client has the pool's mix)"
                if skew is not None
                else ""
            )
        )
    gaps = [
        run.health[k]["gap"].get("accuracy")
        for k in flagged
        if run.health[k].get("gap", {}).get("accuracy") is not None
    ]
    if gaps:
        evidence.append(
            f"global model on client tests minus local models: accuracy "
            f"{statistics.mean(gaps):+.3f} on average"
        )
    epochs = _param(run, "train.epochs")
    less = f" (now {epochs})" if epochs is not None else ""
    if method is not None and method != "iid":
        fix = (
            "correct for drift: strategy.name: fedprox (strategy.proximal_mu: 0.01) "
            f"or scaffold; fewer local epochs train.epochs{less}; more clients per "
            "round (federation.fraction_fit); with personalization the local models "
            "may be the goal"
        )
    else:
        fix = (
            "the data is split i.i.d., so the clients drift by over-fitting their "
            f"own samples: fewer local epochs train.epochs{less} or a lower train.lr;"
            " strategy.name: fedprox (strategy.proximal_mu) also holds them together"
        )
    return [
        Finding(
            code="client-drift",
            severity="warning",
            title="client updates have little in common (client drift)",
            evidence=evidence,
            fix=fix,
            rounds=sorted(flagged),
        )
    ]


def _mean_layer(run: Run, rounds: Sequence[int], key: str) -> list[tuple[str, float]]:
    """Layers by their mean ``key`` over ``rounds``, largest first."""
    values: dict[str, list[float]] = {}
    for k in rounds:
        for layer in run.health[k].get("layers", []):
            if layer.get(key) is not None:
                values.setdefault(layer["name"], []).append(layer[key])
    means = [(name, statistics.mean(v)) for name, v in values.items()]
    return sorted(means, key=lambda item: -item[1])


def _partition(run: Run) -> tuple[str | None, dict[str, Any], float | None]:
    if run.manifest is None:
        method = _param(run, "partition.method")
        alpha = _param(run, "partition.alpha")
        return method, ({} if alpha is None else {"alpha": alpha}), None
    from fedpipe.partition.manifest import label_skew

    try:
        skew: float | None = label_skew(run.manifest)
    except (KeyError, ValueError):
        skew = None
    return run.manifest.get("method"), dict(run.manifest.get("params", {})), skew


# ---------------------------------------------------------------- (g) norm stats


def check_norm_statistics(run: Run) -> list[Finding]:
    """Normalization layers whose moving statistics the clients pull apart."""
    judged = [k for k, h in run.health.items() if _norm_layers(h)]
    flagged: dict[str, dict[int, tuple[float, float]]] = {}
    for k in judged:
        for layer in _norm_layers(run.health[k]):
            d, spread = layer.get("stats_divergence"), layer.get("stats_spread")
            if d is None or spread is None:
                continue
            if d > STATS_DIVERGENCE and spread > STATS_SPREAD:
                flagged.setdefault(layer["name"], {})[k] = (d, spread)
    persistent = {
        name: rounds
        for name, rounds in flagged.items()
        if len(rounds) >= STATS_MIN_SHARE * len(judged)
    }
    if not persistent:
        return []
    evidence = []
    for name, rounds in persistent.items():
        ds = [v[0] for v in rounds.values()]
        spreads = [v[1] for v in rounds.values()]
        evidence.append(
            f"{name}: in {_rounds_text(sorted(rounds))} the clients' moving-statistics "
            f"changes diverge {_fmt(min(ds), 3)}-{_fmt(max(ds), 3)} and the clients' "
            f"statistics differ by {_fmt(min(spreads), 2)}-{_fmt(max(spreads), 2)} of "
            "their size"
        )
    gaps = [
        h["gap"]["loss"]
        for h in run.health.values()
        if h.get("gap", {}).get("loss") is not None
    ]
    if gaps:
        evidence.append(
            f"global model on client tests minus local models: loss "
            f"{statistics.mean(gaps):+.3g} on average"
        )
    rounds_all = sorted({k for rounds in persistent.values() for k in rounds})
    return [
        Finding(
            code="norm-statistics-disagree",
            severity="warning",
            title="normalization statistics disagree between clients",
            evidence=evidence,
            fix=(
                "the clients' inputs differ in scale or distribution, so one "
                "averaged batch-norm statistic fits none of them: keep batch norm "
                "local with personalization.method: fedbn, or build without it "
                "(model.batch_norm: false); also check each client's input scaling"
            ),
            rounds=rounds_all,
        )
    ]


def _norm_layers(health: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [layer for layer in health.get("layers", []) if layer.get("kind") == "norm"]


# ---------------------------------------------------------------- (a) loss rising


def check_loss_rising(run: Run) -> list[Finding]:
    """The global held-out loss rises while accuracy holds: over-confidence."""
    loss = {k: v for k, v in _global_series(run, "loss").items() if v is not None}
    accuracy = _global_series(run, "accuracy")
    if len(loss) < 3 or min(loss.values()) < 0:
        return []
    last = max(loss)
    best = min((k for k in loss if k < last), key=lambda k: loss[k])
    low, high = loss[best], loss[last]
    if not (high >= LOSS_RISE_FACTOR * low and high - low >= LOSS_RISE_MIN):
        return []
    acc_best, acc_last = accuracy.get(best), accuracy.get(last)
    if acc_best is None or acc_last is None or acc_last < acc_best - ACCURACY_HOLD:
        return []
    evidence = [
        f"global held-out loss {_fmt(low)} at round {best} -> {_fmt(high)} at round "
        f"{last} ({high / low:.3g}x); accuracy {_fmt(acc_best, 3)} -> "
        f"{_fmt(acc_last, 3)}"
    ]
    hb, hl = (
        run.health.get(best, {}).get("global"),
        run.health.get(last, {}).get("global"),
    )
    if hb and hl:
        evidence.append(
            f"mean confidence {_fmt(hb.get('mean_confidence'), 3)} -> "
            f"{_fmt(hl.get('mean_confidence'), 3)}, calibration error (ECE) "
            f"{_fmt(hb.get('ece'), 3)} -> {_fmt(hl.get('ece'), 3)}"
        )
        share = hl.get("loss_top_share")
        if share is not None:
            evidence.append(
                f"round {last}: the worst 1% of held-out samples carry {share:.0%} of "
                "the loss (confidently wrong predictions: Keras computes the loss "
                "from logits, so it is unbounded)"
            )
        if hb.get("weight_norm") and hl.get("weight_norm"):
            evidence.append(
                f"global weight norm {_fmt(hb['weight_norm'])} -> "
                f"{_fmt(hl['weight_norm'])}"
            )
        grown = _grown_layers(run.health[best], run.health[last])
        if grown:
            evidence.append(
                "layers that grew: "
                + ", ".join(f"{name} x{g:.3g}" for name, g in grown[:4])
            )
    severe = high / low >= LOSS_RISE_SEVERE
    return [
        Finding(
            code="loss-rising-accuracy-holds",
            severity="error" if severe else "warning",
            title="global loss rises while accuracy holds: the model grows "
            "over-confident",
            evidence=evidence,
            fix=(
                "the loss is dominated by a few confidently wrong samples whose "
                "logits keep growing; look for a cause above (aggregation weights, "
                "an outlier client, labels); otherwise keep the model of round "
                f"{best} (best loss) or train less: lower train.lr, fewer "
                "train.epochs or federation.rounds; judge the run by accuracy/AUC "
                "rather than by the loss"
            ),
            rounds=sorted(k for k in loss if k >= best),
        )
    ]


def _grown_layers(
    first: Mapping[str, Any], last: Mapping[str, Any]
) -> list[tuple[str, float]]:
    before = {
        layer["name"]: layer.get("weight_norm") for layer in first.get("layers", [])
    }
    out = []
    for layer in last.get("layers", []):
        a, b = before.get(layer["name"]), layer.get("weight_norm")
        if a and b and b / a > 1 + LAYER_GROWTH:
            out.append((layer["name"], b / a))
    return sorted(out, key=lambda item: -item[1])


# ---------------------------------------------------------------- missing records


def check_not_learning(run: Run) -> list[Finding]:
    """The global model no better than guessing after several rounds."""
    classes = run.n_classes
    rounds = sorted(run.rounds)
    if classes is None or len(rounds) < NOT_LEARNING_ROUNDS:
        return []
    chance = 1.0 / classes
    accuracy = _global_series(run, "accuracy")
    values = [accuracy.get(k) for k in rounds]
    if any(v is None for v in values) or max(values) > chance + CHANCE_MARGIN:
        return []
    local = [
        run.rounds[k].get("local", {}).get("accuracy")
        for k in rounds
        if run.rounds[k].get("local", {}).get("accuracy") is not None
    ]
    best_local = max(local) if local else None
    evidence = [
        f"global held-out accuracy {_fmt(values[0])} at round {rounds[0]} -> "
        f"{_fmt(values[-1])} at round {rounds[-1]}; guessing gives {_fmt(chance)} "
        f"({classes} classes)",
    ]
    if best_local is not None:
        evidence.append(
            f"local models on their own tests: best mean accuracy {_fmt(best_local)}"
        )
    norm_layers = any(
        layer.get("kind") == "norm"
        for h in run.health.values()
        for layer in h.get("layers", [])
    )
    if best_local is not None and best_local > chance + LOCAL_LEARNS:
        fix = "the clients learn but their aggregate does not: " + (
            "with batch normalization the global model's moving statistics "
            "barely move in short rounds and its averaged layers no longer fit "
            "them; try personalization.method: fedbn, more train.epochs, or "
            "model.batch_norm: false"
            if norm_layers
            else "look for client drift (non-i.i.d. data): strategy.name: "
            "fedprox or scaffold, fewer train.epochs"
        )
    else:
        fix = (
            "nothing learns, locally or globally: raise train.lr or train.epochs "
            "(now "
            f"{_param(run, 'train.lr')}, {_param(run, 'train.epochs')} epochs), "
            "try a model that fits the data (model.name), and check that the labels "
            "belong to the features"
        )
    return [
        Finding(
            code="not-learning",
            severity="warning",
            title=f"the global model is no better than guessing after {len(rounds)} "
            "rounds",
            evidence=evidence,
            fix=fix,
            rounds=rounds,
        )
    ]


def check_health_present(run: Run) -> list[Finding]:
    """Rounds without a health record: the per-client and per-layer checks skip them."""
    missing = sorted(set(run.rounds) - set(run.health))
    if not missing:
        return []
    return [
        Finding(
            code="health-records-missing",
            severity="info",
            title="some rounds have no health record; their clients and layers "
            "were not checked",
            evidence=[f"no metrics/health/round-K.json for {_rounds_text(missing)}"],
            fix="rerun those rounds with a fedpipe that writes metrics/health",
            rounds=missing,
        )
    ]


CHECKS: tuple[Callable[[Run], list[Finding]], ...] = (
    check_labels,
    check_learning_rate,
    check_aggregation,
    check_outliers,
    check_norm_statistics,
    check_drift,
    check_loss_rising,
    check_not_learning,
    check_health_present,
)


#: a finding on the left, when present, explains these others: they are kept but
#: demoted to info and marked as its likely consequence, so the fix a person reads
#: first is the root cause's (lowering train.lr does not cure labels of 2)
EXPLAINS: dict[str, tuple[str, ...]] = {
    "labels-outside-loss-range": (
        "not-learning",
        "learning-rate-too-high",
        "aggregation-weights-not-normalized",
        "client-update-outlier",
        "client-drift",
        "loss-rising-accuracy-holds",
    ),
    "aggregation-weights-not-normalized": (
        "learning-rate-too-high",
        "loss-rising-accuracy-holds",
    ),
    "learning-rate-too-high": ("loss-rising-accuracy-holds", "not-learning"),
    "client-update-outlier": ("loss-rising-accuracy-holds",),
}


def explain(findings: Sequence[Finding]) -> list[Finding]:
    """Demote findings that another present finding explains (see EXPLAINS)."""
    present = {f.code for f in findings}
    explained = {c for c in present if any(c in EXPLAINS.get(o, ()) for o in present)}
    out = []
    for f in findings:
        causes = [c for c in present if f.code in EXPLAINS.get(c, ())]
        if causes:
            # name the root cause, not a symptom that is itself explained
            roots = [c for c in causes if c not in explained] or causes
            cause = min(roots, key=lambda c: PRIORITY.get(c, 8))
            f = replace(
                f,
                severity="info",
                title=f"{f.title} (likely a consequence of {cause})",
                evidence=[*f.evidence, f"explained by the {cause} finding"],
            )
        out.append(f)
    return out


def rank(findings: Sequence[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; root causes before symptoms."""
    return sorted(
        findings,
        key=lambda f: (
            SEVERITIES.index(f.severity),
            PRIORITY.get(f.code, 8),
            f.rounds[:1] or [0],
        ),
    )


def diagnose(root: Path) -> list[Finding]:
    """Findings about the run under ``root``, most important first.

    Raises
    ------
    FileNotFoundError
        If the run has no recorded round.
    """
    run = load_run(Path(root))
    return rank(explain([f for check in CHECKS for f in check(run)]))


# ---------------------------------------------------------------- formatting


def format_text(findings: Sequence[Finding]) -> str:
    """Plain text for a terminal."""
    if not findings:
        return "no findings"
    blocks = []
    for i, f in enumerate(findings, start=1):
        lines = [f"{i}. [{f.severity}] {f.title}  ({f.code})"]
        lines += [f"   - {line}" for line in f.evidence]
        lines.append(f"   fix: {f.fix}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def format_markdown(findings: Sequence[Finding]) -> str:
    """Markdown for a report."""
    if not findings:
        return "no findings"
    blocks = []
    for f in findings:
        lines = [f"### {f.severity}: {f.title}", "", f"`{f.code}`", ""]
        lines += [f"- {line}" for line in f.evidence]
        lines += ["", f"**Fix:** {f.fix}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def exit_code(findings: Sequence[Finding], *, fail_on: str = "error") -> int:
    """1 if a finding is at least as severe as ``fail_on``, else 0.

    ``fail_on`` is a severity (``error``, ``warning``, ``info``) or ``never``.
    """
    if fail_on == "never":
        return 0
    worst = SEVERITIES.index(fail_on)
    return int(any(SEVERITIES.index(f.severity) <= worst for f in findings))
