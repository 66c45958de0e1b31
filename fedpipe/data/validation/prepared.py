"""Prepared data sets (``fedpipe.data.ingest``), validated from their per-sample
summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.data.validation.describe import (
    describe_missing_named,
    extreme,
    format_classes,
    have,
    unexpected_values,
)
from fedpipe.data.validation.files import prepare_report_dir, write_reports
from fedpipe.data.validation.gx import GxRunner
from fedpipe.data.validation.ranges import value_range_checks
from fedpipe.data.validation.results import (
    ExpectationFailure,
    ValidationReport,
    make_report,
)
from fedpipe.data.validation.spec import ROW_NUMBER, Check, Spec


def validate_prepared_dir(
    prepared: Path,
    settings: Any,
    *,
    report_dir: Path | None = None,
    allow_missing: bool = False,
) -> ValidationReport:
    """:func:`validate_prepared` on a prepared directory: its row summaries and
    ``schema.json``, with ``validation.*`` (``settings``, a
    :class:`fedpipe.config.params.ValidationParams`); ``allow_missing``
    (``preprocess.missing`` imputes) lets NaN feature values through."""
    from fedpipe.data.ingest import read_schema, row_summaries

    schema = read_schema(prepared)
    summary = row_summaries(prepared)
    where = ""
    if not allow_missing and schema.get("source") == "table":
        if int(summary["feature_nan_count"].sum()) > 0:
            where = empty_cells(prepared, schema)
    return validate_prepared(
        summary,
        classes=schema["classes"],
        class_names=schema["class_names"],
        value_range=tuple(schema["value_range"]),
        min_rows=settings.min_rows,
        imbalance_ratio=settings.imbalance_ratio,
        imbalance=settings.imbalance,
        duplicates=settings.duplicates,
        mixed_sizes=settings.mixed_sizes,
        skipped=schema.get("skipped", ()),
        report_dir=report_dir,
        allow_missing=allow_missing,
        empty_where=where,
    )


def empty_cells(prepared: Path, schema: Mapping[str, Any], limit: int = 5) -> str:
    """Which feature columns of a prepared table have empty cells, and how
    many: ``"'z' 40 (every row of client 'b'), 'x' 3"``; a column empty in
    every row of a client (``data.client_column``) says so."""
    from fedpipe.data.ingest import open_features, read_samples

    x = open_features(prepared)
    names = [str(c) for c in schema["feature_names"]]
    samples = read_samples(prepared)
    keys = samples["client_key"].to_numpy() if "client_key" in samples else None
    empty = np.zeros(len(names), dtype=np.int64)
    by_client: dict[str, np.ndarray] = {}
    rows: dict[str, int] = {}
    step = 4096
    for start in range(0, len(x), step):
        nan = np.isnan(np.asarray(x[start : start + step], dtype=np.float32))
        empty += nan.sum(axis=0)
        if keys is None:
            continue
        for key in np.unique(keys[start : start + step]):
            mine = keys[start : start + step] == key
            by_client[key] = by_client.get(key, 0) + nan[mine].sum(axis=0)
            rows[key] = rows.get(key, 0) + int(mine.sum())
    parts = []
    for j in np.argsort(-empty, kind="stable")[:limit]:
        if not empty[j]:
            break
        whole = sorted(k for k in by_client if by_client[k][j] == rows[k])
        clients = ", ".join(repr(str(k)) for k in whole[:3])
        also = f" (every row of client {clients})" if whole else ""
        parts.append(f"{names[j]!r} {int(empty[j])}{also}")
    more = int((empty > 0).sum()) - len(parts)
    return ", ".join(parts) + (f" and {more} more column(s)" if more > 0 else "")


def validate_prepared(
    summary: pd.DataFrame,
    *,
    classes: Sequence[int],
    class_names: Sequence[str],
    value_range: tuple[float, float],
    min_rows: int,
    imbalance_ratio: float = 10.0,
    imbalance: str = "warn",
    duplicates: str = "warn",
    mixed_sizes: str = "warn",
    skipped: Sequence[str] = (),
    report_dir: Path | None = None,
    allow_missing: bool = False,
    empty_where: str = "",
) -> ValidationReport:
    """Validate a prepared data set from its per-sample summary.

    ``summary`` is :func:`fedpipe.data.ingest.row_summaries` (one row per sample with
    ``sample_id``, ``label``, ``status``, ``content_hash``, feature min/max/NaN
    count and, for images, the original height/width/channels).

    Always fatal: fewer than ``min_rows`` samples, null or repeated ids, samples
    that could not be read (listed by id: the file path for images, the row for
    tables), labels outside ``classes``, a declared class without samples, NaN
    features, values outside ``value_range``. Fatal or a warning, as the
    ``imbalance``, ``duplicates`` and ``mixed_sizes`` arguments say ("fail" or
    "warn"): the largest class above ``imbalance_ratio`` times the smallest;
    repeated content (same pixels or feature values); images of different sizes or
    channel counts before resizing. ``skipped`` (``schema.json`` ``skipped``: the
    operating-system files the ingest left out) is carried into the report and
    counted in its summary. ``allow_missing`` (``preprocess.missing`` is
    ``mean`` or ``median``): NaN features are not a failure (the preprocess
    stage imputes them); otherwise the failure names that key, and
    ``empty_where`` (:func:`empty_cells`) the columns the empty cells are in.
    """
    spec = Spec.build(
        id_column="sample_id",
        label_column="label",
        feature_columns=(),
        classes=classes,
        value_range=value_range,
        min_rows=min_rows,
    )
    frame = _prepared_frame(summary)
    docs_dir = prepare_report_dir(Path(report_dir)) if report_dir is not None else None
    runner = GxRunner(spec, docs_dir)
    gxe = runner.gxe
    names = {int(c): str(n) for c, n in zip(classes, class_names, strict=False)}
    strict = _prepared_checks(
        gxe, spec, names, allow_missing=allow_missing, empty_where=empty_where
    )
    soft: list[tuple[str, Check]] = [(duplicates, _duplicate_check(gxe))]
    if "orig_size" in frame:
        soft.append((mixed_sizes, _size_check(gxe)))
    strict += [check for action, check in soft if action == "fail"]
    warn = [check for action, check in soft if action != "fail"]
    outcomes = [runner.run("data", frame, strict)]
    if warn:
        outcomes.append(runner.run("warnings", frame, warn))
    failures = list(make_report(len(frame), outcomes[:1], spec).failures)
    warnings = list(make_report(len(frame), outcomes[1:], spec).failures)
    skew = _imbalance_finding(frame, names, imbalance_ratio)
    if skew is not None:
        (failures if imbalance == "fail" else warnings).append(skew)
    report = ValidationReport(
        success=not failures,
        n_rows=len(frame),
        n_expectations=len(strict) + len(warn) + 1,
        failures=tuple(failures),
        warnings=tuple(warnings),
        skipped=tuple(str(s) for s in skipped),
    )
    if report_dir is not None:
        write_reports(Path(report_dir), report, outcomes)
    return report


def _prepared_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """Add the derived columns the prepared checks run on."""
    frame = summary.reset_index(drop=True).copy()
    frame[ROW_NUMBER] = np.arange(len(frame), dtype=np.int64)
    ok = frame["status"] == "ok"
    # unreadable samples all have zero features: do not count them as duplicates
    frame["content_key"] = frame["content_hash"].where(
        ok, "unreadable:" + frame["sample_id"]
    )
    # a label the ingest could not read is stored as -1 and its status names the
    # value the file holds: the status check reports it, not the label check
    unread = (frame["label"] == -1) & ~ok
    frame["label"] = frame["label"].astype(object).where(~unread, None)
    if {"orig_height", "orig_width", "orig_channels"} <= set(frame.columns):
        size = (
            frame["orig_height"].astype(str)
            + "x"
            + frame["orig_width"].astype(str)
            + "x"
            + frame["orig_channels"].astype(str)
        )
        frame["orig_size"] = size.where(ok, None)
    return frame


def _categorical_hint(result: Any) -> str:
    """How to declare a column of numbers and text as categorical, when the
    problems shown are non-numeric values; what to do with a missing label."""
    shown = unexpected_values(result)
    hint = ""
    if "label missing in column" in shown:
        hint += (
            "; a row without a label can neither train nor be evaluated: fill "
            "its label, or remove the row"
        )
    if "non-numeric value" in shown:
        hint += (
            "; a column of categories written partly as numbers: list it in "
            "preprocess.categorical (every value becomes a category), otherwise "
            "fix those rows or leave them empty (missing)"
        )
    return hint


def _prepared_checks(
    gxe: Any,
    spec: Spec,
    names: Mapping[int, str],
    *,
    allow_missing: bool = False,
    empty_where: str = "",
) -> list[Check]:
    """The always-fatal expectations on a prepared data set (no NaN check with
    ``allow_missing``)."""
    classes = format_classes(spec.classes)
    binary = (
        " (exactly 0/1 for a two-class sigmoid model)" if len(spec.classes) == 2 else ""
    )
    checks = [
        Check(
            gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows),
            lambda r: (
                f"need at least {spec.min_rows} samples (validation.min_rows); "
                f"observed {r.get('observed_value')}"
            ),
        ),
        Check(
            gxe.ExpectColumnValuesToNotBeNull(column="sample_id"),
            lambda r: f"sample ids must not be null; {have(r, 'a null id')}",
        ),
        Check(
            gxe.ExpectColumnValuesToBeUnique(column="sample_id"),
            lambda r: f"sample ids must be unique; {have(r, 'a repeated id')}",
        ),
        Check(
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"]),
            lambda r: (
                f"every sample must be read without a problem; "
                f"{have(r, 'a problem')} "
                f"(e.g. {unexpected_values(r)}){_categorical_hint(r)}"
            ),
        ),
        Check(
            gxe.ExpectColumnValuesToBeInSet(
                column="label", value_set=list(spec.classes)
            ),
            lambda r: (
                f"labels must be class indices in {classes}{binary}; "
                f"{have(r, 'other values')} (e.g. {unexpected_values(r)})"
            ),
        ),
        Check(
            gxe.ExpectColumnDistinctValuesToContainSet(
                column="label", value_set=list(spec.classes)
            ),
            lambda r: describe_missing_named(r, names),
        ),
        Check(
            gxe.ExpectColumnUniqueValueCountToBeBetween(column="label", min_value=2),
            lambda r: (
                "a classifier needs samples of at least 2 classes; found "
                f"{r.get('observed_value')}"
            ),
        ),
    ]
    if not allow_missing:
        checks.append(
            Check(
                gxe.ExpectColumnValuesToBeInSet(
                    column="feature_nan_count", value_set=[0]
                ),
                lambda r: (
                    "feature values must not be NaN or empty "
                    "(preprocess.missing: refuse); "
                    f"{have(r, 'NaN features')} (up to {extreme(r, max)} per row"
                    + (
                        f"; empty cells per column: {empty_where}"
                        if empty_where
                        else ""
                    )
                    + "); set preprocess.missing to mean or median to impute "
                    "them (from the other rows' federated statistics)"
                ),
            )
        )
    return checks + value_range_checks(gxe, spec, name_range=False)


def _duplicate_check(gxe: Any) -> Check:
    return Check(
        gxe.ExpectColumnValuesToBeUnique(column="content_key"),
        lambda r: (
            f"samples should not repeat another sample's content; "
            f"{have(r, 'repeated content')} (validation.duplicates; data.dedupe "
            "decides what is dropped before the held-out split: by default "
            "repeated images, no table rows)"
        ),
    )


def _size_check(gxe: Any) -> Check:
    return Check(
        gxe.ExpectColumnUniqueValueCountToBeBetween(column="orig_size", max_value=1),
        lambda r: (
            "images differ in size or channel count before resizing (height x width "
            f"x channels): {r.get('observed_value')} distinct shapes; they are "
            "resized to data.image_size (validation.mixed_sizes)"
        ),
    )


def _imbalance_finding(
    frame: pd.DataFrame, names: Mapping[int, str], ratio: float
) -> ExpectationFailure | None:
    """Largest class more than ``ratio`` times the smallest (present) class."""
    labels = frame.loc[frame["status"] == "ok", "label"]
    counts = labels[labels.isin(list(names))].value_counts()
    if len(counts) < 2:
        return None
    big, small = counts.idxmax(), counts.idxmin()
    observed = counts[big] / counts[small]
    if observed <= ratio:
        return None
    return ExpectationFailure(
        expectation="fedpipe_class_imbalance",
        column="label",
        unexpected_count=0,
        examples=(),
        detail=(
            f"class {names.get(int(big), big)!s} has {int(counts[big])} samples, "
            f"{observed:.1f}x class {names.get(int(small), small)!s} "
            f"({int(counts[small])}); validation.imbalance_ratio={ratio:g}"
        ),
    )
