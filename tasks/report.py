"""The summary stage: the run's history as DVC metrics and plots, and a final table."""

from __future__ import annotations

import os
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from fedpipe import layout
from fedpipe.federation import read_json
from fedpipe.history import GROUPS, final_table, load_history
from fedpipe.metrics import METRIC_NAMES

os.environ.setdefault("DVCLIVE_LOGLEVEL", "WARNING")


@task(name="summarize", cache_policy=NO_CACHE)
def summarize(rounds: int, *, live_dir: Path, table_out: Path) -> str:
    """Log every round to DVCLive (step = round) and write the final table."""
    from dvclive import Live

    history = load_history(rounds)
    with Live(dir=str(live_dir), save_dvc_exp=False, dvcyaml=False, report=None) as live:
        for row in history.to_dict("records"):
            live.step = int(row["round"])
            for group in GROUPS:
                for name in METRIC_NAMES:
                    live.log_metric(f"{group}/{name}", row[f"{group}_{name}"], plot=True)
    last = read_json(layout.round_metrics(rounds))
    table = final_table(last)
    text = f"# fedpipe run: final round {rounds}\n\n{table}\n"
    table_out.parent.mkdir(parents=True, exist_ok=True)
    table_out.write_text(text)
    get_run_logger().info("final metrics after round %d:\n%s", rounds, table)
    create_markdown_artifact(key="fedpipe-summary", markdown=text, description="global vs local")
    return table
