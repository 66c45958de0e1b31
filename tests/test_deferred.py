"""fedpipe_app.deferred: the API modules fedpipe never uses are not executed by
``import tensorflow, keras``, and still work when a user's code reads them.

Each case runs in a fresh interpreter (what is imported is the point)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fedpipe_app import deferred

pytestmark = pytest.mark.filterwarnings("ignore")

PROBE = """
import json, sys
if {install}:
    from fedpipe_app import deferred
    deferred.install()
import tensorflow as tf, keras
seen = {{
    "sklearn": "sklearn" in sys.modules,
    "tf_combinations": "tensorflow.python.distribute.combinations" in sys.modules,
    "pyplot": "matplotlib.pyplot" in sys.modules,
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
    shipped = probe(install=False)
    assert shipped == {"sklearn": True, "tf_combinations": True, "pyplot": True}
    # ... and with fedpipe's finder none does
    deferred = probe(install=True)
    assert deferred == {"sklearn": False, "tf_combinations": False, "pyplot": False}


def test_a_deferred_module_works_when_it_is_used() -> None:
    then = """
wrapper = keras.wrappers.SKLearnClassifier
seen["wrapper"] = wrapper.__name__
seen["sklearn_now"] = "sklearn" in sys.modules
env = tf.__internal__.distribute.combinations.env
seen["combinations_env"] = callable(env)
seen["gallery"] = callable(keras.visualization.plot_image_gallery)
seen["pyplot_now"] = "matplotlib.pyplot" in sys.modules
"""
    got = probe(install=True, then=then)
    assert got["wrapper"] == "SKLearnClassifier"
    assert got["sklearn_now"] and got["combinations_env"]
    assert got["gallery"] and got["pyplot_now"]


def test_install_is_once_and_the_cli_installs_it() -> None:
    code = """
import sys
from fedpipe_app import cli, deferred
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


def test_the_run_imports_no_privacy_accountant_until_a_run_has_privacy() -> None:
    """dp_accounting (scipy's signal and optimize) is imported by the accountant,
    which the privacy rounds import when they first spend."""
    code = """
import json, sys
from fedpipe_app import deferred, tfnotices
tfnotices.install()
deferred.install()
import flows.pipeline
before = "dp_accounting" in sys.modules
from fedpipe.config.privacy import Privacy
from fedpipe.federation.privacy.rounds import spend
eps = spend(Privacy("central", 1.0, 1.0, 1e-5, 10, 5), 1, lambda k: range(5))
print(json.dumps({"before": before, "after": "dp_accounting" in sys.modules,
                  "eps": eps}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["before"] is False and got["after"] is True
    assert 0 < got["eps"] < float("inf")
