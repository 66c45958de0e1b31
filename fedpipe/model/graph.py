"""Compiling fedpipe's own TensorFlow functions (training, prediction, probes).

Every ``tf.function`` fedpipe traces is written in graph-ready TensorFlow: loops
are ``tf.while_loop``, branches on tensors are ``tf.cond`` or Keras ops, and a
Python ``if`` looks only at Python values (a setting, ``None``). AutoGraph,
which ``tf.function`` applies by default, rewrites the Python source of the
function and of everything it calls into graph ops before tracing; for these
functions it finds nothing to rewrite and costs most of the trace: a new runner's
first fit of a small MLP took 2.1-3.1 s with it and 0.63-0.67 s without (small_cnn
3.9 against 1.8 s; a busy machine), the same bits (tests/test_graph.py, and every
variant of scripts/compare_trees.py that was compared). Without AutoGraph, a
Python branch or loop on a tensor fails when the function is traced (``Using a
symbolic tf.Tensor as a Python bool is not allowed``), never silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


def compiled(fn: Callable[..., Any], **options: Any) -> Any:
    """``tf.function(fn, **options)`` without AutoGraph (see the module)."""
    return tf.function(fn, autograph=False, **options)
