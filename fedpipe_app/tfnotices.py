"""TensorFlow's start-up notices kept off a command's stderr.

On CPUs where TensorFlow turns its oneDNN operations on by itself (AVX-512 VNNI,
AMX...), importing it writes, from C++ and whatever ``TF_CPP_MIN_LOG_LEVEL``
says, two lines twice::

    WARNING: All log messages before absl::InitializeLog() is called are wri...
    I0000 00:00:... port.cc:153] oneDNN custom operations are on. You may see...

so that a command whose whole answer is one ``error:`` line (a bad column in
``fedpipe predict``) printed five. :func:`install` makes the first ``import
tensorflow`` of the process run with file descriptor 2 read through a pipe, and
writes back everything but those lines when the import is done (in order; other
output written meanwhile is delayed by the import, never dropped).

A Keras ``predict`` of a model with string inputs (``fedpipe predict`` of a table
with categorical columns) then logs, at ERROR level and so whatever
``TF_CPP_MIN_LOG_LEVEL=2`` says::

    E0000 00:00:... node_def_util.cc:682] NodeDef mentions attribute
    use_unbounded_threadpool which is not in the op definition: Op<name=MapDataset ...

(tf.data's ``ParallelMapDatasetV2`` rewritten to a ``MapDataset`` whose op
definition predates the attribute; the attribute is ignored). :func:`quiet` runs a
block with the same filter.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

NOTICE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are "
    rb"written to STDERR|I\d{4} [\d:. ]+\d+ port\.cc:\d+\] oneDNN custom operations "
    rb"are on\..*"
    # tf.data's graph rewrite of a Keras predict (TensorFlow 2.18+ Python over its
    # own older kernels' op definitions): harmless, logged at ERROR level
    rb"|E\d{4} [\d:. ]+\d+ node_def_util\.cc:\d+\] NodeDef mentions attribute "
    rb"use_unbounded_threadpool which is not in the op definition.*)\r?\n?$"
)


def without_notices(text: bytes) -> bytes:
    """``text`` without TensorFlow's start-up notice lines."""
    return b"".join(
        line for line in text.splitlines(keepends=True) if not NOTICE.match(line)
    )


class _Filtered(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` once, and loads it with stderr filtered."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once, and not for the lookup below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            with _stderr_filtered():
                run(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _stderr_filtered:  # noqa: N801 - used as a context manager
    def __enter__(self) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.chunks: list[bytes] = []

        def drain() -> None:
            while chunk := os.read(read, 65536):
                self.chunks.append(chunk)
            os.close(read)

        self.reader = threading.Thread(target=drain, name="tf-notices", daemon=True)
        self.reader.start()

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # the pipe's last writer closed: the reader ends
        os.close(self.saved)
        self.reader.join()
        kept = without_notices(b"".join(self.chunks))
        if kept:
            os.write(2, kept)


def quiet() -> _stderr_filtered:
    """A context manager: file descriptor 2 filtered for the block as for the
    import (TensorFlow's notices dropped, everything else written back, in order,
    when the block ends)."""
    return _stderr_filtered()


def install() -> None:
    """Filter the first ``import tensorflow`` of this process (once; nothing if
    it is imported already)."""
    if "tensorflow" in sys.modules or any(
        isinstance(f, _Filtered) for f in sys.meta_path
    ):
        return
    sys.meta_path.insert(0, _Filtered())
