"""Tasks for the data stages: ingest, validate, partition."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from fedpipe import data as fdata
from fedpipe.data import DatasetSpec
from fedpipe.federation import partition_table, read_json, write_json


class ValidationFailed(RuntimeError):
    """The data failed validation; the message is the summary a person acts on."""


@task(name="ingest", cache_policy=NO_CACHE)
def ingest(source: str, out: Path) -> int:
    """Load ``data.source`` and write it as the raw table. Returns the row count."""
    df = fdata.ingest(source)
    fdata.write_table(df, out)
    get_run_logger().info("ingested %d samples from %s into %s", len(df), source, out)
    return len(df)


@task(name="validate", cache_policy=NO_CACHE)
def validate(
    table: Path, spec: DatasetSpec, *, min_rows: int, report_dir: Path
) -> None:
    """Validate the raw table with Great Expectations; raise if any check fails."""
    from fedpipe.validation import validate_table

    df = fdata.read_table(table)
    report = validate_table(
        df,
        id_column=fdata.ID_COLUMN,
        label_column=fdata.LABEL_COLUMN,
        feature_columns=spec.feature_columns,
        classes=spec.classes,
        value_range=spec.value_range,
        min_rows=min_rows,
        report_dir=report_dir,
    )
    logger = get_run_logger()
    for line in report.summary_lines():
        (logger.info if report.success else logger.error)(line)
    if not report.success:
        raise ValidationFailed(
            f"{table}: data validation failed "
            f"({len(report.failures)} of {report.n_expectations} checks):\n"
            + "\n".join(report.summary_lines())
            + f"\nfull result and Data Docs: {report_dir}/"
        )


@task(name="partition", cache_policy=NO_CACHE)
def partition(table: Path, out: Path, **settings: object) -> dict:
    """Deal the training samples to clients and write the manifest."""
    df = fdata.read_table(table)
    manifest = partition_table(df, **settings)  # type: ignore[arg-type]
    write_json(out, manifest)
    sizes = [len(c["train"]) for c in manifest["clients"]]
    get_run_logger().info(
        "partitioned %d local-train samples over %d clients (%s): sizes %d..%d; "
        "%d held out",
        sum(sizes),
        len(sizes),
        manifest["method"],
        min(sizes),
        max(sizes),
        len(manifest["heldout"]),
    )
    return manifest


def load_manifest(path: Path) -> dict:
    """Read the partition manifest."""
    return read_json(path)
