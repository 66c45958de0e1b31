"""TensorFlow's C++ start-up notices kept off stderr (fedpipe_app.tfnotices)."""

from __future__ import annotations

import os
import subprocess
import sys

from fedpipe_app.tfnotices import without_notices

NOTICES = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written"
    b" to STDERR\n"
    b"I0000 00:00:1796408467.040305    4789 port.cc:153] oneDNN custom operations "
    b"are on. You may see slightly different numerical results due to floating-point"
    b" round-off errors from different computation orders. To turn them off, set "
    b"the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
)


PREDICT_NOTICE = (
    b"E0000 00:00:1796572399.895912    6524 node_def_util.cc:682] NodeDef mentions "
    b"attribute use_unbounded_threadpool which is not in the op definition: "
    b"Op<name=MapDataset; signature=input_dataset:variant, other_arguments: -> "
    b"handle:variant; attr=f:func> This may be expected if your graph generating "
    b"binary is newer  than this binary. Unknown attributes will be ignored. "
    b"NodeDef: {{node ParallelMapDatasetV2/_16}}\n"
)


def test_the_predict_notice_is_dropped_and_other_errors_kept() -> None:
    """`fedpipe predict` of a table with categorical columns printed this line
    (a real capture, issue 36); another E-level line is kept."""
    other = b"E0000 00:00:1.0    1 node_def_util.cc:682] NodeDef mentions attribute x\n"
    assert without_notices(NOTICES + PREDICT_NOTICE + other) == other


def test_only_the_notices_are_dropped() -> None:
    other = b"error: bad.csv: column 'size' has non-numeric values\n"
    warning = b"WARNING: something else\n"
    assert without_notices(NOTICES + other + NOTICES + warning) == other + warning


def test_importing_tensorflow_through_the_cli_setup_prints_no_notice() -> None:
    script = (
        "import sys\n"
        "from fedpipe_app import tfnotices\n"
        "tfnotices.install()\n"
        "print('before', file=sys.stderr, flush=True)\n"
        "import tensorflow\n"
        "print('after', file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        check=True,
        timeout=300,
    )
    assert proc.stderr.decode().splitlines() == ["before", "after"], proc.stderr
