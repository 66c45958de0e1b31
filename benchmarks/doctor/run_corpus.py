"""The doctor's corpus: planted causes and healthy runs, and its confusion table.

Every scenario of ``scenarios.yaml`` is a small real federation through
``fedpipe run`` in its own ``fedpipe init`` project, with ONE planted cause (or
none: a healthy run). Each replicate draws its seed, clients and rounds (and
table sizes) from the scenario's ranges, so the doctor cannot match on one
trace. ``fedpipe doctor --format json`` then reads each run, and the first
finding is compared with the planted cause.

Resumable: a finished federation is kept in ``WORK/runs.jsonl`` (with a hash of
its settings) and its project under ``WORK/runs/``; an invocation trains only
what is missing and diagnoses every kept run again (about 1 s each), so a new
doctor is judged on the same federations. Writes ``OUT/runs.csv`` and
``OUT/confusion.md``.

    python benchmarks/doctor/run_corpus.py -j 2 [--replicates N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent
sys.path[:0] = [str(REPO), str(REPO / "scripts"), str(HERE.parent), str(HERE)]

from bench_cache import private_prefect_server  # noqa: E402
from plants import write_blob_table  # noqa: E402
from tiny_data import merge, write_image_folder  # noqa: E402

HEALTHY = "healthy"
#: the corpus table's file inside a project, and the image folder's
TABLE_PATH = "data/raw/corpus.csv"
IMAGES_PATH = "data/raw/images"
USER_MODEL = "bn_mlp.py"


@dataclass(frozen=True)
class Run:
    """One replicate of one scenario, its sizes drawn."""

    scenario: str
    replicate: int
    cause: str
    side: str
    data: str
    seed: int
    clients: int
    rounds: int
    params: dict[str, Any] = field(hash=False)
    table: dict[str, Any] = field(hash=False)

    @property
    def key(self) -> str:
        """Hash of everything that makes this federation."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        return f"{self.scenario}-r{self.replicate}"


# ---------------------------------------------------------------- scenarios


def load_scenarios(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The defaults and the scenarios of ``path``."""
    raw = yaml.safe_load(path.read_text())
    names = [s["name"] for s in raw["scenarios"]]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SystemExit(f"{path}: scenario names repeated: {', '.join(repeated)}")
    return raw["defaults"], raw["scenarios"]


def _draw(rng: random.Random, span: Sequence[int]) -> int:
    low, high = span
    return rng.randint(int(low), int(high))


def _fill(value: Any, clients: int) -> Any:
    """``"{clients}"`` / ``"{clients-1}"`` strings replaced by the drawn count."""
    if isinstance(value, dict):
        return {k: _fill(v, clients) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, clients) for v in value]
    if value == "{clients}":
        return clients
    if value == "{clients-1}":
        return clients - 1
    return value


def draw_run(defaults: dict[str, Any], scenario: dict[str, Any], replicate: int) -> Run:
    """Replicate ``replicate`` of ``scenario``: seed and sizes drawn from its
    ranges with a generator seeded by the scenario's name and the replicate."""
    rng = random.Random(f"{scenario['name']}/{replicate}")
    vary = {**defaults.get("vary", {}), **scenario.get("vary", {})}
    seed = rng.randrange(10_000)
    clients = _draw(rng, vary["clients"])
    rounds = _draw(rng, vary["rounds"])
    table = dict(scenario.get("table", {}))
    if "rows_per_client" in table:
        table["rows_per_client"] = _draw(rng, table["rows_per_client"])
    params = merge(defaults.get("params", {}), scenario.get("params", {}))
    return Run(
        scenario=scenario["name"],
        replicate=replicate,
        cause=scenario.get("cause") or HEALTHY,
        side=scenario.get("side", ""),
        data=scenario.get("data", defaults.get("data", "mnist5k")),
        seed=seed,
        clients=clients,
        rounds=rounds,
        params=_fill(params, clients),
        table=table,
    )


# ---------------------------------------------------------------- one run


def _data_params(run: Run) -> dict[str, Any]:
    if run.data == "table":
        return {"source": "table", "path": TABLE_PATH, "client_column": "site"}
    if run.data == "images":
        return {"source": "images", "path": IMAGES_PATH}
    return {}


def project_params(run: Run, template: dict[str, Any]) -> dict[str, Any]:
    """The project's params.yaml: the template's, the run's, its drawn sizes."""
    base = {k: v for k, v in template.items() if k != "round_chain"}
    drawn = {
        "seed": run.seed,
        "data": _data_params(run),
        "federation": {"clients": run.clients, "rounds": run.rounds},
    }
    return merge(merge(base, drawn), run.params)


def write_data(run: Run, project: Path) -> None:
    """The project's own data, planted as the scenario says."""
    if run.data == "table":
        write_blob_table(
            project / TABLE_PATH,
            clients=run.clients,
            rows_per_client=int(run.table.get("rows_per_client", 120)),
            seed=run.seed,
            spread=float(run.table.get("spread", 1.6)),
            plants=run.table.get("plants"),
        )
    elif run.data == "images":
        write_image_folder(project / IMAGES_PATH, per_class=60, seed=run.seed)


def _tail(text: str) -> str:
    """The CLI's ``error:`` line and the one after it, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("error:"):
            return " ".join(lines[i : i + 2])[:300]
    return lines[-1][:300] if lines else ""


def train(run: Run, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """Make the run's project and `fedpipe run` it; what happened, as a record."""
    project = work / "runs" / run.name
    if project.exists():
        shutil.rmtree(project)
    shutil.copytree(work / "template", project)
    shutil.copy(HERE / USER_MODEL, project / USER_MODEL)
    template = yaml.safe_load((work / "template" / "params.yaml").read_text())
    params = project_params(run, template)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_data(run, project)
    started = time.perf_counter()
    proc = subprocess.run(
        [str(BIN / "fedpipe"), "run", "-q", "--no-report", "--no-server-start"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    (project / "corpus-run.log").write_text(proc.stdout + "\n" + proc.stderr)
    rounds = len(list((project / "metrics" / "health").glob("round-*.json")))
    status = "ok" if proc.returncode == 0 else ("stopped" if rounds else "refused")
    return {
        "key": run.key,
        "name": run.name,
        "status": status,
        "returncode": proc.returncode,
        "rounds_recorded": rounds,
        "seconds": round(time.perf_counter() - started, 1),
        "message": "" if status == "ok" else _tail(proc.stdout + "\n" + proc.stderr),
    }


def diagnose(project: Path, env: dict[str, str]) -> tuple[list[dict], str]:
    """The doctor's findings on ``project`` (JSON), or [] and its error line."""
    proc = subprocess.run(
        [str(BIN / "fedpipe"), "doctor", "--format", "json", "--fail-on", "never"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return [], _tail(proc.stderr or proc.stdout)
    return json.loads(proc.stdout), ""


# ---------------------------------------------------------------- the table


def result_row(run: Run, record: dict[str, Any], findings: list[dict], error: str):
    """One row of runs.csv."""
    first = findings[0] if findings else {}
    errors = [f["code"] for f in findings if f["severity"] == "error"]
    first_code = first.get("code", "none")
    if run.cause == HEALTHY:
        right = not errors
    else:
        right = first_code == run.cause
    return {
        "scenario": run.scenario,
        "replicate": run.replicate,
        "side": run.side,
        "planted": run.cause,
        "seed": run.seed,
        "clients": run.clients,
        "rounds": run.rounds,
        "status": record["status"],
        "first_finding": first_code,
        "first_severity": first.get("severity", ""),
        "first_side": first.get("side", ""),
        "codes": ";".join(f"{f['code']}:{f['severity']}" for f in findings),
        "error_findings": len(errors),
        "right": right,
        "seconds": record["seconds"],
        "note": record["message"] or error,
    }


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def confusion_markdown(rows: Sequence[dict[str, Any]], command: str) -> str:
    """confusion.md: the headline figures, planted x first finding, per-code
    precision and recall, and every scenario's outcome."""
    planted = [r for r in rows if r["planted"] != HEALTHY and r["status"] != "refused"]
    refused = [r for r in rows if r["status"] == "refused"]
    healthy = [r for r in rows if r["planted"] == HEALTHY]
    right = sum(r["right"] for r in planted)
    erring = [r for r in healthy if r["error_findings"]]
    lines = [
        "# The doctor's corpus: planted cause x first finding",
        "",
        f"Made by `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f"); {len(rows)} runs. See [the corpus page](../doctor-corpus.md).",
        "",
        f"- **first finding is the planted cause: {_pct(right, len(planted))}** of "
        "planted runs (target >= 90%)",
        f"- **healthy runs with an error-level finding: {len(erring)}** of "
        f"{len(healthy)} (target 0)"
        + (
            ": " + ", ".join(f"{r['scenario']}-r{r['replicate']}" for r in erring)
            if erring
            else ""
        ),  # fmt: skip
    ]
    if refused:
        lines.append(
            "- refused by the pipeline before any round (no run to diagnose): "
            + ", ".join(f"{r['scenario']}-r{r['replicate']}" for r in refused)
        )
    lines += ["", "## Planted cause x first finding", ""]
    causes = sorted({r["planted"] for r in rows if r["status"] != "refused"})
    firsts = sorted({r["first_finding"] for r in rows if r["status"] != "refused"})
    counts = Counter(
        (r["planted"], r["first_finding"]) for r in rows if r["status"] != "refused"
    )
    lines.append("| planted \\ first finding | " + " | ".join(firsts) + " |")
    lines.append("|---|" + "---:|" * len(firsts))
    for c in causes:
        cells = [str(counts[(c, f)] or "") for f in firsts]
        cells = [
            f"**{x}**" if f == c and x else x
            for f, x in zip(firsts, cells, strict=True)
        ]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines += ["", "## Precision and recall per code (first finding)", ""]
    lines += ["| code | precision | recall |", "|---|---:|---:|"]
    judged = [r for r in rows if r["status"] != "refused"]
    for c in sorted((set(causes) | set(firsts)) - {HEALTHY, "none"}):
        tp = sum(1 for r in judged if r["planted"] == c and r["first_finding"] == c)
        named = sum(1 for r in judged if r["first_finding"] == c)
        actual = sum(1 for r in judged if r["planted"] == c)
        lines.append(
            f"| {c} | {_pct(tp, named) if named else '-'} | "
            f"{_pct(tp, actual) if actual else '-'} |"
        )
    lines += ["", "## Every scenario", ""]
    lines += [
        "| scenario | side | planted | right | first findings |",
        "|---|---|---|---:|---|",
    ]
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_scenario.setdefault(r["scenario"], []).append(r)
    for name, group in by_scenario.items():
        seen = ", ".join(
            f"{r['first_finding']}"
            + (f" ({r['status']})" if r["status"] != "ok" else "")
            for r in group
        )
        hits = sum(r["right"] for r in group)
        lines.append(
            f"| {name} | {group[0]['side'] or '-'} | {group[0]['planted']} | "
            f"{hits}/{len(group)} | {seen} |"
        )
    return "\n".join(lines) + "\n"


def write_outputs(rows: Sequence[dict[str, Any]], out: Path, command: str) -> str:
    """runs.csv and confusion.md in ``out``; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "runs.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    markdown = confusion_markdown(rows, command)
    (out / "confusion.md").write_text(markdown)
    return markdown


# ---------------------------------------------------------------- environment


@contextmanager
def prefect_api(work: Path) -> Iterator[str]:
    """``$PREFECT_API_URL``, else a Prefect server of the corpus's own on a free
    loopback port (never a user's server at 4200), stopped at the end."""
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    with private_prefect_server(work / "prefect-home") as url:
        yield url


def run_env(work: Path, api: str) -> dict[str, str]:
    """The environment of every `fedpipe` call: this interpreter's tools, the
    corpus's Prefect server, DVC remote and warm-worker folder, quiet TF."""
    warm = work / "warm"
    warm.mkdir(parents=True, exist_ok=True)
    warm.chmod(0o700)
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PREFECT_API_URL=api,
        DVC_NO_ANALYTICS="1",
        FEDPIPE_DVC_REMOTE=str(work / "dvc-remote"),
        FEDPIPE_WARM_DIR=str(warm),
        TF_CPP_MIN_LOG_LEVEL="3",
        GIT_AUTHOR_NAME=env.get("GIT_AUTHOR_NAME", "fedpipe doctor corpus"),
        GIT_AUTHOR_EMAIL=env.get("GIT_AUTHOR_EMAIL", "corpus@fedpipe.invalid"),
        GIT_COMMITTER_NAME=env.get("GIT_COMMITTER_NAME", "fedpipe doctor corpus"),
        GIT_COMMITTER_EMAIL=env.get("GIT_COMMITTER_EMAIL", "corpus@fedpipe.invalid"),
    )
    return env


def ensure_template(work: Path, env: dict[str, str]) -> None:
    """One `fedpipe init` project that every run copies."""
    if (work / "template" / "params.yaml").exists():
        return
    subprocess.run(
        [str(BIN / "fedpipe"), "init", str(work / "template")],
        env=env, check=True, capture_output=True,
    )  # fmt: skip


def _load_done(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            done[record["key"]] = record
    return done


# ---------------------------------------------------------------- main


def corpus(
    runs: Sequence[Run],
    *,
    work: Path,
    out: Path,
    jobs: int,
    command: str,
    train_missing: bool = True,
) -> list[dict[str, Any]]:
    """Train what is missing (unless not ``train_missing``: then table only the
    kept runs), diagnose every run, write the tables; the rows."""
    work.mkdir(parents=True, exist_ok=True)
    journal = work / "runs.jsonl"
    with prefect_api(work) as api:
        env = run_env(work, api)
        ensure_template(work, env)
        done = _load_done(journal)
        todo = [
            r for r in runs
            if r.key not in done or not (work / "runs" / r.name).exists()
        ]  # fmt: skip
        if not train_missing:
            runs = [r for r in runs if r not in todo]
            todo = []
        print(f"{len(runs) - len(todo)} runs kept, {len(todo)} to train", flush=True)

        def one(run: Run) -> dict[str, Any]:
            record = train(run, work, env)
            with journal.open("a") as fh:  # appends of one line: safe across threads
                fh.write(json.dumps(record) + "\n")
            print(f"  {run.name}: {record['status']} in {record['seconds']} s",
                  flush=True)  # fmt: skip
            return record

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for record in pool.map(one, todo):
                done[record["key"]] = record
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            diagnoses = list(
                pool.map(lambda r: diagnose(work / "runs" / r.name, env), runs)
            )
    rows = [
        result_row(run, done[run.key], findings, error)
        for run, (findings, error) in zip(runs, diagnoses, strict=True)
    ]
    if rows:
        write_outputs(rows, out, command)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-j", "--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--replicates", type=int, default=2)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these scenarios")
    parser.add_argument("--scenarios", type=Path, default=HERE / "scenarios.yaml")
    parser.add_argument(
        "--work", type=Path, default=HERE / "work",
        help="projects and runs.jsonl (default benchmarks/doctor/work)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "doctor-corpus")
    parser.add_argument(
        "--kept-only", action="store_true",
        help="train nothing: diagnose and table the runs already kept",
    )  # fmt: skip
    args = parser.parse_args(argv)
    defaults, scenarios = load_scenarios(args.scenarios)
    if args.only:
        unknown = set(args.only) - {s["name"] for s in scenarios}
        if unknown:
            raise SystemExit(f"--only: no scenario {', '.join(sorted(unknown))}")
        scenarios = [s for s in scenarios if s["name"] in args.only]
    runs = [draw_run(defaults, s, i) for s in scenarios for i in range(args.replicates)]
    command = "python benchmarks/doctor/run_corpus.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    rows = corpus(
        runs, work=args.work.resolve(), out=args.out, jobs=args.jobs,
        command=command, train_missing=not args.kept_only,
    )  # fmt: skip
    if not rows:
        print("no runs to table")
        return 1
    print((args.out / "confusion.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
