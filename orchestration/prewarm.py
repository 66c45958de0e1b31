"""A stage's library imported in a process of its own while the run starts.

A run that validates its data (a project's first run, a new data set) imports
Great Expectations for the validate stage: about 2-3 s of one core, spent while
the other core idles, after the run's own imports (TensorFlow, Keras, Prefect:
about 3 s more) have been paid one after the other. :func:`start` begins that
import at once in a spawned process (:class:`WarmProcess`), beside the run's own
imports, its Prefect flow run and the data stages before validate; :func:`call`
then runs the stage's function there and returns its value. One call per
process: the process ends with it.

It starts only while a core is free beside the run's (:func:`enabled`). What a
person sees does not depend on it:

- the function's value comes back pickled; its files are written by the same
  code to the same paths (the working folder is the run's);
- if the function raised, or the process died, the call is made again in the
  run's own process, so an error is raised as it always was (its message, its
  traceback) and nothing is lost but the time of the attempt;
- the process ignores Ctrl-C (the run decides; :meth:`WarmProcess.close` ends
  it) and its own output goes nowhere; it ends when the run's end of the pipe
  closes, so a run killed outright leaves no process behind.

Where no process was started (``dvc repro``'s stages, a test calling a flow, a run
with the validate stage up to date), :func:`call` is a plain call.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

# FEDPIPE_PREWARM: "auto" (the default: while a core is free), 0/false/no/off
# (never: every stage in the run's process) or 1/true/yes/on (always)
ENABLE_ENV = "FEDPIPE_PREWARM"
_OFF = {"0", "false", "no", "off"}
_ON = {"1", "true", "yes", "on"}
VALIDATE = "validate"  # the validate stage's call (tasks/data.py)

_started: dict[str, WarmProcess] = {}


def _serve(conn: Connection, warm_up: Callable[[], object]) -> None:
    """The spawned process: ``warm_up()``, then one call, its outcome sent back;
    then it ends at once (``os._exit``: it holds nothing to flush or release)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # what this process makes with multiprocessing (tqdm's lock, in Great
    # Expectations' progress bars) takes "fork" semaphores, unlinked as they are
    # made: ending it at any moment leaves none for the resource tracker to warn of
    multiprocessing.set_start_method("fork", force=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        warm_up()
        fn, args, kwargs = conn.recv()
        outcome = (True, fn(*args, **kwargs))
    except (EOFError, OSError):  # the run ended (or was killed) first
        os._exit(0)
    except BaseException:  # noqa: BLE001 - the call is made again in the run
        outcome = (False, None)
    try:
        conn.send(outcome)
    except Exception:  # noqa: BLE001 - unpicklable, or the run is gone
        with contextlib.suppress(OSError):
            conn.send((False, None))
    os._exit(0)


class WarmProcess:
    """One spawned process that runs ``warm_up()`` now and one call later."""

    def __init__(self, warm_up: Callable[[], object]) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, warm_up), name="fedpipe-prewarm", daemon=True
        )
        self._process.start()
        child.close()

    def call(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> tuple[bool, Any]:
        """``(True, fn(*args, **kwargs))`` computed in the process, or
        ``(False, None)`` if it raised or the process is gone; the process ends."""
        try:
            self._conn.send((fn, args, kwargs))
            return self._conn.recv()
        except (EOFError, OSError):
            return False, None
        finally:
            self.close()

    def close(self) -> None:
        """End the process (at once if it is still busy)."""
        self._conn.close()
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(timeout=10)


def enabled() -> bool:
    """Whether :func:`start` starts a process: always with ``FEDPIPE_PREWARM=1``,
    never with ``0``, by default only while a core is free beside the run's own
    (:func:`cores_idle` at least :data:`IDLE_NEEDED`; where that cannot be read,
    the last minute's load average at most the cores less one). The process
    imports again what the run has imported too (numpy, pandas, SciPy): about a
    second more CPU in all, a gain only where it runs beside the run, not in its
    place (a test suite's workers on every core)."""
    setting = os.environ.get(ENABLE_ENV, "auto").strip().lower()
    if setting in _OFF or setting in _ON:
        return setting in _ON
    idle = cores_idle()
    if idle is not None:
        return idle >= IDLE_NEEDED
    if not hasattr(os, "getloadavg"):  # not measured here: not free
        return False
    return os.getloadavg()[0] <= (os.cpu_count() or 1) - 1


IDLE_NEEDED = 1.75
"""Cores idle (of :func:`cores_idle`) for a process beside the run: the run's own
core (it waits while they are counted) and most of another."""


def cores_idle(window: float = 0.1) -> float | None:
    """How many cores' worth of time the machine left idle over the next
    ``window`` seconds (Linux's ``/proc/stat``); None where it cannot be read. The
    last minute's load average still counts a command that has just ended (an
    install, the run before), this does not."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + waiting for I/O

    try:
        all0, idle0 = sample()
        time.sleep(window)
        all1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if all1 <= all0:
        return None
    return (os.cpu_count() or 1) * (idle1 - idle0) / (all1 - all0)


def start(name: str, warm_up: Callable[[], object]) -> None:
    """Begin ``warm_up()`` (an import) in a process kept for the call ``name``."""
    if enabled() and name not in _started:
        _started[name] = WarmProcess(warm_up)


def call(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: in the process :func:`start` began for ``name``
    if there is one (then no more), else, or if that failed, in this process."""
    warm = _started.pop(name, None)
    if warm is not None:
        done, value = warm.call(fn, *args, **kwargs)
        if done:
            return value
    return fn(*args, **kwargs)


def start_validation() -> None:
    """:func:`start` the validate stage's process: Great Expectations imported."""
    start(VALIDATE, _import_validation)


def _import_validation() -> None:
    """In the process: what the validate stage imports (not imported here)."""
    from fedpipe.data.validation import validate_prepared_dir  # noqa: F401
    from fedpipe.data.validation.gx import import_gx

    import_gx()


def stop_all() -> None:
    """End every process not yet called (the run ends before their stage)."""
    while _started:
        _started.popitem()[1].close()
