"""Every feature with every other: a pairwise matrix of settings through the real
`fedpipe run`.

Eleven factors (the data, the partition, feature skew, the strategy,
personalization, privacy, an attack, failures, evaluation, the wire, the runner) make
millions of combinations; a covering array from ``allpairspy`` holds every *pair*
of their levels in a few dozen rows, and most defects where two features meet
need only that pair. Each row is a tiny federation (6 clients, 2 rounds, an MLP; a
small batch-norm CNN on images)
in a project of its own, run with ``fedpipe run`` (report included). A row
passes when

- the run completes and then ``fedpipe audit`` finds every invariant holding
  (rows accounted for, public means public, views of this run, no small cell),
  ``dvc status`` is clean, and a second run of a fresh copy of the project
  gives the same bits (models and published records; ``--no-repeat`` skips it);
- or the run is *refused*: exit status 2 before any stage ran (no ``dvc.lock``),
  with one line naming the keys that conflict (a documented rule in the code).

Anything else fails the row, with its first error line. Prints a Markdown table
(row, the levels, outcome, seconds) and exits 1 if a row failed; ``--out`` also
writes it to a file (docs/matrix.md keeps the last full table with its commit).

    python scripts/matrix.py [-j N] [--seed S] [--only 3,7] [--list]
        [--no-repeat] [--out docs/matrix.md] [--keep DIR]

On 2 cores a row takes 1-2 minutes (two runs); the whole table about an hour.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tiny_data import merge, write_image_folder, write_table

sys.path.insert(0, str(Path(__file__).parent))
import compare_trees as ct  # noqa: E402

BIN = Path(sys.executable).parent
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
EXIT_REFUSED = 2  # bad params, said before any work (fedpipe.core.errors)
SITES = 6  # natural clients in every data set: one per client of BASE

#: what every row shares: 6 clients, 2 rounds, tiny batches
BASE: dict[str, Any] = {
    "seed": 11,
    "federation": {"clients": 6, "rounds": 2, "fraction_fit": 0.7, "min_clients": 2},
    "partition": {"min_samples": 8, "min_classes": 1},
    "train": {"epochs": 1, "batch_size": 16, "lr": 0.05},
    "model": {"name": "mlp"},
    "validation": {"min_rows": 50},
}

Params = dict[str, Any]


def _images(root: Path) -> Params:
    write_image_folder(root / "data/images", per_class=60)
    mapping = ["path,client"] + [
        f"{p.relative_to(root / 'data/images').as_posix()},site-{i % SITES}"
        for i, p in enumerate(sorted((root / "data/images").rglob("img_*")))
    ]
    (root / "data/natural.csv").write_text("\n".join(mapping) + "\n")
    return {
        "data": {"source": "images", "path": "data/images", "image_size": [16, 16],
                 "color_mode": "grayscale"},
        "partition": {"natural_mapping": "data/natural.csv",
                      "continuous_by": "mean_intensity"},
        # a small CNN with batch norm: what personalization.method fedbn keeps
        # local (on a table the MLP has none, and fedbn is refused by name)
        "model": {"name": "cnn", "depth": 2, "width": 8, "batch_norm": True},
    }  # fmt: skip


def _numeric(root: Path) -> Params:
    import pandas as pd

    write_table(root / "data/table.csv", rows=300)
    table = pd.read_csv(root / "data/table.csv")
    table["hospital"] = [f"site-{i % SITES}" for i in range(len(table))]
    table.to_csv(root / "data/table.csv", index=False)
    return {
        "data": {"source": "table", "path": "data/table.csv",
                 "client_column": "hospital"},
        "partition": {"continuous_by": "f0"},
    }  # fmt: skip


def _mixed(root: Path) -> Params:
    """Numbers, a categorical column with a rare value, missing cells and a
    free-text column."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 300
    y = rng.integers(0, 2, size=n)
    words = ["good", "great", "bad", "awful", "film", "plot", "the"]
    frame = pd.DataFrame(
        {
            "size": rng.normal(0, 1, n) * 100 + y * 80,
            "age": rng.integers(18, 90, n),  # complete: the continuous partition's
            "weight": rng.normal(0, 1, n) + y,
            "color": rng.choice(["red", "green", "blue", "violet"], size=n,
                                p=[0.4, 0.3, 0.27, 0.03]),
            "review": [" ".join(rng.choice(words, 3)) + (" yes" if v else " no")
                       for v in y],
            "hospital": [f"site-{i % SITES}" for i in range(n)],
            "label": np.where(y == 1, "pos", "neg"),
        }
    )  # fmt: skip
    frame.loc[rng.random(n) < 0.05, "size"] = np.nan
    frame.loc[rng.random(n) < 0.05, "color"] = np.nan
    (root / "data").mkdir(parents=True, exist_ok=True)
    frame.to_csv(root / "data/table.csv", index=False)
    return {
        "data": {"source": "table", "path": "data/table.csv",
                 "client_column": "hospital"},
        "partition": {"continuous_by": "age"},
        "preprocess": {"missing": "mean", "text": ["review"],
                       "min_category_count": 3},
    }  # fmt: skip


def _repeated(root: Path) -> Params:
    """Distinct people, few feature values: most rows share every feature value
    with another row (a passenger list's sex, class and age band)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(5)
    n = 300
    sex = rng.integers(0, 2, n)
    klass = rng.integers(1, 4, n)
    band = rng.integers(0, 4, n)
    y = (rng.random(n) < 0.2 + 0.4 * sex + 0.1 * (klass == 1)).astype(int)
    frame = pd.DataFrame(
        {"person": [f"p{i:04d}" for i in range(n)], "sex": sex, "pclass": klass,
         "age_band": band, "hospital": [f"site-{i % SITES}" for i in range(n)],
         "label": y}
    )  # fmt: skip
    (root / "data").mkdir(parents=True, exist_ok=True)
    frame.to_csv(root / "data/table.csv", index=False)
    return {
        "data": {"source": "table", "path": "data/table.csv", "id_column": "person",
                 "client_column": "hospital"},
        "partition": {"continuous_by": "age_band"},
    }  # fmt: skip


#: factor -> level -> what it sets (a dict of params, or a function of the
#: project's folder that writes the data and returns the params)
FACTORS: dict[str, dict[str, Params | Callable[[Path], Params]]] = {
    "data": {"images": _images, "numeric": _numeric, "mixed": _mixed,
             "repeated": _repeated},
    "partition": {
        "iid": {"partition": {"method": "iid"}},
        "dirichlet": {"partition": {"method": "dirichlet", "alpha": 0.5}},
        "quantity": {"partition": {"method": "quantity", "quantity_sigma": 0.5}},
        "natural": {"partition": {"method": "natural"}},
        "continuous": {"partition": {"method": "continuous", "strictness": 0.5}},
    },
    "feature_skew": {
        "none": {},
        "noise": {"partition": {"feature_skew": "noise"}},
        "domains": {"partition": {"feature_skew": "domains"}},
    },
    "strategy": {
        "fedavg": {},
        "fedprox": {"strategy": {"name": "fedprox", "proximal_mu": 0.01}},
        "scaffold": {"strategy": {"name": "scaffold"}},
        "fedadam": {"strategy": {"name": "fedadam"}},
        "krum": {"strategy": {"name": "krum", "num_byzantine": 1},
                 "federation": {"fraction_fit": 1.0}},
        "fednova": {"strategy": {"name": "fednova"}},
    },
    "personalization": {
        "none": {},
        "fedper": {"personalization": {"method": "fedper"}},
        "fedbn": {"personalization": {"method": "fedbn"}},
        "ditto": {"personalization": {"method": "ditto"}},
    },
    "privacy": {
        "none": {},
        "central_fixed": {"privacy": {"mechanism": "central",
                                      "noise_multiplier": 0.5}},
        "central_poisson_adaptive": {
            # z_b given: its default (clients per round / 10) is below sigma
            # in a 6-client federation, which the accounting refuses
            "privacy": {"mechanism": "central", "noise_multiplier": 0.5,
                        "adaptive_clip": True, "count_noise_multiplier": 5.0},
            # min_clients 1: Poisson sampling at 0.7 of 6 clients sampled one
            # client in a round of row 30, which min_clients 2 stops by its rule
            "federation": {"sampling": "poisson", "min_clients": 1},
        },
        "local": {"privacy": {"mechanism": "local", "noise_multiplier": 0.1}},
        "dpsgd": {"privacy": {"mechanism": "dpsgd", "noise_multiplier": 0.5}},
        # the clients' Skellam noise under secure aggregation (wire: secagg)
        "distributed": {"privacy": {"mechanism": "distributed",
                                    "noise_multiplier": 0.5}},
    },
    "attack": {
        "none": {},
        "ipm": {"attack": {"name": "ipm", "share": 0.2}},
        "label_flip_targeted": {"attack": {"name": "label_flip_targeted",
                                           "share": 0.2, "source_class": 0,
                                           "target_class": 1}},
    },
    "failures": {
        "none": {},
        # min_clients 1: a round goes on while one update remains (at 2, a
        # seeded draw leaving one of four stops the run by the documented rule)
        "dropout": {"federation": {"dropout": 0.2, "min_clients": 1}},
        "deadline": {"federation": {"round_deadline_steps": 2}},
    },
    "evaluation": {
        "auto": {},
        "participants": {"evaluation": {"clients": "participants"}},
        "sample": {"evaluation": {"clients": "sample", "sample_size": 2}},
    },
    "wire": {
        "none": {},
        "int8": {"compression": {"uplink": "int8"}},
        "qsgd": {"compression": {"uplink": "qsgd", "bits": 4}},
        "topk": {"compression": {"uplink": "topk", "fraction": 0.05}},
        "secagg": {"secure_aggregation": {"name": "secagg_plus"}},
    },
    "runner": {
        "local": {},
        "dask": {"runtime": {"runner": "dask", "dask_workers": 1}},
    },
    # train.cohort_size: auto (the default) trains the MLP's clients in
    # vectorized cohorts, the images' batch-norm CNN one by one
    "cohorts": {
        "auto": {},
        "one_by_one": {"train": {"cohort_size": None}},
        "three": {"train": {"cohort_size": 3}},
    },
}  # fmt: skip


#: (data level, factor a, level a, factor b, level b) -> the rule's line: a
#: pair of levels fedpipe refuses on that data (a single level: b = a)
Refusals = dict[tuple[str, str, str, str, str], str]


def refusals() -> Refusals:
    """Every level, and every pair of levels of two other factors, that
    fedpipe's params rules refuse on each data level, with the rule's line.

    Checked with :func:`fedpipe.config.params.parse_params` (what ``fedpipe
    sync`` runs) on ``fedpipe init``'s params with the row's settings, the data
    written once in a scratch folder. Two seconds for the ~2,000 checks.
    """
    import itertools

    from fedpipe.config.params import ParamsError, parse_params
    from fedpipe_app.project import template_text

    raw = yaml.safe_load(template_text("params.yaml"))
    raw["round_chain"] = {k: k - 1 for k in range(1, BASE["federation"]["rounds"] + 1)}
    levels = [(f, lv) for f in FACTORS if f != "data" for lv in FACTORS[f]]
    out: Refusals = {}
    with tempfile.TemporaryDirectory() as scratch:
        for data, write in FACTORS["data"].items():
            base = merge(merge(raw, BASE), write(Path(scratch) / data))
            for (fa, la), (fb, lb) in itertools.combinations_with_replacement(
                levels, 2
            ):
                if fa == fb and la != lb:
                    continue
                try:
                    parse_params(merge(merge(base, FACTORS[fa][la]), FACTORS[fb][lb]))
                except ParamsError as exc:
                    line = str(exc).splitlines()[0].removeprefix("params.yaml: ")
                    out[(data, fa, la, fb, lb)] = line
            _lift_pairs(out, data, base, parse_params, ParamsError)
    return out


def _lift_pairs(
    out: Refusals, data: str, base: Params, parse: Callable, error: type
) -> None:
    """Drop the refusal of a pair whose level is refused alone only for want of
    a third factor's level (``privacy=distributed`` without ``wire=secagg``):
    the pair runs when a lifting level (:func:`lifters`) joins it."""
    for d, fa, la, fb, lb in list(out):
        if d != data or (fa, la) == (fb, lb):
            continue
        for f, lv in ((fa, la), (fb, lb)):
            for other, ok in lifters(data, f, lv, out).items():
                if other in (fa, fb):
                    continue
                for level in ok:
                    raw = merge(merge(base, FACTORS[fa][la]), FACTORS[fb][lb])
                    try:
                        parse(merge(raw, FACTORS[other][level]))
                    except error:
                        continue
                    out.pop((d, fa, la, fb, lb), None)
                    break


def refused_by(row: dict[str, str], refused: Refusals) -> str | None:
    """The rule that refuses a (partial) row: a level, or a pair of levels, of
    its other factors on its data level (None: no rule does). A level refused
    alone that another factor's level makes runnable (``privacy=distributed``
    with ``wire=secagg``) counts only once that factor's level in the row does
    not (:func:`lifted`)."""
    data = row.get("data")
    others = [(f, lv) for f, lv in row.items() if f != "data"]
    for i, (fa, la) in enumerate(others):
        for fb, lb in others[i:]:
            for key in ((data, fa, la, fb, lb), (data, fb, lb, fa, la)):
                if key not in refused:
                    continue
                if (fa, la) == (fb, lb) and lifted(data, fa, la, row, refused):
                    continue
                return refused[key]
    return None


def lifters(
    data: str | None, factor: str, level: str, refused: Refusals
) -> dict[str, list[str]]:
    """For a level refused alone on ``data``: each other factor's levels with
    which the pair runs (the level needs one of them), by factor; empty when no
    level lifts it (FedBN on the tables' MLP)."""
    if (data, factor, level, factor, level) not in refused:
        return {}
    out = {}
    for other in FACTORS:
        if other in ("data", factor):
            continue
        ok = [
            lv
            for lv in FACTORS[other]
            if (data, factor, level, other, lv) not in refused
            and (data, other, lv, factor, level) not in refused
        ]
        if ok:
            out[other] = ok
    return out


def lifted(
    data: str | None, factor: str, level: str, row: dict[str, str], refused: Refusals
) -> bool:
    """Whether a level refused alone is made runnable in ``row``: a factor that
    lifts it is not in the (partial) row yet, or is at a lifting level."""
    for other, ok in lifters(data, factor, level, refused).items():
        if other not in row or row[other] in ok:
            return True
    return False


def rows(seed: int = 0, refused: Refusals | None = None) -> list[dict[str, str]]:
    """The covering array: every pair of levels of any two factors that
    fedpipe runs together is in some row (allpairspy's greedy construction; the
    factors' levels are shuffled by ``seed``, so another seed gives another
    array). With ``refused`` (:func:`refusals`) no row holds a refused level or
    pair, so no row is spent on a refusal and every pair it can run, runs; the
    refused pairs are listed apart (:func:`refused_pairs`), each with its rule.
    """
    import random

    from allpairspy import AllPairs

    rng = random.Random(seed)
    names = list(FACTORS)
    levels = []
    for name in names:
        order = list(FACTORS[name])
        rng.shuffle(order)
        levels.append(order)

    def runnable(values: list[str]) -> bool:
        partial = dict(zip(names, values, strict=False))
        return refused is None or refused_by(partial, refused) is None

    out = [
        dict(zip(names, row, strict=True))
        for row in AllPairs(levels, filter_func=runnable)
    ]
    return out + _completed(out, levels, refused or {})


def _completed(
    rows: list[dict[str, str]], levels: list[list[str]], refused: Refusals
) -> list[dict[str, str]]:
    """Rows for the pairs allpairspy's greedy construction left out under its
    filter (it does not promise them all): each such pair, if some data level
    runs it, in a row filled greedily with the levels that cover most of the
    pairs still missing."""
    import itertools

    names = list(FACTORS)
    pairs = {
        (a, la, b, lb)
        for (i, a), (j, b) in itertools.combinations(enumerate(names), 2)
        for la in levels[i]
        for lb in levels[j]
    }
    missing = pairs - {
        (a, row[a], b, row[b])
        for row in rows
        for a, b in itertools.combinations(names, 2)
    }
    added: list[dict[str, str]] = []
    for a, la, b, lb in sorted(missing):
        if (a, la, b, lb) not in missing:
            continue  # covered by a row added meanwhile
        row: dict[str, str] | None = {a: la, b: lb}
        for i, name in enumerate(names):
            if name in row:
                continue
            options = [
                lv for lv in levels[i]
                if refused_by({**row, name: lv}, refused) is None
            ]  # fmt: skip
            if not options:
                row = None
                break
            row[name] = max(
                options,
                key=lambda lv: sum(
                    (n, row[n], name, lv) in missing or (name, lv, n, row[n]) in missing
                    for n in row
                ),
            )
        if row is None or refused_by(row, refused) is not None:
            continue  # refused on every data level that could carry it
        row = {n: row[n] for n in names}
        added.append(row)
        missing -= {(x, row[x], y, row[y]) for x, y in itertools.combinations(names, 2)}
    return added


def refused_pairs(refused: Refusals) -> dict[tuple[str, str, str, str], str]:
    """``(factor a, level a, factor b, level b)`` -> the rule, for each pair
    that runs on no data level: refused as a pair, or one of its levels refused
    there (FedBN on the tables, DP-SGD on the batch-norm CNN of the images: the
    pair runs nowhere); a pair refused on some data levels only is in the rows
    with the others. Plus ``("data", d, factor, level)`` for a level refused on
    one data level."""
    import itertools

    data_levels = list(FACTORS["data"])
    # levels refused alone that no other level makes runnable (a pair with
    # them is refused by their rule; one that some level lifts is a pair's)
    singles = {
        (d, fa, la): rule
        for (d, fa, la, fb, lb), rule in refused.items()
        if (fa, la) == (fb, lb) and not lifters(d, fa, la, refused)
    }
    out: dict[tuple[str, str, str, str], str] = {
        ("data", d, f, lv): rule for (d, f, lv), rule in singles.items()
    }
    levels = [(f, lv) for f in FACTORS if f != "data" for lv in FACTORS[f]]
    for (fa, la), (fb, lb) in itertools.combinations(levels, 2):
        if fa == fb:
            continue
        rules = []
        for d in data_levels:
            rule = (
                singles.get((d, fa, la))
                or singles.get((d, fb, lb))
                or refused.get((d, fa, la, fb, lb))
                or refused.get((d, fb, lb, fa, la))
            )
            if rule is None:
                break
            rules.append(rule)
        else:
            out[(fa, la, fb, lb)] = "; ".join(dict.fromkeys(rules))
    return out


#: the data level a product row takes: the first of these its levels run on
#: (the tables' MLP before the images' CNN, which is slower)
PRODUCT_DATA = ("numeric", "mixed", "repeated", "images")


def product_rows(
    factors: Sequence[str],
    refused: Refusals,
    exclude: Sequence[tuple[str, str]] = (),
) -> list[tuple[dict[str, str], str | None]]:
    """Every combination of the levels of ``factors`` (the full product, not
    pairs: ``--product privacy,personalization,evaluation`` asks whether *any*
    DP mechanism with *any* personalization and *any* evaluation setting keeps
    public files public), the other factors at their first level and the data
    at the first of :data:`PRODUCT_DATA` that runs the combination. Each with
    None, or the rule that refuses it on every data level (it is not run).
    ``exclude``: (factor, level) pairs left out of the product."""
    import itertools

    names = list(FACTORS)
    unknown = [f for f in factors if f not in FACTORS or f == "data"]
    if unknown:
        raise ValueError(
            f"--product: no factor {unknown[0]!r} (one of "
            f"{', '.join(n for n in names if n != 'data')})"
        )
    levels = [[lv for lv in FACTORS[f] if (f, lv) not in set(exclude)] for f in factors]
    base = {n: next(iter(FACTORS[n])) for n in names if n not in factors}
    out: list[tuple[dict[str, str], str | None]] = []
    for combo in itertools.product(*levels):
        picked = {**base, **dict(zip(factors, combo, strict=True))}
        rule = None
        for data in PRODUCT_DATA:
            row = {n: {**picked, "data": data}[n] for n in names}
            rule = refused_by(row, refused)
            if rule is None:
                break
        out.append((row, rule))
    return out


def params_for(row: dict[str, str], root: Path) -> Params:
    """The row's ``params.yaml`` overrides; writes its data under ``root``."""
    out = dict(BASE)
    for factor, level in row.items():
        setting = FACTORS[factor][level]
        out = merge(out, setting(root) if callable(setting) else setting)
    return out


@dataclass
class Outcome:
    """One row's result."""

    index: int
    row: dict[str, str]
    outcome: str  # "ok", "refused", or "FAILED"
    detail: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.outcome in ("ok", "refused")


def _run(
    args: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.startswith("error:")]
    return (said or lines[-1:] or ["(no output)"])[0][:300]


def _bits(project: Path) -> str:
    """sha256 over the models and the published round records."""
    h = hashlib.sha256()
    for pattern in ("models/**/*.npz", "metrics/rounds/*.json", "metrics/clients/*"):
        for path in sorted(project.glob(pattern)):
            h.update(path.relative_to(project).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class Refused(Exception):
    """``fedpipe sync`` refused the row's params (exit 2, one ``error:`` line)."""


def make_project(folder: Path, row: dict[str, str], env: dict[str, str]) -> Path:
    """A committed fedpipe project for ``row`` at ``folder``.

    Raises
    ------
    Refused
        ``fedpipe sync`` refused the params by a rule (before any stage).
    RuntimeError
        Anything else failed.
    """
    proc = _run([FEDPIPE, "init", str(folder)], folder.parent, env)
    if proc.returncode != 0:
        raise RuntimeError(f"fedpipe init: {_error_line(proc)}")
    raw = yaml.safe_load((folder / "params.yaml").read_text())
    raw.pop("round_chain", None)
    params = merge(raw, params_for(row, folder))
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in ([FEDPIPE, "sync"], ["git", "add", "-A"],
                ["git", "commit", "-qm", "matrix row"]):  # fmt: skip
        proc = _run(cmd, folder, env)
        if proc.returncode == EXIT_REFUSED and cmd[0] == FEDPIPE:
            if "Traceback" not in proc.stderr:
                raise Refused(_error_line(proc))
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])}: {_error_line(proc)}")
    return folder


def run_row(
    index: int, row: dict[str, str], work: Path, env: dict[str, str], repeat: bool
) -> Outcome:
    """Make the row's project, run it, and judge it."""
    start = time.perf_counter()

    def done(outcome: str, detail: str) -> Outcome:
        return Outcome(index, row, outcome, detail, time.perf_counter() - start)

    folder = work / f"row-{index:02d}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        project = make_project(folder / "p", row, env)
    except Refused as exc:
        return done("refused", str(exc))
    except RuntimeError as exc:
        return done("FAILED", f"setup: {exc}")
    fresh = folder / "fresh"
    if repeat:
        shutil.copytree(project, fresh, symlinks=True)
    proc = _run([FEDPIPE, "run", "--no-server-start"], project, env)
    (folder / "run.stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        line = _error_line(proc)
        refused = (
            proc.returncode == EXIT_REFUSED and not (project / "dvc.lock").exists()
        )
        if refused and "Traceback" not in proc.stderr:
            return done("refused", line)
        return done("FAILED", f"exit {proc.returncode}: {line}")
    audit = _run([FEDPIPE, "audit", "--format", "json"], project, env)
    try:
        verdicts = json.loads(audit.stdout)
    except json.JSONDecodeError:
        return done("FAILED", f"fedpipe audit: {_error_line(audit)}")
    broken = [v for v in verdicts if not v["ok"]]
    if broken:
        first = broken[0]
        return done(
            "FAILED",
            f"invariant {first['invariant']}: {first['violations'][0][:240]}"
            + (f" (+{len(broken) - 1} more invariants)" if len(broken) > 1 else ""),
        )
    status = _run([DVC, "status"], project, env)
    if "up to date" not in status.stdout:
        return done("FAILED", f"dvc status not clean: {status.stdout.strip()[:200]}")
    if repeat:
        # the DP noise is keyed by the project's secret key (made at its first
        # run, never published): the second run is given the same key
        key = project / ".fedpipe/dp.key"
        if key.is_file():
            (fresh / ".fedpipe").mkdir(exist_ok=True)
            shutil.copy2(key, fresh / ".fedpipe/dp.key")
        again = _run([FEDPIPE, "run", "--no-server-start", "--no-report"], fresh, env)
        (folder / "run2.stderr.txt").write_text(again.stderr)
        if again.returncode != 0:
            return done(
                "FAILED", f"second run: exit {again.returncode}: {_error_line(again)}"
            )
        if _bits(fresh) != _bits(project):
            return done("FAILED", "a second run gave other bits")
    return done(
        "ok", "invariants hold, dvc status clean" + (", same bits" if repeat else "")
    )


def _keep_failures(work: Path, outcomes: Sequence[Outcome]) -> None:
    """The runs' output of each failed row, kept when the projects are not
    (``fedpipe-matrix-failures/row-NN/`` in the temporary folder): a failure
    that does not come back on a rerun is still there to read."""
    keep = Path(tempfile.gettempdir()) / "fedpipe-matrix-failures"
    for o in outcomes:
        if o.outcome != "FAILED":
            continue
        target = keep / f"row-{o.index:02d}"
        target.mkdir(parents=True, exist_ok=True)
        for log in (work / f"row-{o.index:02d}").glob("*.txt"):
            shutil.copy2(log, target / log.name)
        print(f"matrix.py: row {o.index}'s output kept in {target}", file=sys.stderr)


def refusal_table(refused: Refusals) -> str:
    """The Markdown list of what is refused before any stage runs, each with the
    rule's line: the levels refused on a data level, the pairs refused on every
    data level (:func:`refused_pairs`)."""
    lines = ["| refused | on | rule |", "|---|---|---|"]
    for key, rule in sorted(refused_pairs(refused).items()):
        if key[0] == "data":
            what, where = f"{key[2]}={key[3]}", f"data={key[1]}"
        else:
            what, where = f"{key[0]}={key[1]} with {key[2]}={key[3]}", "every data"
        lines.append(f"| {what} | {where} | {rule.replace('|', '/')[:240]} |")
    return "\n".join(lines)


def table(outcomes: Sequence[Outcome]) -> str:
    """The Markdown table of the outcomes."""
    names = list(FACTORS)
    head = ["#", *names, "outcome", "s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for o in sorted(outcomes, key=lambda o: o.index):
        detail = o.detail.replace("|", "/")
        lines.append(
            "| " + " | ".join([str(o.index), *(o.row[n] for n in names),
                               f"{o.outcome}: {detail}", f"{o.seconds:.0f}"]) + " |"
        )  # fmt: skip
    counts = {
        k: sum(o.outcome == k for o in outcomes) for k in ("ok", "refused", "FAILED")
    }
    lines.append("")
    lines.append(
        f"{len(outcomes)} rows: {counts['ok']} ok, {counts['refused']} refused by a "
        f"named rule, {counts['FAILED']} failed"
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-j", "--jobs", type=int, default=1, help="rows at once (1)")
    parser.add_argument("--seed", type=int, default=0, help="the array's seed (0)")
    parser.add_argument("--only", help="run these rows only, e.g. 0,3,7")
    parser.add_argument("--list", action="store_true", help="print the rows and stop")
    parser.add_argument(
        "--no-repeat", action="store_true", help="skip the second run (same bits)"
    )
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--keep", type=Path, help="keep the projects in this folder")
    parser.add_argument(
        "--product",
        help="instead of the pairwise array, the full product of these factors' "
        "levels (comma-separated, e.g. privacy,personalization,evaluation), the "
        "others at their first level",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="FACTOR=LEVEL",
        help="with --product: leave this level out (repeatable), e.g. privacy=none",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    refused = refusals()
    product_refused: dict[int, str] = {}
    if args.product:
        try:
            exclude = [tuple(e.split("=", 1)) for e in args.exclude]
            if any(len(e) != 2 for e in exclude):
                raise ValueError("--exclude: FACTOR=LEVEL, e.g. privacy=none")
            made = product_rows(args.product.split(","), refused, exclude)
        except ValueError as exc:
            print(f"matrix.py: {exc}", file=sys.stderr)
            return 2
        all_rows = [row for row, _ in made]
        product_refused = {i: rule for i, (_, rule) in enumerate(made) if rule}
    else:
        all_rows = rows(args.seed, refused)
    picked = list(range(len(all_rows)))
    if args.only:
        try:
            picked = [int(i) for i in args.only.split(",")]
        except ValueError:
            print(
                f"matrix.py: --only {args.only!r}: row numbers, e.g. 0,3",
                file=sys.stderr,
            )
            return 2
        bad = [i for i in picked if not 0 <= i < len(all_rows)]
        if bad:
            print(f"matrix.py: --only: no row {bad[0]} (0..{len(all_rows) - 1})",
                  file=sys.stderr)  # fmt: skip
            return 2
    if args.list:
        for i in picked:
            print(i, " ".join(f"{k}={v}" for k, v in all_rows[i].items()))
        return 0
    work = (args.keep or Path(tempfile.mkdtemp(prefix="fedpipe-matrix-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    try:
        with ct.prefect_server(work / "prefect-server") as url:
            env = dict(os.environ)
            env.update(
                PREFECT_API_URL=url, PREFECT_HOME=str(work / "ph"),
                DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3",
                FEDPIPE_DVC_REMOTE=str(work / "remote"),
                PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            )  # fmt: skip
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                outcomes = list(
                    pool.map(
                        lambda i: (
                            Outcome(i, all_rows[i], "refused", product_refused[i], 0.0)
                            if i in product_refused
                            else run_row(i, all_rows[i], work, env, not args.no_repeat)
                        ),
                        picked,
                    )
                )
    except ct.UsageError as exc:
        print(f"matrix.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            _keep_failures(work, outcomes)
            shutil.rmtree(work, ignore_errors=True)
    text = (
        table(outcomes)
        + "\n\nRefused before any stage runs, by a named rule (no row holds "
        "these; `fedpipe sync` says the line):\n\n" + refusal_table(refused)
    )
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
