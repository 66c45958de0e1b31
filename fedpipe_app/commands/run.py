"""``fedpipe run``: the whole pipeline in one process, each stage in dvc.lock."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpipe.core import stopping
from fedpipe_app import exits
from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
    add_console_options,
    begin_connect,
    load,
    verbosity,
)

if TYPE_CHECKING:
    from fedpipe.config.params import Params
    from fedpipe.observe.status import Staleness

NAME = "run"
SUMMARY = Path("reports/summary.md")
EXAMPLES = [
    ("fedpipe run", "bring every stage up to date"),
    ("fedpipe run -S train.lr=0.1 -S strategy.name=fedadam", "change params"),
    ("fedpipe run --exp lr-high -S train.lr=0.1", "a named DVC experiment"),
    ("fedpipe run -q", "only the final table and errors (-v: Prefect's logs)"),
    ("dvc repro", "the same stages, through a warm worker"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe run`` on ``sub``."""
    run = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="run the whole pipeline in one process, recording each stage in dvc.lock",
        description="Validate, partition, train every round and summarize, as one "
        "Prefect flow run. Stages already up to date in dvc.lock are skipped, so an "
        "interrupted "
        "run resumes where it stopped.",
    )
    run.add_argument(
        "--force", action="store_true", help="rerun stages even if up to date"
    )
    run.add_argument(
        "--no-report",
        action="store_true",
        help="skip the doctor and the HTML report at the end (about 2 s); "
        "`fedpipe doctor` / `fedpipe report` make them later",
    )
    run.add_argument(
        "-S",
        "--set-param",
        action="append",
        metavar="KEY=VALUE",
        help="set a param (dotted key, YAML value) in params.yaml before the run, "
        "as `dvc exp run -S` does; repeatable, e.g. -S federation.rounds=20",
    )
    run.add_argument(
        "--exp",
        metavar="NAME",
        help="run as the named DVC experiment (`dvc exp run --temp -n NAME`, with "
        "the -S values) and leave the workspace's params.yaml as it is; "
        "`dvc exp show` lists it",
    )
    run.set_defaults(func=cmd_run)
    add_console_options(run)
    return run


def cmd_run(args: argparse.Namespace) -> int:
    """``fedpipe run``: under the project's lock (a second run here refuses)."""
    if getattr(args, "exp", None):  # `dvc exp run`: DVC takes its own lock
        return _run_experiment(args)
    from orchestration.repolock import hold

    # before anything is written (-S): a second run here refuses, naming the first
    with hold(Path("."), command="fedpipe run"):
        return _run_locked(args)


def _run_experiment(args: argparse.Namespace) -> int:
    """``fedpipe run --exp NAME``: the ``-S`` values as a DVC experiment
    (:func:`fedpipe_app.experiments.variants.run_experiment`), DVC's per-stage
    output in ``logs/`` and on the console only the round lines, warnings and
    errors; then, as ``fedpipe run`` ends, the stages that ran, the final
    table, the doctor's findings and the report, read from the experiment's
    results (:mod:`fedpipe_app.experiments.results`)."""
    from fedpipe_app.experiments.variants import StageLines, run_experiment
    from orchestration import console

    quiet = verbosity(args) == console.QUIET
    loud = verbosity(args) == console.VERBOSE
    log = console.new_log_path("exp")
    lines = StageLines()

    began: list[bool] = []  # DVC has begun: the overrides passed their checks

    def show(line: str) -> None:
        if not began:
            began.append(True)
            if not quiet:
                print(f"log: {log} (DVC's output, stage by stage)", flush=True)
        shown = lines.shown(line)
        if loud or (shown is not None and not (quiet and not _is_problem(line))):
            print(line, flush=True)

    status = run_experiment(
        args.exp,
        getattr(args, "set_param", None) or [],
        params_file=PARAMS,
        force=bool(args.force),
        log=log,
        show=show,
    )
    if status != 0:
        print(
            f"error: dvc exp run exited {status}; its output: {log}",
            file=sys.stderr,
        )
        return exits.EXIT_FAILED
    ran = lines.ran
    if not quiet:
        print(
            f"done: {len(ran)} stage(s) ran" + (f" ({', '.join(ran)})" if ran else "")
        )
    _experiment_results(args, ran, quiet=quiet)
    if not quiet:
        print(f"log: {log}")
    return 0


def _is_problem(line: str) -> bool:
    return line.lower().startswith(("error:", "warning:"))


def _experiment_results(
    args: argparse.Namespace, ran: list[str], *, quiet: bool
) -> None:
    """Where the rows went (when its partition ran), the experiment's final
    table, the doctor's findings and its report
    (unless ``--no-report``), from its results laid out under
    ``.fedpipe/experiments/NAME``; ``dvc exp show`` / ``dvc exp apply NAME``
    named."""
    import dataclasses

    from fedpipe.observe.runfiles import Commit, load_run
    from fedpipe_app.experiments.results import (
        EXPERIMENTS_DIR,
        experiment_commit,
        materialize,
    )

    commit = experiment_commit(Path("."), args.exp)
    if commit is None:
        print(f"warning: no experiment named {args.exp} in git", file=sys.stderr)
        return
    dest = materialize(Path("."), commit, EXPERIMENTS_DIR / args.exp)
    if "partition" in ran and not quiet:
        _say_rows(dest)
    summary = dest / "reports/summary.md"
    if summary.is_file():
        print(summary.read_text())
    if not args.no_report:
        from fedpipe.observe.doctor import diagnose, format_text
        from fedpipe.observe.report import write_report

        # the experiment's commit, not the workspace's, in the report's lineage
        run = dataclasses.replace(
            load_run(dest), commit=Commit(sha=commit, dirty=0, repository=True)
        )
        findings = diagnose(run)
        view = f"{run.view_text}\n\n" if run.view_text else ""
        if findings or not quiet:
            print(f"fedpipe doctor:\n{view}{format_text(findings)}")
        path = write_report(dest, findings=[f.to_dict() for f in findings], run=run)
        if not quiet:
            print(f"run report: {path.resolve()}")
    if not quiet:
        print(
            f"experiment {args.exp}: commit {commit[:7]}; `dvc exp show` lists it, "
            f"`dvc exp apply {args.exp}` brings it into the workspace"
        )


def _overrides(args: argparse.Namespace) -> None:
    """``-S key=value`` of ``fedpipe run``: the overrides are written into
    params.yaml."""
    sets = getattr(args, "set_param", None) or []
    if sets:
        from fedpipe.config.overrides import apply_overrides, yaml_scalar

        for key, value in apply_overrides(PARAMS, sets).items():
            print(f"{PARAMS}: {key} = {yaml_scalar(value)}")
    return None


def _run_locked(args: argparse.Namespace) -> int:
    _overrides(args)
    answer = _staleness(args)
    loaded: list[Params] = []
    if answer is not None and answer.nothing_to_do and _finished(args, loaded):
        return 0
    params = loaded[0] if loaded else None
    _damaged_cache()
    if params is None:
        params = load(PARAMS, sync=True)
    fresh = _fresh_prefix(args, params)
    from orchestration import prewarm

    if _validates(args, params, fresh):
        # Great Expectations imported beside this process's own imports
        prewarm.start_validation()
    try:
        return _run_flow(args, params, fresh)
    finally:
        prewarm.stop_all()


def _validates(args: argparse.Namespace, params: Params, fresh: int | None) -> bool:
    """Whether this run will run the validate stage: with ``--force``, before
    anything is recorded, or when DVC's answer has it stale (unknown: no)."""
    if args.force or not Path("dvc.lock").is_file():
        return True
    if fresh is None:
        return False
    from fedpipe.config import layout

    stages = layout.stage_names(params.federation.rounds, params.data.source)
    return fresh <= stages.index("validate")


def _run_flow(args: argparse.Namespace, params: Params, fresh: int | None) -> int:
    """The run's flow, its console and its closing lines."""
    answered = begin_connect(args)  # a server being started starts meanwhile
    from flows.pipeline import run_pipeline
    from orchestration import console
    from orchestration.heartbeat import own_heartbeat
    from orchestration.server import ServerWatch

    url = answered()

    stopping.install()  # Prefect's flow engine raises its own inside
    quiet = verbosity(args) == console.QUIET
    with (
        console.session(
            "run", verbosity=verbosity(args), said_by_cli=exits.said_by_cli
        ) as log,
        ServerWatch(url, functools.partial(_server_lost, args)),
    ):
        args.log_file = log
        if not quiet:
            print(f"log: {log}", flush=True)
        with own_heartbeat():  # one that stops at once when the run ends
            ran = run_pipeline(
                params, force=args.force, report=not args.no_report, fresh=fresh
            )
    if not quiet:
        print(
            f"done: {len(ran)} stage(s) ran" + (f" ({', '.join(ran)})" if ran else "")
        )
        if "partition" in ran:
            _say_rows()
    if SUMMARY.is_file():
        print(SUMMARY.read_text())
    if not quiet:
        print(f"log: {log}")
    return 0


def _staleness(args: argparse.Namespace) -> Staleness | None:
    """What the run would redo, as DVC answers it (remembered while nothing it
    depends on changes: :mod:`orchestration.staleness`); None with ``--force``
    or before anything is recorded."""
    if args.force or not Path("dvc.lock").is_file():
        return None
    import yaml

    from orchestration.staleness import remembered_staleness

    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        raw = yaml.load(Path(PARAMS).read_text(), Loader=loader)  # noqa: S506
    except (OSError, yaml.YAMLError):
        return None
    return remembered_staleness(Path("."), raw if isinstance(raw, dict) else None)


def _finished(args: argparse.Namespace, loaded: list[Params]) -> bool:
    """With every stage up to date (params.yaml synced) and the run's final
    table (and, unless ``--no-report``, a report newer than its metrics) in
    place: say so, print the table as a run ends, and return True. Nothing
    else is imported: no TensorFlow, no Prefect, no flow run. Params loaded on
    the way are put in ``loaded``."""
    from fedpipe.observe.runfiles import report_is_current
    from orchestration import console
    from orchestration.staleness import kept_staleness, remembered

    def plan() -> dict[str, Any]:
        from fedpipe.config import layout

        params = load(PARAMS, sync=True)  # params.yaml synced, data there
        loaded.append(params)
        rounds = params.federation.rounds
        return {
            "stages": layout.stage_names(rounds, params.data.source),
            "rounds": rounds,
        }

    # what `load` would find is kept while params.yaml, dvc.yaml and the
    # files they name are as they were (pydantic, pandas: about a second)
    run = remembered(Path("."), "run-plan", plan)
    kept = kept_staleness(Path("."))
    stages = run["stages"]
    if kept is None or kept.fresh_prefix(stages) != len(stages):
        return False
    if not kept.nothing_to_do or not SUMMARY.is_file():
        return False
    if not args.no_report and not report_is_current(Path("."), run["rounds"]):
        return False  # the report is work to do: the normal path makes it
    if verbosity(args) != console.QUIET:
        print(
            "done: 0 stage(s) ran: every stage is up to date in dvc.lock "
            "(nothing to do; no flow run)"
        )
    print(SUMMARY.read_text())
    return True


def _fresh_prefix(args: argparse.Namespace, params: Params) -> int | None:
    """How many stages from the first are up to date: none before anything is
    recorded (no ``dvc.lock``: the run need not wait for its recorder's DVC to
    say so), else the kept answer when it still holds (None: the run asks DVC)."""
    if args.force:
        return None
    if not Path("dvc.lock").is_file():
        return 0
    from fedpipe.config import layout
    from orchestration.staleness import kept_staleness

    kept = kept_staleness(Path("."))
    if kept is None:
        return None
    stages = layout.stage_names(params.federation.rounds, params.data.source)
    return kept.fresh_prefix(stages)


def _say_rows(root: Path = Path(".")) -> None:
    """Where every row went, after the data stages ran: ``rows: 1309 rows: 262
    held out, ...; none dropped (data.dedupe)``."""
    from fedpipe.config import layout
    from fedpipe.core.jsonio import read_json_or_none
    from fedpipe.data.accounting import placement_line

    manifest = read_json_or_none(root / layout.MANIFEST)
    if isinstance(manifest, dict):
        print(f"rows: {placement_line(manifest)}")


def _damaged_cache() -> None:
    """Recorded rounds' outputs missing or altered in DVC's cache
    (:mod:`fedpipe.observe.cachecheck`): named, the altered ones removed, so
    that DVC sees them "not in cache" and this run rebuilds their stages rather
    than reuse them."""
    from fedpipe.observe.cachecheck import damaged_objects, remove_damaged

    damaged = damaged_objects(Path("."))
    for bad in damaged:
        print(f"warning: {bad.text()}; its stage is rerun", file=sys.stderr)
    remove_damaged(Path("."), damaged)


def _server_lost(args: argparse.Namespace, url: str, silent_s: float) -> None:
    """The run's Prefect server is gone (:class:`orchestration.server.ServerWatch`): say
    so in one line and end the process now. Its Prefect client would retry every
    call for a minute and take minutes to exit; what is recorded in dvc.lock is
    complete, and the stage that was running is redone by the next run."""
    from orchestration import console
    from orchestration.dvclock import freeze
    from orchestration.server import server_lost_message

    freeze(timeout=10.0)  # a record being written lands first
    line = server_lost_message(url, silent_s, console.last_recorded_round())
    console.close_display()
    log = getattr(args, "log_file", None)
    if log is not None:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"error: {line}\n")
    print(f"error: {line}", file=sys.stderr, flush=True)
    exits.name_log(args)
    sys.stdout.flush()
    os._exit(exits.EXIT_FAILED)
