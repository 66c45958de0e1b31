"""fedpipe.app.deferred: the API modules fedpipe never uses are not executed by
``import tensorflow, keras``, and still work when a user's code reads them.

Each case runs in a fresh interpreter (what is imported is the point)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fedpipe.app import deferred

pytestmark = pytest.mark.filterwarnings("ignore")

PROBE = """
import json, sys
if {install}:
    from fedpipe.app import deferred
    deferred.install()
import tensorflow as tf, keras
seen = {{
    "sklearn": "sklearn" in sys.modules,
    "tf_combinations": "tensorflow.python.distribute.combinations" in sys.modules,
}}
{then}
print(json.dumps(seen))
"""


def probe(*, install: bool, then: str = "") -> dict:
    code = PROBE.format(install=install, then=then)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_tensorflow_and_keras_import_without_the_deferred_modules() -> None:
    # as shipped by TensorFlow and Keras, both run at import (what is saved) ...
    assert probe(install=False) == {"sklearn": True, "tf_combinations": True}
    # ... and with fedpipe's finder neither does
    assert probe(install=True) == {"sklearn": False, "tf_combinations": False}


def test_a_deferred_module_works_when_it_is_used() -> None:
    then = """
wrapper = keras.wrappers.SKLearnClassifier
seen["wrapper"] = wrapper.__name__
seen["sklearn_now"] = "sklearn" in sys.modules
env = tf.__internal__.distribute.combinations.env
seen["combinations_env"] = callable(env)
"""
    got = probe(install=True, then=then)
    assert got["wrapper"] == "SKLearnClassifier"
    assert got["sklearn_now"] and got["combinations_env"]


def test_install_is_once_and_the_cli_installs_it() -> None:
    code = """
import sys
from fedpipe.app import cli, deferred
cli._quiet_env()
deferred.install()
print(sum(isinstance(f, deferred._Deferring) for f in sys.meta_path))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "1"


def test_every_deferred_name_exists_in_the_pinned_versions() -> None:
    """A name that no longer exists (a TensorFlow or Keras upgrade moved it)
    would silently defer nothing: each must still be found."""
    import importlib.util

    for name in sorted(deferred.DEFERRED):
        assert importlib.util.find_spec(name) is not None, name
