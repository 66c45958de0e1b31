"""The files a table ingest reads: CSV read as text, Parquet in record batches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fedpipe.data.ingest.base import IngestError

CSV_SUFFIXES = (".csv", ".csv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")


class CsvTable:
    """A CSV file read as text in chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self, **kwargs: Any) -> Any:
        try:
            return pd.read_csv(self.path, dtype=str, **kwargs)
        except pd.errors.EmptyDataError:
            raise IngestError(
                f"data.path: {self.path}: no data rows (the file is empty); expected "
                "a header line and one line per sample"
            ) from None
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise IngestError(
                f"data.path: {self.path}: not a readable CSV file ({exc}); expected "
                "UTF-8 text with a header line and the same number of fields per line"
            ) from None

    def columns(self) -> list[str]:
        return [str(c) for c in self._read(nrows=0).columns]

    def text_candidates(self, columns: list[str]) -> list[str]:
        """Columns that may hold text (in a CSV, any)."""
        return list(columns)

    def stored_kinds(self, columns: list[str]) -> dict[str, tuple[str, str]]:
        """Column -> (kind, why) of the columns whose stored type says (a CSV
        stores none)."""
        return {}

    def head(self, columns: list[str], rows: int) -> pd.DataFrame:
        """The first ``rows`` rows of ``columns``."""
        return self._read(nrows=rows)[columns]

    def count_rows(self) -> int:
        first = self.columns()[:1]
        return sum(len(c) for c in self._read(usecols=first, chunksize=2**16))

    def chunks(self, columns: list[str], chunk_rows: int) -> Iterator[pd.DataFrame]:
        # every column is parsed (no usecols): with usecols pandas silently accepts
        # lines with extra fields, i.e. shifted columns
        reader = self._read(chunksize=chunk_rows)
        with reader:
            while True:
                try:
                    chunk = next(reader)
                except StopIteration:
                    return
                except (pd.errors.ParserError, UnicodeDecodeError) as exc:
                    raise IngestError(
                        f"data.path: {self.path}: not a readable CSV file ({exc})"
                    ) from None
                yield chunk[columns]


class ParquetTable:
    """A Parquet file read in record batches."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise IngestError(
                f"data.path: {path}: not a readable Parquet file ({exc})"
            ) from None

    def columns(self) -> list[str]:
        schema = self._file.schema_arrow
        stored = (schema.pandas_metadata or {}).get("index_columns", [])
        # a RangeIndex is described by a dict, not stored as a column
        index = {c for c in stored if isinstance(c, str)}
        return [c for c in schema.names if c not in index]

    def count_rows(self) -> int:
        return int(self._file.metadata.num_rows)

    def text_candidates(self, columns: list[str]) -> list[str]:
        """Columns whose stored type is not a number or a boolean."""
        schema = self._file.schema_arrow
        return [
            c
            for c in columns
            if not (
                pa.types.is_integer(schema.field(c).type)
                or pa.types.is_floating(schema.field(c).type)
                or pa.types.is_boolean(schema.field(c).type)
                or pa.types.is_decimal(schema.field(c).type)
            )
        ]

    def stored_kinds(self, columns: list[str]) -> dict[str, tuple[str, str]]:
        """Column -> (kind, why): a stored date or timestamp type is a date, a
        stored boolean a boolean."""
        out = {}
        for column in columns:
            stored = self._file.schema_arrow.field(column).type
            if pa.types.is_date(stored) or pa.types.is_timestamp(stored):
                out[column] = ("date", f"a Parquet {stored} column: days since 1970")
            elif pa.types.is_boolean(stored):
                out[column] = ("boolean", "a Parquet bool column: 1/0")
        return out

    def chunks(self, columns: list[str], chunk_rows: int) -> Iterator[pd.DataFrame]:
        for batch in self._file.iter_batches(batch_size=chunk_rows, columns=columns):
            yield batch.to_pandas()[columns]

    def head(self, columns: list[str], rows: int) -> pd.DataFrame:
        """The first ``rows`` rows of ``columns``."""
        return next(iter(self.chunks(columns, rows)), pd.DataFrame(columns=columns))


TableFile = CsvTable | ParquetTable
"""A table file being read: :class:`CsvTable` or :class:`ParquetTable`."""


def open_table(path: Path) -> TableFile:
    name = path.name.lower()
    if not name.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES):
        accepted = ", ".join(CSV_SUFFIXES + PARQUET_SUFFIXES)
        raise IngestError(
            f"data.path: {path}: unsupported file type; accepted suffixes: {accepted}"
        )
    if not path.exists():
        raise IngestError(f"data.path: {path} does not exist")
    if not path.is_file():
        raise IngestError(f"data.path: {path} is not a file")
    if name.endswith(CSV_SUFFIXES):
        return CsvTable(path)
    return ParquetTable(path)
