"""Parts of TensorFlow's and Keras' public API that fedpipe never uses, loaded only
when something uses them.

``import tensorflow`` (which imports Keras 3) executes, among its thousands of
modules, three groups nobody in a fedpipe command touches:

- ``keras.visualization`` (an image-gallery plot), which imports
  ``matplotlib.pyplot``;
- ``keras.wrappers`` (the scikit-learn estimators around a Keras model), which
  imports scikit-learn itself because it is installed (mlxtend needs it);
- ``tf.__internal__.distribute.combinations``, in the API and its ``compat.v2``
  mirror: TensorFlow's own test-parameter helpers, which import its test
  utilities.

Measured on the 2-core machine of docs/benchmarks.md, ``import tensorflow, keras``
in a fresh process: 3.97 s as shipped, 3.00 s with these deferred
(``benchmarks/bench_import.py --repeats 5``, medians, alternating; 2026-12-06).
:func:`install` gives those modules Python's own
:class:`importlib.util.LazyLoader`: the module object exists at once (the
``from package import name`` that binds it still works), its code runs the first
time one of its attributes is read, so a user's model that does use
``keras.wrappers`` gets the whole module then. Nothing else changes: no module
fedpipe or Keras executes while training is deferred, so the bits are the same.

Python 3.11's LazyLoader is not safe when two threads make the first access at
once; these modules are not read by fedpipe at all, and a user's code reads them
when its own module is imported (one thread).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

#: Modules whose code runs on first use rather than when their parent imports them.
DEFERRED = frozenset(
    {
        "keras.src.visualization",
        "keras.visualization",
        "keras.wrappers",
        "tensorflow._api.v2.__internal__.distribute.combinations",
        "tensorflow._api.v2.compat.v2.__internal__.distribute.combinations",
    }
)


class _Deferring(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`DEFERRED` as the other finders would, and
    wraps their loader in a :class:`~importlib.util.LazyLoader`."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def install(names: frozenset[str] = DEFERRED) -> None:
    """Defer the modules ``names`` for the rest of this process (once; those
    already imported stay as they are)."""
    if any(isinstance(f, _Deferring) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Deferring(names))
