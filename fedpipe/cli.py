"""The ``fedpipe`` command line.

``fedpipe run`` runs the whole pipeline in one process; ``fedpipe stage NAME`` is
what each ``dvc.yaml`` stage calls. Prefect, TensorFlow and DVC are imported only by
the commands that need them, so ``fedpipe --help`` answers at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PARAMS = "params.yaml"  # the file dvc.yaml's stages track; there is no other
EXIT_BAD_PARAMS = 2
EXIT_FAILED = 1

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
    from fedpipe.config import load_params, sync_round_chain
    from fedpipe.federation import preflight

    if sync and Path(params_file).is_file() and sync_round_chain(params_file):
        print(f"{params_file}: round_chain regenerated for federation.rounds")
    params = load_params(params_file)
    preflight(params)
    return params


def _connect(args: argparse.Namespace) -> None:
    from flows.server import ensure_api

    url = ensure_api(start=not args.no_server_start)
    ui = url.removesuffix("/api")
    print(f"Prefect: runs report to {url} (UI: {ui})", flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    params = _load(PARAMS, sync=True)
    _connect(args)
    from flows.pipeline import run_pipeline

    ran = run_pipeline(params, force=args.force)
    print(f"done: {len(ran)} stage(s) ran" + (f" ({', '.join(ran)})" if ran else ""))
    summary = Path("reports/summary.md")
    if summary.is_file():
        print(summary.read_text())
    return 0


def cmd_stage(args: argparse.Namespace) -> int:
    params = _load(PARAMS, sync=False)
    _connect(args)
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
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from fedpipe.config import load_params, sync_round_chain

    changed = sync_round_chain(PARAMS)
    params = load_params(PARAMS)
    state = "updated" if changed else "already in sync"
    print(f"{PARAMS}: round_chain {state} ({params.federation.rounds} rounds)")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from fedpipe.scaffold import init_project

    path = init_project(Path(args.directory), git=not args.no_git)
    print(f"initialized a fedpipe project in {path}; next: cd {path} && fedpipe run")
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
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    run.set_defaults(func=cmd_run)

    stage = sub.add_parser(
        "stage",
        help="run one pipeline stage (what dvc.yaml's stages call)",
        description="Run one stage as its own Prefect flow run; `dvc repro` calls it.",
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

    sync = sub.add_parser(
        "sync", help="regenerate params.yaml's round_chain from federation.rounds"
    )
    sync.set_defaults(func=cmd_sync)

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
    init.set_defaults(func=cmd_init)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _quiet_env()
    args = build_parser().parse_args(argv)
    if args.command != "init":
        os.chdir(args.project)
    from fedpipe.config import ParamsError

    try:
        return int(args.func(args))
    except ParamsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_PARAMS
    except Exception as exc:  # a failed stage: say what, not a 200-line traceback
        known = _known_failure(exc)
        if known is None:
            raise
        print(f"error: {known}", file=sys.stderr)
        return EXIT_FAILED


def _known_failure(exc: BaseException) -> str | None:
    """Message for failures a person can act on; None for bugs (re-raised)."""
    from fedpipe.partition import PartitionError
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
    if "flows.server" in sys.modules:
        from flows.server import PrefectServerError

        known += (PrefectServerError,)
    return str(exc) if isinstance(exc, known) else None


if __name__ == "__main__":
    sys.exit(main())
