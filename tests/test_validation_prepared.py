"""Tests for fedpipe.data.validation.validate_prepared on tiny prepared tables: what a
failed label check says about the value the file holds."""

from __future__ import annotations

from pathlib import Path

from fedpipe.data.ingest import ingest_table, read_schema, row_summaries
from fedpipe.data.validation import ValidationReport, validate_prepared


def _validate(
    tmp_path: Path,
    text: str,
    skipped: tuple[str, ...] = (),
    allow_missing: bool = False,
    **kwargs: object,
) -> ValidationReport:
    path = tmp_path / "t.csv"
    path.write_text(text)
    out = tmp_path / "prepared"
    ingest_table(path, out_dir=out, label_column="y", **kwargs)
    schema = read_schema(out)
    return validate_prepared(
        row_summaries(out),
        classes=schema["classes"],
        class_names=schema["class_names"],
        value_range=tuple(schema["value_range"]),
        min_rows=2,
        imbalance_ratio=2.0,
        skipped=skipped,
        allow_missing=allow_missing,
    )


def _details(report: ValidationReport) -> list[str]:
    return [f.detail for f in report.failures]


def test_fractional_label_is_reported_with_the_value_in_the_file(
    tmp_path: Path,
) -> None:
    report = _validate(tmp_path, "x,y\n1,0\n2,0.5\n3,1\n4,0\n5,1\n")
    assert not report.success
    (detail,) = _details(report)
    assert "label '0.5' is not an integer class index" in detail
    assert "-1" not in detail
    assert report.failures[0].examples == ("row-2",)


def test_label_outside_the_classes_is_reported_with_its_value(
    tmp_path: Path,
) -> None:
    report = _validate(tmp_path, "x,y\n1,0\n2,5\n3,1\n4,0\n", num_classes=2)
    (detail,) = _details(report)
    assert "labels must be class indices in [0, 1]" in detail
    assert "(e.g. 5)" in detail


def test_text_labels_validate(tmp_path: Path) -> None:
    report = _validate(tmp_path, "x,y\n1,cat\n2,dog\n3,cat\n4,dog\n")
    assert report.success, _details(report)


def test_imbalance_names_the_classes(tmp_path: Path) -> None:
    report = _validate(tmp_path, "x,y\n1,cat\n2,dog\n3,cat\n4,cat\n5,cat\n")
    (warning,) = [w for w in report.warnings if w.expectation.endswith("imbalance")]
    assert warning.detail.startswith("class cat has 4 samples, 4.0x class dog (1)")


def test_skipped_os_files_are_counted_in_the_summary(tmp_path: Path) -> None:
    skipped = ("Thumbs.db", "__MACOSX/", "cat/.DS_Store")
    report = _validate(tmp_path, "x,y\n1,cat\n2,dog\n", skipped=skipped)
    assert report.summary_lines()[-1] == (
        "skipped 3 operating-system files, not samples: Thumbs.db, __MACOSX/, "
        "cat/.DS_Store"
    )
    assert report.to_dict()["skipped"] == list(skipped)


def test_nothing_skipped_adds_nothing(tmp_path: Path) -> None:
    report = _validate(tmp_path, "x,y\n1,cat\n2,dog\n")
    assert "skipped" not in report.to_dict()
    assert len(report.summary_lines()) == 1


def test_missing_features_are_refused_naming_preprocess_missing(
    tmp_path: Path,
) -> None:
    report = _validate(tmp_path, "x,z,y\n1,,0\n2,3,1\n3,4,0\n4,5,1\n")
    (detail,) = _details(report)
    assert "must not be NaN or empty (preprocess.missing: refuse)" in detail
    assert "set preprocess.missing to mean or median" in detail
    assert report.failures[0].examples == ("row-1",)


def test_missing_features_pass_when_the_preprocess_stage_imputes(
    tmp_path: Path,
) -> None:
    report = _validate(
        tmp_path, "x,z,y\n1,,0\n2,3,1\n3,4,0\n4,5,1\n", allow_missing=True
    )
    assert report.success, _details(report)
