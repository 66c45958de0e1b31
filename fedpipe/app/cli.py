"""The ``fedpipe`` command line.

``fedpipe run`` runs the whole pipeline in one process; ``fedpipe stage NAME`` is
what each ``dvc.yaml`` stage calls. Prefect, TensorFlow and DVC are imported only by
the commands that need them, so ``fedpipe --help`` answers at once.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from fedpipe.core import stopping

PARAMS = "params.yaml"  # the file dvc.yaml's stages track; there is no other
EXIT_BAD_PARAMS = 2
EXIT_FAILED = 1
EXIT_SIGNAL = 128  # + the signal's number: 130 after Ctrl-C, 143 after kill

_QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_DETERMINISTIC_OPS": "1",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    "DVCLIVE_LOGLEVEL": "WARNING",
}


def _quiet_env() -> None:
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)


def _load(params_file: str, *, sync: bool):  # type: ignore[no-untyped-def]
    from fedpipe.config.params import load_params, sync_round_chain
    from fedpipe.core.plugins import check_code_deps, code_files, sync_code_deps
    from fedpipe.data.preflight import preflight

    if sync and Path(params_file).is_file() and sync_round_chain(params_file):
        print(f"{params_file}: round_chain regenerated for federation.rounds")
    params = load_params(params_file)
    if _names_user_code(params):
        from fedpipe.federation.build import check_code  # imports TensorFlow

        check_code(params)
    if sync and Path("dvc.yaml").is_file() and sync_code_deps(code_files(params)):
        print("dvc.yaml: code dependencies updated for your code in params.yaml")
    check_code_deps(params)
    preflight(params)
    return params


def _names_user_code(params) -> bool:  # type: ignore[no-untyped-def]
    from fedpipe.core.plugins import is_reference

    names = (params.model.name, params.strategy.name, params.client.algorithm or "")
    return any(is_reference(n) for n in names)


def _verbosity(args: argparse.Namespace) -> int:
    return int(getattr(args, "verbose", False)) - int(getattr(args, "quiet", False))


def _connect(args: argparse.Namespace) -> str:
    from fedpipe.config.params import ParamsError
    from orchestration.console import QUIET, quiet_user_errors, quiet_workers
    from orchestration.server import ensure_api

    quiet_workers(_verbosity(args))  # before Prefect is imported
    quiet_user_errors((ParamsError,))
    url = ensure_api(start=not args.no_server_start)
    ui = url.removesuffix("/api")
    if _verbosity(args) > QUIET:
        print(f"Prefect: runs report to {url} (UI: {ui})", flush=True)
    return url


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
    _name_log(args)
    sys.stdout.flush()
    os._exit(EXIT_FAILED)


def _overrides(args: argparse.Namespace) -> int | None:
    """``-S key=value`` and ``--exp NAME`` of ``fedpipe run``: the overrides are
    written into params.yaml (None: go on with the run), or the run is a DVC
    experiment (its exit status)."""
    sets = getattr(args, "set_param", None) or []
    if getattr(args, "exp", None):
        from fedpipe.app.experiments.variants import run_experiment

        return run_experiment(
            args.exp, sets, params_file=PARAMS, force=bool(args.force)
        )
    if sets:
        from fedpipe.config.overrides import apply_overrides, yaml_scalar

        for key, value in apply_overrides(PARAMS, sets).items():
            print(f"{PARAMS}: {key} = {yaml_scalar(value)}")
    return None


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "exp", None):  # `dvc exp run`: DVC takes its own lock
        return int(_overrides(args) or 0)
    from orchestration.repolock import hold

    # before anything is written (-S): a second run here refuses, naming the first
    with hold(Path("."), command="fedpipe run"):
        return _run_locked(args)


def _run_locked(args: argparse.Namespace) -> int:
    _overrides(args)
    params = _load(PARAMS, sync=True)
    url = _connect(args)
    from flows.pipeline import run_pipeline
    from orchestration import console
    from orchestration.server import ServerWatch

    stopping.install()  # Prefect's flow engine raises its own inside
    quiet = _verbosity(args) == console.QUIET
    with (
        console.session(
            "run", verbosity=_verbosity(args), said_by_cli=_said_by_cli
        ) as log,
        ServerWatch(url, functools.partial(_server_lost, args)),
    ):
        args.log_file = log
        if not quiet:
            print(f"log: {log}", flush=True)
        ran = run_pipeline(params, force=args.force, report=not args.no_report)
    if not quiet:
        print(
            f"done: {len(ran)} stage(s) ran" + (f" ({', '.join(ran)})" if ran else "")
        )
    summary = Path("reports/summary.md")
    if summary.is_file():
        print(summary.read_text())
    if not quiet:
        print(f"log: {log}")
    return 0


def cmd_stage(args: argparse.Namespace) -> int:
    from fedpipe.app import stageclient

    if stageclient.enabled():  # the project's warm worker runs it (FEDPIPE_WARM=0: no)
        code = stageclient.run_warm(_stage_argv(args), verbose=bool(args.verbose))
        if code is not None:
            return code
    params = _load(PARAMS, sync=False)
    _connect(args)
    from orchestration import console

    stopping.install()  # Prefect's flow engine raises its own inside
    which = args.name if args.round is None else f"{args.name}-{args.round}"
    with console.session(
        f"stage-{which}", verbosity=_verbosity(args), said_by_cli=_said_by_cli
    ) as log:
        args.log_file = log
        _run_one_stage(args, params)
    return 0


def _stage_argv(args: argparse.Namespace) -> list[str]:
    """The arguments of this ``fedpipe stage`` command, for the warm worker."""
    from fedpipe.app.stageclient import stage_argv

    flags = [
        flag
        for flag, on in (
            ("--no-server-start", args.no_server_start),
            ("-v", args.verbose),
            ("-q", args.quiet),
        )
        if on
    ]
    return stage_argv(args.name, args.round, flags=flags)


def _run_one_stage(args: argparse.Namespace, params) -> None:  # type: ignore[no-untyped-def]
    from flows.stages import without_heartbeat

    with without_heartbeat():
        _run_stage_command(args, params)


def _run_stage_command(args: argparse.Namespace, params) -> None:  # type: ignore[no-untyped-def]
    from flows.stages import run_stage

    if args.name == "round":
        if args.round is None:
            raise SystemExit(
                "fedpipe stage round: give the round number, e.g. `round 3`"
            )
        if not 1 <= args.round <= params.federation.rounds:
            raise SystemExit(
                f"round {args.round} is outside federation.rounds="
                f"1..{params.federation.rounds}"
            )
        run_stage(params, f"round@{args.round}")
    else:
        run_stage(params, args.name)


def cmd_sync(args: argparse.Namespace) -> int:
    from fedpipe.config.params import load_params, sync_round_chain
    from fedpipe.core.plugins import code_files, sync_code_deps

    changed = sync_round_chain(PARAMS)
    params = load_params(PARAMS)
    state = "updated" if changed else "already in sync"
    print(f"{PARAMS}: round_chain {state} ({params.federation.rounds} rounds)")
    files = code_files(params)
    if Path("dvc.yaml").is_file():
        state = "updated" if sync_code_deps(files) else "already in sync"
        listed = sorted({f for fs in files.values() for f in fs})
        print(f"dvc.yaml: code dependencies {state} ({', '.join(listed) or 'none'})")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from fedpipe.app.project import REMOTE_ENV, init_project

    remote = args.remote or os.environ.get(REMOTE_ENV) or None
    path = init_project(Path(args.directory), git=not args.no_git, remote=remote)
    print(f"initialized a fedpipe project in {path}; next: cd {path} && fedpipe run")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from fedpipe.observe.report import write_report

    print(write_report(Path("."), args.out).resolve())
    return 0


def cmd_centralized(args: argparse.Namespace) -> int:
    params = _load(PARAMS, sync=False)
    from fedpipe.config import layout
    from fedpipe.core.jsonio import read_json, write_json
    from fedpipe.core.weights import load_weights
    from fedpipe.data.ingest import open_features, read_samples
    from fedpipe.data.sources import prepared_spec
    from fedpipe.data.splits import federated_data
    from fedpipe.model.centralized import train_centralized
    from fedpipe.model.training import ModelRunner, model_spec_for

    for needed in (layout.MANIFEST, layout.model_weights(0)):
        if not needed.is_file():
            raise FileNotFoundError(
                f"{needed}: not found; run `fedpipe run` (or `dvc repro init`) first"
            )
    spec = prepared_spec(layout.PREPARED_DIR)
    model = model_spec_for(params, spec)
    data = federated_data(
        open_features(layout.PREPARED_DIR),
        read_samples(layout.PREPARED_DIR),
        read_json(layout.MANIFEST),
        spec,
    )
    epochs = args.epochs or params.federation.rounds * params.train.epochs
    _, record = train_centralized(
        ModelRunner(model),
        load_weights(layout.model_weights(0)),
        data,
        epochs=epochs,
        batch_size=args.batch_size or params.train.batch_size,
        seed=params.seed,
        steps=args.steps,
    )
    write_json(layout.CENTRALIZED_METRICS, record)
    g = record["global"]
    print(
        f"centralized: {record['steps']} steps ({epochs} epochs max, batch "
        f"{record['batch_size']}, {record['n_train']} samples): held-out acc "
        f"{g['accuracy']:.4f} loss {g['loss']:.4f} -> {layout.CENTRALIZED_METRICS}"
    )
    return 0


def _deployment(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    _load(PARAMS, sync=True)  # bad params stop here, not in a scheduled run
    _connect(args)
    from flows.deploy import deployment

    return deployment(
        Path.cwd(), name=args.name, cron=args.cron, timezone=args.timezone
    )


def cmd_deploy(args: argparse.Namespace) -> int:
    dep = _deployment(args)
    from flows.deploy import deploy, ensure_process_pool

    if ensure_process_pool(args.pool):
        print(f"created work pool {args.pool!r} (type process)")
    full = deploy(dep, args.pool)
    when = f"cron {args.cron!r} ({args.timezone or 'UTC'})" if args.cron else "none"
    print(
        f"deployment {full!r} on work pool {args.pool!r}; schedule: {when}\n"
        f"next: start a worker (it runs the deployment's runs):\n"
        f"  PREFECT_API_URL={os.environ['PREFECT_API_URL']} "
        f"prefect worker start --pool {args.pool}\n"
        f"then trigger a run from the UI (Deployments -> {full} -> Run) or:\n"
        f"  prefect deployment run {full!r} [--param rounds=20]"
    )
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from fedpipe.observe.lineage import (
        LineageError,
        audit,
        format_json,
        format_mermaid,
        format_text,
    )

    try:
        lineage = audit(Path("."), args.target)
    except LineageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_PARAMS
    formats = {"text": format_text, "json": format_json, "mermaid": format_mermaid}
    print(formats[args.format](lineage))
    return 0 if lineage.verified else EXIT_FAILED


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from fedpipe.observe.doctor import diagnose, exit_code, format_markdown, format_text

    findings = diagnose(Path("."))
    if args.format == "json":
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    elif args.format == "markdown":
        print(format_markdown(findings))
    else:
        print(format_text(findings))
    return exit_code(findings, fail_on=args.fail_on)


def cmd_status(args: argparse.Namespace) -> int:
    from fedpipe.observe.status import collect, format_json, format_text

    status = collect(Path("."))
    print(format_json(status) if args.format == "json" else format_text(status))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    dep = _deployment(args)
    from flows.deploy import FLOW_NAME, serve

    when = f"cron {args.cron!r} ({args.timezone or 'UTC'})" if args.cron else "none"
    print(
        f"serving deployment '{FLOW_NAME}/{dep.name}' (schedule: {when}); runs "
        "start from the UI or `prefect deployment run`; Ctrl-C stops",
        flush=True,
    )
    serve(dep)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedpipe",
        description="Federated-learning experiments as reproducible DVC pipelines, "
        "orchestrated by Prefect. Run from a project directory holding dvc.yaml and "
        "params.yaml (see `fedpipe init`).",
    )
    parser.add_argument(
        "-C", "--project", default=".", help="project directory (default: .)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.epilog = _examples("fedpipe")
    parser.formatter_class = _HelpWithExamples

    run = sub.add_parser(
        "run",
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

    stage = sub.add_parser(
        "stage",
        help="run one pipeline stage (what dvc.yaml's stages call)",
        description="Run one stage as its own Prefect flow run; `dvc repro` calls it. "
        "The stage runs in the project's warm worker, a background process that "
        "keeps TensorFlow, Prefect and compiled models between the stages of a "
        "`dvc repro` (FEDPIPE_WARM=0: in this process; see docs/pipeline.md).",
    )
    stage.add_argument(
        "name",
        choices=[
            "mnist5k",
            "ingest",
            "validate",
            "partition",
            "init",
            "round",
            "summary",
        ],
    )
    stage.add_argument("round", nargs="?", type=int, help="round number for `round`")
    stage.set_defaults(func=cmd_stage)

    for p in (run, stage):
        p.add_argument(
            "--no-server-start",
            action="store_true",
            help="fail instead of starting a local Prefect server when none answers",
        )
        talk = p.add_mutually_exclusive_group()
        talk.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="also show Prefect's logs (every task run, tracebacks) on the "
            "console; they always go to logs/fedpipe-*.log and the Prefect UI",
        )
        talk.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            help="show only the final table and errors",
        )

    sync = sub.add_parser(
        "sync",
        help="regenerate params.yaml's round_chain from federation.rounds and "
        "dvc.yaml's dependencies on your own code (model/strategy/client files)",
    )
    sync.set_defaults(func=cmd_sync)

    doctor = sub.add_parser(
        "doctor",
        help="diagnose a finished (or stopped) run from its recorded files",
        description="Read metrics/rounds, metrics/health, metrics/clients, "
        "params.yaml, the prepared data and the partition manifest; print findings "
        "(most important first) with evidence and a suggested fix, or 'no "
        "findings'. Exit 0 when no finding reaches --fail-on, 1 otherwise.",
    )
    doctor.add_argument(
        "--format",
        choices=["text", "json", "markdown"],
        default="text",
        help="output format (default: text)",
    )
    doctor.add_argument(
        "--fail-on",
        choices=["error", "warning", "info", "never"],
        default="error",
        help="exit 1 if a finding of this severity or worse exists (default: error)",
    )
    doctor.set_defaults(func=cmd_doctor)
    status = sub.add_parser(
        "status",
        help="the project at a glance: data, partition, rounds, stale stages and "
        "why, the last run, the doctor's top finding",
        description="Read params.yaml, dvc.lock (through DVC: the stale stages are "
        "what `dvc status` finds, with the param keys and their recorded and "
        "current values, the changed data and code) and the run's files. No "
        "TensorFlow, no Prefect: it answers in about a second.",
    )
    status.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="output format (default: text)",
    )
    status.set_defaults(func=cmd_status)
    deploy = sub.add_parser(
        "deploy",
        help="register the project as a Prefect deployment on a process work pool",
        description="Register this project as deployment fedpipe-federation/NAME "
        "on a `process` work pool (created if missing), optionally on a cron "
        "schedule; `prefect worker start --pool POOL` then runs its runs. Runs can "
        "be started from the Prefect UI with overrides (rounds, strategy, epochs, "
        "runner), which are written into params.yaml.",
    )
    deploy.add_argument(
        "--pool", default="fedpipe", help="process work pool (default: fedpipe)"
    )
    deploy.set_defaults(func=cmd_deploy)
    serve = sub.add_parser(
        "serve",
        help="serve the project as a Prefect deployment from this process",
        description="Register this project as deployment fedpipe-federation/NAME, "
        "optionally on a cron schedule, and run its runs from this process until "
        "stopped (no work pool or worker needed).",
    )
    serve.set_defaults(func=cmd_serve)
    for p in (deploy, serve):
        p.add_argument(
            "--name", help="deployment name (default: the project folder's name)"
        )
        p.add_argument(
            "--cron", help="schedule, e.g. '0 3 * * *' (03:00 daily); default none"
        )
        p.add_argument(
            "--timezone", help="IANA time zone of --cron, e.g. Europe/Berlin (UTC)"
        )
        p.add_argument(
            "--no-server-start",
            action="store_true",
            help="fail instead of starting a local Prefect server when none answers",
        )

    init = sub.add_parser(
        "init", help="create a new fedpipe project (dvc.yaml, params.yaml, git, dvc)"
    )
    init.add_argument("directory")
    init.add_argument(
        "--no-git", action="store_true", help="do not run git init / dvc init"
    )
    init.add_argument(
        "--remote",
        metavar="URL",
        help="default DVC remote (any `dvc remote add` URL: a folder, s3://..., "
        "ssh://...); default: $FEDPIPE_DVC_REMOTE, else a folder of the project's "
        "own under ~/.local/share/fedpipe/dvc-remote/",
    )
    init.set_defaults(func=cmd_init)

    report = sub.add_parser(
        "report",
        help="write one self-contained HTML page about the run (reports/report.html)",
        description="Metrics per round, layer divergence, client update norms, label "
        "distribution, the doctor's findings and lineage, in one offline HTML file. "
        "Sections whose inputs are missing say which command records them.",
    )
    report.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write, relative to the project (default: reports/report.html)",
    )
    report.set_defaults(func=cmd_report)
    lineage = sub.add_parser(
        "lineage",
        help="trace an artifact back to the raw data and verify it against dvc.lock",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print the chain of stages from TARGET back to the raw data: "
        "each stage's\ncommand, the params it read, its input and output md5s "
        "(dvc.lock), the\nvalidation result, the partition manifest, the clients of "
        "each round and the\ngit commit. Files on disk are hashed and compared with "
        "dvc.lock.",
        epilog="""targets:
  (none)                     the whole pipeline (up to the last stage recorded)
  round N | N                round N's global model (0 = the initial model)
  STAGE                      a stage: mnist5k, ingest, validate, partition, init,
                             round@K, summary
  PATH                       a file or directory a stage produces, e.g.
                             models/round-4/weights.npz, data/prepared/schema.json

flagged (exit 1):
  changed  a file's md5 on disk differs from dvc.lock
  missing  a recorded input or output is not on disk
  stale    a stage ran on an input its upstream stage no longer records, on
           params that differ from params.yaml now, or with another command
           than dvc.yaml now gives it
The git state (HEAD, uncommitted changes) is reported but never flagged.

exit status: 0 everything verifies, 1 something is flagged, 2 bad target
(unknown round, a path no stage produces) or no dvc.lock.

examples:
  fedpipe lineage round 4
  fedpipe lineage models/round-4/weights.npz --format json
  fedpipe lineage --format mermaid > lineage.mmd""",
    )
    lineage.add_argument(
        "target", nargs="*", help="round N, N, a stage name or a path (see below)"
    )
    lineage.add_argument(
        "--format",
        choices=["text", "json", "mermaid"],
        default="text",
        help="text (default), json, or a mermaid flowchart with flagged stages styled",
    )
    lineage.set_defaults(func=cmd_lineage)

    central = sub.add_parser(
        "centralized",
        help="train the same model on the pooled client data (the baseline)",
        description="Train the run's initial model (round 0) on the union of every "
        "client's training split, same optimizer, lr and batch size, for rounds x "
        "train.epochs epochs; evaluate on the held-out test set; write "
        "metrics/centralized.json. The federation's gap to this is the price of "
        "federating.",
    )
    central.add_argument(
        "--epochs",
        type=int,
        help="passes over the pooled data (default: rounds x train.epochs)",
    )
    central.add_argument("--batch-size", type=int, help="default: train.batch_size")
    central.add_argument(
        "--steps", type=int, help="stop after this many steps (the one-step control)"
    )
    central.set_defaults(func=cmd_centralized)
    from fedpipe.app.experiments.sweepcli import add_sweep_parser

    add_sweep_parser(sub)  # fedpipe sweep [plot]
    return parser


START_HERE = """fedpipe: federated-learning experiments as reproducible DVC pipelines.

Start here:
  fedpipe init my-study && cd my-study   a new project (dvc.yaml, params.yaml)
  fedpipe run                            every stage, each recorded in dvc.lock
  fedpipe status                         where the project stands, what is stale
  fedpipe status                         where the project stands, what is stale
  fedpipe doctor                         what went wrong, with the fix
  fedpipe report                         one HTML page about the run
  fedpipe lineage                        every round's model back to data, params, code

`fedpipe COMMAND --help` shows a command's options and examples."""

EXAMPLES = {
    "fedpipe": [
        ("fedpipe run", "train the federation in params.yaml"),
        ("fedpipe status", "where the project stands"),
        ("fedpipe -C path/to/project doctor", "diagnose another project's run"),
    ],
    "run": [
        ("fedpipe run", "bring every stage up to date"),
        ("fedpipe run -S train.lr=0.1 -S strategy.name=fedadam", "change params"),
        ("fedpipe run --exp lr-high -S train.lr=0.1", "a named DVC experiment"),
        ("fedpipe run -q", "only the final table and errors (-v: Prefect's logs)"),
        ("dvc repro", "the same stages, through a warm worker"),
    ],
    "stage": [
        ("fedpipe stage round 3", "what dvc.yaml's round@3 runs"),
        ("fedpipe stage partition", "deal the data to clients again"),
    ],
    "sync": [
        ("fedpipe sync && dvc repro", "after changing federation.rounds"),
    ],
    "doctor": [
        ("fedpipe doctor", "findings, most important first"),
        ("fedpipe doctor --format json", "for scripts"),
        ("fedpipe doctor --fail-on warning", "a CI gate"),
    ],
    "status": [
        ("fedpipe status", "where the project stands; what a run would redo"),
        ("fedpipe status --format json", "for scripts"),
    ],
    "deploy": [
        ("fedpipe deploy --cron '0 3 * * *'", "a nightly run on the fedpipe pool"),
        ("prefect worker start --pool fedpipe", "then: the worker that runs them"),
    ],
    "serve": [("fedpipe serve --cron '0 * * * *'", "hourly runs from this process")],
    "init": [
        ("fedpipe init my-study", "a new project with git, DVC and a remote"),
        ("fedpipe init my-study --remote s3://bucket/fl", "with your own DVC remote"),
    ],
    "report": [
        ("fedpipe report", "writes reports/report.html"),
        ("fedpipe report --out /tmp/run.html", "somewhere else"),
    ],
    "centralized": [
        ("fedpipe centralized", "the pooled-data baseline of the same model"),
        ("fedpipe centralized --steps 1", "the one-step control"),
    ],
}


def _examples(command: str) -> str:
    rows = EXAMPLES.get(command, [])
    width = max((len(cmd) for cmd, _ in rows), default=0)
    return "examples:\n" + "\n".join(
        f"  {cmd:<{width}}  # {what}" for cmd, what in rows
    )


class _HelpWithExamples(argparse.HelpFormatter):
    """Wraps descriptions as usual; keeps the examples' lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return text
        return super()._fill_text(text, width, indent)


def _with_examples(parser: argparse.ArgumentParser) -> None:
    """Every command's help ends with a few real examples."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub.epilog:  # lineage writes its own, examples included
                    continue
                sub.epilog = _examples(name)
                sub.formatter_class = _HelpWithExamples


def main(argv: Sequence[str] | None = None) -> int:
    _quiet_env()
    parser = build_parser()
    _with_examples(parser)
    args = parser.parse_args(argv)
    if args.command is None:
        print(START_HERE)
        return 0
    if args.command != "init":
        os.chdir(args.project)
    from fedpipe.config.params import ParamsError

    try:
        return int(args.func(args))
    except BrokenPipeError:  # `fedpipe doctor | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        _name_log(args)
        return EXIT_BAD_PARAMS
    except Exception as exc:  # a failed stage: say what, not a 200-line traceback
        known = _known_failure(exc)
        if known is None:
            _name_log(args)
            raise
        print(f"error: {known}", file=sys.stderr)
        _name_log(args)
        return EXIT_FAILED
    except BaseException as exc:  # Ctrl-C, kill: where the run stopped, no traceback
        signum = _stop_signal(exc)
        if signum is None or args.command not in ("run", "stage"):
            raise
        from orchestration.console import interrupted_message

        name = signal.Signals(signum).name
        print(interrupted_message(name), file=sys.stderr, flush=True)
        _name_log(args)
        return EXIT_SIGNAL + signum


def _said_by_cli(exc: BaseException) -> bool:
    """Whether :func:`main` ends on ``exc`` with one line of its own."""
    from fedpipe.config.params import ParamsError

    return (
        isinstance(exc, ParamsError)
        or _known_failure(exc) is not None
        or _stop_signal(exc) is not None
    )


def _name_log(args: argparse.Namespace) -> None:
    log = getattr(args, "log_file", None)
    if log is not None:
        print(f"log: {log} (Prefect's logs, tracebacks included)", file=sys.stderr)


def _stop_signal(exc: BaseException) -> int | None:
    """SIGINT or SIGTERM when ``exc`` is how one of them stopped the command."""
    if isinstance(exc, KeyboardInterrupt):
        sent = exc.args[0] if exc.args else None
        return signal.SIGTERM if sent == signal.SIGTERM else signal.SIGINT
    if "prefect.exceptions" in sys.modules:
        from prefect.exceptions import TerminationSignal

        if isinstance(exc, TerminationSignal):
            return int(exc.signal)
    return None


def _known_failure(exc: BaseException) -> str | None:
    """Message for failures a person can act on; None for bugs (re-raised)."""
    from fedpipe.data.partition import PartitionError
    from fedpipe.strategy import AggregationError

    known: tuple[type[BaseException], ...] = (
        PartitionError,
        AggregationError,
        FileNotFoundError,
        ValueError,
    )
    if "tasks.data" in sys.modules:
        from tasks.data import ValidationFailed

        known += (ValidationFailed,)
    if "orchestration.server" in sys.modules:
        from orchestration.server import PrefectServerError

        known += (PrefectServerError,)
    if "orchestration.repolock" in sys.modules:
        from orchestration.repolock import ProjectBusy

        known += (ProjectBusy,)
    return str(exc) if isinstance(exc, known) else None


if __name__ == "__main__":
    sys.exit(main())
