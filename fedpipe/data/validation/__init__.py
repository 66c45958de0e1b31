"""Data validation of client and prepared data sets with Great Expectations 1.x.

:func:`validate_table` checks a table with one id column, one label column and
many feature columns (e.g. 784 pixels); :func:`validate_prepared` checks a
prepared data set from its per-sample summary. Both return a
:class:`ValidationReport` whose :class:`ExpectationFailure` s say what was
expected, what was observed and which sample ids failed, and can write
``summary.json``, ``result.json`` and Data Docs.

One concern per module: :mod:`~fedpipe.data.validation.spec` (the settings and the
row-summary columns), :mod:`~fedpipe.data.validation.summary` (the row summary the
row-level checks run on), :mod:`~fedpipe.data.validation.table` and
:mod:`~fedpipe.data.validation.prepared` (the two check families),
:mod:`~fedpipe.data.validation.describe` (the sentences of failed expectations),
:mod:`~fedpipe.data.validation.gx` (the GX context, suites and checkpoints),
:mod:`~fedpipe.data.validation.results` (the report from GX results) and
:mod:`~fedpipe.data.validation.files` (the files written).

``great_expectations`` is imported lazily (it takes several seconds), so importing
this package is cheap.
"""

from __future__ import annotations

from fedpipe.data.validation.prepared import validate_prepared, validate_prepared_dir
from fedpipe.data.validation.results import ExpectationFailure, ValidationReport
from fedpipe.data.validation.spec import (
    FEATURE_MAX,
    FEATURE_MIN,
    FEATURE_NON_NUMERIC_COUNT,
    FEATURE_NULL_COUNT,
    MAX_EXAMPLES,
    ROW_NUMBER,
    SUMMARY_COLUMNS,
)
from fedpipe.data.validation.table import validate_table

__all__ = [
    "FEATURE_MAX",
    "FEATURE_MIN",
    "FEATURE_NON_NUMERIC_COUNT",
    "FEATURE_NULL_COUNT",
    "MAX_EXAMPLES",
    "ROW_NUMBER",
    "SUMMARY_COLUMNS",
    "ExpectationFailure",
    "ValidationReport",
    "validate_prepared",
    "validate_prepared_dir",
    "validate_table",
]
