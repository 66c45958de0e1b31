"""Data ingest: every source becomes one prepared directory of the same format.

A prepared directory holds ``features.npy`` (``(N, *input_shape)``, uint8 images or
float32 tables, written incrementally), ``samples.parquet`` (one row per sample:
id, label, content hash, status, source, ...) and ``schema.json`` (shape, dtype,
value range, scale, classes). See :mod:`fedpipe.data.ingest.prepared` for the format.

Sources: :func:`ingest_image_folder` (one subfolder per class),
:func:`ingest_table` (CSV or Parquet) and :func:`ingest_arrays` (in-memory arrays
such as the built-in MNIST digits). A bad *sample* never stops an ingest: it is
recorded in ``status`` for data validation; a bad *configuration* raises
:class:`IngestError` naming the ``data.*`` key.
"""

from __future__ import annotations

from fedpipe.data.ingest.arrays import ingest_arrays
from fedpipe.data.ingest.base import IngestError, IngestResult
from fedpipe.data.ingest.images import ingest_image_folder
from fedpipe.data.ingest.prepared import (
    FEATURES_FILE,
    SAMPLES_FILE,
    SCHEMA_FILE,
    STATUS_OK,
    open_features,
    read_samples,
    read_schema,
    row_summaries,
)
from fedpipe.data.ingest.table import ingest_table

__all__ = [
    "FEATURES_FILE",
    "SAMPLES_FILE",
    "SCHEMA_FILE",
    "STATUS_OK",
    "IngestError",
    "IngestResult",
    "ingest_arrays",
    "ingest_image_folder",
    "ingest_table",
    "open_features",
    "read_samples",
    "read_schema",
    "row_summaries",
]
