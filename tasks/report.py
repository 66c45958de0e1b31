"""The summary stage: the run's history as DVC metrics and plots, and a final table.

The files follow what ``dvc metrics`` / ``dvc plots`` read: one CSV row per round
(``metrics/history.csv``, declared as plots in ``dvc.yaml``) and the final round's
numbers as nested JSON (``metrics/summary.json``, declared as metrics), both with
deterministic bytes. DVCLive is not used: it needs a git commit to exist and
stamps every row with the wall-clock time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from fedpipe.config import layout
from fedpipe.core import atomic
from fedpipe.core.jsonio import read_json, write_json
from fedpipe.observe.history import class_names, final_table, load_history


@task(name="summarize", cache_policy=NO_CACHE)
def summarize(
    rounds: int, *, history_out: Path, metrics_out: Path, table_out: Path
) -> str:
    """Write the per-round history, the final metrics and the final table."""
    history = load_history(rounds)
    with atomic.writing(history_out) as tmp:
        history.to_csv(tmp, index=False, float_format="%.6g")
    last = read_json(layout.round_metrics(rounds))
    # client lists are not metrics (the counts, e.g. excluded_counts, are)
    lists = ("clients_selected", "clients_excluded", "clients_partial")
    write_json(metrics_out, {k: v for k, v in last.items() if k not in lists})
    table = final_table(last, class_names())
    text = f"# fedpipe run: final round {rounds}\n\n{table}\n"
    atomic.write_text(table_out, text)
    get_run_logger().info("final metrics after round %d:\n%s", rounds, table)
    create_markdown_artifact(
        key="fedpipe-summary", markdown=text, description="global vs local"
    )
    return table


@task(name="doctor-and-report", cache_policy=NO_CACHE)
def doctor_and_report(
    root: Path, records_landed: Callable[[], None] | None = None
) -> tuple[str, Path]:
    """The doctor's findings (markdown) and the run's HTML report (its path).

    What ``fedpipe doctor`` and ``fedpipe report`` print and write, done at the
    end of every run so the UI shows both; the findings are also logged.
    ``records_landed`` waits for the run's last ``dvc.lock`` records, before the
    run is read: the views read only what ``dvc.lock`` records, so the doctor
    and the report see this run's rounds, and the report's hashes are the ones
    ``dvc.lock`` holds after the run.
    """
    from fedpipe.observe.doctor import diagnose, format_markdown, format_text
    from fedpipe.observe.report import write_report
    from fedpipe.observe.runfiles import load_run

    logger = get_run_logger()
    if records_landed is not None:
        # the views read a round's records only once dvc.lock holds them
        # (fedpipe.observe.runfiles.foreign_round_files): the run's last
        # records land first (under a loaded machine they had not, and the
        # doctor found no round of the run it had just finished)
        records_landed()
    run = load_run(root)  # read once, for the doctor and the report
    findings = diagnose(run)
    if findings:
        logger.warning("fedpipe doctor:\n%s", format_text(findings))
    else:
        logger.info("fedpipe doctor: no findings")
    path = write_report(
        root,
        findings=[f.to_dict() for f in findings],
        run=run,
        lock_ready=records_landed,
    )
    logger.info("run report: %s", path.resolve())
    view = f"{run.view_text}\n\n" if run.view_text else ""  # a DP run's view
    return view + format_markdown(findings), path.resolve()
