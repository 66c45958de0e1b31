"""Converting a table's rows: cells to numbers, labels to classes, ids and clients."""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.data.ingest.base import IngestError
from fedpipe.data.ingest.prepared import STATUS_OK
from fedpipe.data.kinds import FALSE_WORDS, STRING_KINDS, TRUE_WORDS

_MAX_SHOWN_COLUMNS = 20
_MAX_SHOWN_VALUE = 40
_EXACT_INT = 2**53  # labels beyond this are not exact in float64
# an ISO 8601 date, optionally with a time of day and a UTC offset
ISO_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}(?::?\d{2})?)?)?"
)
_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
_CODE_LEVELS = (3, 10)  # a numeric column of this many whole-number levels ...
_CODE_MIN_ROWS = 50  # ... in at least this many rows: maybe codes of categories


def quoted(columns: Sequence[str]) -> str:
    """Column names for a message: quoted, the first 20, then how many more."""
    shown = ", ".join(repr(c) for c in columns[:_MAX_SHOWN_COLUMNS])
    more = len(columns) - _MAX_SHOWN_COLUMNS
    return shown + (f", ... ({more} more)" if more > 0 else "")


def _show(value: object) -> str:
    text = str(value)
    if len(text) > _MAX_SHOWN_VALUE:
        text = text[: _MAX_SHOWN_VALUE - 3] + "..."
    return repr(text)


def _key(value: object) -> str:
    """A cell as a text key: integral numbers without a trailing ``.0``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return str(int(value))
    return str(value)


def text_key(value: object) -> str:
    """A string column's present cell as stored: its key, surrounding spaces
    removed (``""``: missing)."""
    return _key(value).strip()


def date_days(raw: pd.Series) -> np.ndarray:
    """A date column as days since 1970-01-01 UTC (a time of day: the
    fraction; no UTC offset: taken as UTC); NaN where missing or not a date."""
    present = raw.notna()
    if pd.api.types.is_datetime64_any_dtype(raw):
        stamps = pd.to_datetime(raw, utc=True)
    else:
        cells = raw.where(~present, raw[present].map(text_key)) if len(raw) else raw
        is_text = cells.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
        stamps = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns, UTC]")
        if is_text.any():
            text = cells[is_text]
            ok = text.str.fullmatch(ISO_DATE).fillna(False).to_numpy(dtype=bool)
            stamps[text.index[ok]] = pd.to_datetime(
                text[ok], utc=True, format="ISO8601", errors="coerce"
            )
        other = present.to_numpy() & ~is_text  # a Parquet date: datetime.date
        if other.any():
            stamps[raw.index[other]] = pd.to_datetime(
                raw[other].astype(str), utc=True, errors="coerce"
            )
    days = (stamps - _EPOCH) / pd.Timedelta(days=1)
    return days.to_numpy(dtype=np.float64, na_value=np.nan)


def boolean_values(raw: pd.Series) -> np.ndarray:
    """A yes/no column as 1.0 (yes, true) / 0.0 (no, false), any case; NaN
    where missing or neither."""
    out = np.full(len(raw), np.nan)
    for i, value in enumerate(raw.tolist()):
        if isinstance(value, bool | np.bool_):
            out[i] = float(value)
        elif not pd.isna(value):
            word = text_key(value).lower()
            if word in TRUE_WORDS:
                out[i] = 1.0
            elif word in FALSE_WORDS:
                out[i] = 0.0
    return out


def numeric_values(raw: pd.Series, *, key: str, path: Path) -> np.ndarray:
    """A column as float64, non-numeric values as NaN."""
    try:
        converted = pd.to_numeric(raw, errors="coerce")
    except (TypeError, ValueError) as exc:
        raise IngestError(
            f"{key}: column {raw.name!r} in {path} does not hold single values "
            f"({exc}); use a column of numbers"
        ) from None
    return converted.to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass
class Rows:
    """Converts chunks in order and accumulates the per-sample columns."""

    path: Path
    features: list[str]
    roles: dict[str, str]
    kinds: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    n_rows: int = field(default=0, init=False)
    # per numeric column: its whole-number values while there are few (None:
    # a fraction, or more than _CODE_LEVELS[1] of them)
    _levels: dict[str, set[float] | None] = field(default_factory=dict, init=False)
    # per string column: value -> code, in order of first appearance
    _codes: dict[str, dict[str, int]] = field(default_factory=dict, init=False)
    sample_ids: list[str] = field(default_factory=list, init=False)
    client_keys: list[str] = field(default_factory=list, init=False)
    # per row: the first problem of each kind (None when there is none)
    _feature_problems: list[str | None] = field(default_factory=list, init=False)
    _index_problems: list[str | None] = field(default_factory=list, init=False)
    _client_problems: list[str | None] = field(default_factory=list, init=False)
    # per row: the label as a class index (-1 if not one) and as a name (None: missing)
    _indices: list[int] = field(default_factory=list, init=False)
    _names: list[str | None] = field(default_factory=list, init=False)
    _any_text_label: bool = field(default=False, init=False)
    _label_problems: list[str | None] = field(default_factory=list, init=False)
    _first_row_of_id: dict[str, int] = field(default_factory=dict, init=False)
    _max_label: int = field(default=-1, init=False)
    _low: float = field(default=np.inf, init=False)
    # per feature column: rows with a value (not NaN)
    _filled: np.ndarray | None = field(default=None, init=False)
    _high: float = field(default=-np.inf, init=False)

    def convert(self, chunk: pd.DataFrame) -> np.ndarray:
        """Features of one chunk as float32; records its sample columns."""
        first = self.n_rows + 1
        n = len(chunk)
        status = np.full(n, None, dtype=object)
        x = self._features(chunk, status)
        self._feature_problems.extend(status.tolist())
        self._labels(chunk[self.roles["data.label_column"]])
        client = np.full(n, None, dtype=object)
        if "data.client_column" in self.roles:
            self._clients(chunk[self.roles["data.client_column"]], client)
        self._client_problems.extend(client.tolist())
        if "data.id_column" in self.roles:
            self._ids(chunk[self.roles["data.id_column"]], first)
        else:
            self.sample_ids.extend(f"row-{r}" for r in range(first, first + n))
        self.n_rows += n
        return x

    def statuses(self) -> list[str]:
        """Each row's first problem (features, label, client key) or ``"ok"``."""
        out = []
        for problems in zip(
            self._feature_problems,
            self._label_problems,
            self._client_problems,
            strict=True,
        ):
            out.append(next((p for p in problems if p is not None), STATUS_OK))
        return out

    def _features(self, chunk: pd.DataFrame, status: np.ndarray) -> np.ndarray:
        x = np.empty((len(chunk), len(self.features)), np.float32)
        for j, column in enumerate(self.features):
            raw = chunk[column]
            kind = self.kinds.get(column, "numeric")
            if kind in STRING_KINDS:
                x[:, j] = self._encode(column, raw)
                continue
            if kind == "date":
                values, what = date_days(raw), "date"
            elif kind == "boolean":
                values, what = boolean_values(raw), "yes/no"
            else:
                values = numeric_values(raw, key="data.feature_columns", path=self.path)
                what = "numeric"
                self._count_levels(column, values)
            x[:, j] = values
            bad = raw.notna().to_numpy() & np.isnan(values) & pd.isna(status)
            for i in np.flatnonzero(bad):
                status[i] = (
                    f"non-{what} value {_show(raw.iloc[i])} in column {column!r}"
                )
        filled = (~np.isnan(x)).sum(axis=0)
        self._filled = filled if self._filled is None else self._filled + filled
        finite = x[np.isfinite(x)]
        if finite.size:
            self._low = min(self._low, float(finite.min()))
            self._high = max(self._high, float(finite.max()))
        return x

    def check_filled(self) -> None:
        """Every feature column has a value in some row (a column that is
        empty throughout, such as the one a trailing comma makes, is named)."""
        if self._filled is None:
            return
        empty = [c for c, n in zip(self.features, self._filled, strict=True) if not n]
        if empty:
            raise IngestError(
                f"data.feature_columns: column {quoted(empty)} of {self.path} is "
                "empty in every row (nothing to learn or fit a scaling from); "
                "fill it, or list the other columns in data.feature_columns"
            )

    def _encode(self, column: str, raw: pd.Series) -> np.ndarray:
        """A string column's codes (NaN: missing), new values numbered on."""
        codes = self._codes.setdefault(column, {})
        out = np.full(len(raw), np.nan)
        for i, value in enumerate(raw.tolist()):
            if pd.isna(value):
                continue
            key = text_key(value)
            if key:
                out[i] = codes.setdefault(key, len(codes))
        return out

    def _count_levels(self, column: str, values: np.ndarray) -> None:
        """Note ``column``'s whole-number levels while they are few."""
        levels = self._levels.setdefault(column, set())
        if levels is None:
            return
        finite = values[np.isfinite(values)]
        if (finite != np.round(finite)).any():
            self._levels[column] = None
            return
        levels.update(np.unique(finite).tolist())
        if len(levels) > _CODE_LEVELS[1]:
            self._levels[column] = None

    def code_columns(self) -> dict[str, list[float]]:
        """The numeric columns that may be codes of categories: a few
        whole-number levels (:data:`_CODE_LEVELS`) in enough rows."""
        if self.n_rows < _CODE_MIN_ROWS:
            return {}
        low, high = _CODE_LEVELS
        return {
            c: sorted(levels)
            for c, levels in self._levels.items()
            if levels is not None and low <= len(levels) <= high
        }

    def warnings(self) -> list[str]:
        """What the ingest took one way and the user may mean another."""
        out = []
        for column, levels in self.code_columns().items():
            shown = ", ".join(_key(v) for v in levels)
            out.append(
                f"column {column!r} holds only {len(levels)} whole-number levels "
                f"({shown}): taken as a number; if they are codes of categories, "
                "list it in preprocess.categorical"
            )
        return out

    def string_schema(self) -> dict[str, Any] | None:
        """``column_types``, ``strings`` and ``column_kinds`` for
        ``schema.json`` (None: every column numeric, none that may be codes)."""
        codes = self.code_columns()
        if not self.kinds and not codes:
            return None
        kinds: dict[str, dict[str, str]] = {}
        for column in self.features:
            kind = self.kinds.get(column, "numeric")
            why = self.why.get(column, "numbers")
            if column in codes:
                why = (
                    f"numbers, only {len(codes[column])} whole-number levels: "
                    "codes of categories? (preprocess.categorical)"
                )
            kinds[column] = {"kind": kind, "why": why}
        out: dict[str, Any] = {"column_kinds": kinds}
        if self.kinds:
            out["column_types"] = dict(self.kinds)
            out["strings"] = {
                c: list(self._codes.get(c, {}))
                for c, k in self.kinds.items()
                if k in STRING_KINDS
            }
        return out

    def _labels(self, raw: pd.Series) -> None:
        """Record each label both as a class index and as a class name."""
        values = numeric_values(raw, key="data.label_column", path=self.path)
        present = raw.notna().to_numpy()
        self._any_text_label |= bool((present & np.isnan(values)).any())
        self._names.extend(
            _key(v).strip() if p else None
            for v, p in zip(raw.tolist(), present, strict=True)
        )
        status = np.full(len(raw), None, dtype=object)
        with np.errstate(invalid="ignore"):
            integral = (
                np.isfinite(values)
                & (np.floor(values) == values)
                & (np.abs(values) <= _EXACT_INT)
            )
        labels = np.where(integral, values, -1).astype(np.int64)
        for i in np.flatnonzero(~integral & pd.isna(status)):
            status[i] = (
                f"label {_show(raw.iloc[i])} is not an integer class index"
                if present[i]
                else self._label_missing()
            )
        if integral.any():
            self._max_label = max(self._max_label, int(labels[integral].max()))
        self._indices.extend(labels.tolist())
        self._index_problems.extend(status.tolist())

    def _clients(self, raw: pd.Series, status: np.ndarray) -> None:
        column = self.roles["data.client_column"]
        for i, value in enumerate(raw.tolist()):
            if pd.isna(value):
                self.client_keys.append("")
                if status[i] is None:
                    status[i] = f"client key missing in column {column!r}"
            else:
                self.client_keys.append(_key(value))

    def _ids(self, raw: pd.Series, first: int) -> None:
        column = self.roles["data.id_column"]
        hint = "or leave data.id_column unset to number the rows"
        for offset, value in enumerate(raw.tolist()):
            row = first + offset
            if pd.isna(value):
                raise IngestError(
                    f"data.id_column: {column!r} is empty in {self.path} at data row "
                    f"{row}; every row needs an id ({hint})"
                )
            sample_id = _key(value)
            earlier = self._first_row_of_id.setdefault(sample_id, row)
            if earlier != row:
                raise IngestError(
                    f"data.id_column: {column!r} in {self.path} has {sample_id!r} at "
                    f"data rows {earlier} and {row}; ids must be unique ({hint})"
                )
            self.sample_ids.append(sample_id)

    def finish_labels(
        self, classes: list[str] | None, num_classes: int | None
    ) -> tuple[list[int], list[str]]:
        """The class index of every row and the class names, once all rows are read.

        Names are used when ``classes`` is given or any label is not a number;
        otherwise the labels are class indices.
        """
        if classes is None and not self._any_text_label:
            self._label_problems = self._index_problems
            k = num_classes if num_classes is not None else self._inferred_classes()
            return self._indices, [str(c) for c in range(k)]
        if classes is None:
            classes = sorted({n for n in self._names if n is not None})
            if num_classes is not None and num_classes != len(classes):
                raise IngestError(
                    f"data.num_classes: {num_classes} but data.label_column "
                    f"{self.roles['data.label_column']!r} in {self.path} holds "
                    f"{len(classes)} class names ({quoted(classes)}); set "
                    "data.num_classes to null"
                )
        index = {name: i for i, name in enumerate(classes)}
        self._check_names(index)
        labels = [-1 if n is None else index[n] for n in self._names]
        self._label_problems = [
            self._label_missing() if n is None else None for n in self._names
        ]
        return labels, list(classes)

    def _label_missing(self) -> str:
        """The status of a row without a label: names its column and key."""
        column = self.roles["data.label_column"]
        return f"label missing in column {column!r} (data.label_column)"

    def _check_names(self, index: dict[str, int]) -> None:
        """Every present label is a declared class name."""
        unknown: dict[str, str] = {}
        for name, sample_id in zip(self._names, self.sample_ids, strict=True):
            if name is not None and name not in index:
                unknown.setdefault(name, sample_id)
        if not unknown:
            return
        where = "id" if "data.id_column" in self.roles else "at"
        shown = ", ".join(
            f"{_show(name)} ({where} {sample_id})"
            for name, sample_id in list(unknown.items())[:_MAX_SHOWN_COLUMNS]
        )
        more = len(unknown) - _MAX_SHOWN_COLUMNS
        raise IngestError(
            f"data.classes: data.label_column {self.roles['data.label_column']!r} "
            f"in {self.path} holds {shown}{f' and {more} more' if more > 0 else ''}"
            f", not in data.classes; allowed: {quoted(list(index))} (add the name "
            "to data.classes, fix the rows, or set data.classes to null to take "
            "every name)"
        )

    def _inferred_classes(self) -> int:
        """K from the labels: largest integer label + 1."""
        if self._max_label < 0:
            raise IngestError(
                f"data.label_column: {self.roles['data.label_column']!r} in "
                f"{self.path} has no integer label >= 0, so the classes cannot be "
                "inferred; fix the labels or set data.num_classes"
            )
        return self._max_label + 1

    def value_range(self) -> tuple[float, float]:
        """Observed finite (min, max) of the stored features; (0, 0) if none."""
        if self._low > self._high:
            return (0.0, 0.0)
        return (self._low, self._high)
