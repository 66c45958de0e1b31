"""How fedpipe's flow runs reach a Prefect server (without a server per process).

Prefect with no ``PREFECT_API_URL`` starts a temporary server inside every process,
which costs 12-30 s each time and shows nothing in a UI afterwards. fedpipe instead
uses one long-lived local server:

1. ``PREFECT_API_URL`` set (environment or Prefect profile): use it as it is.
2. Otherwise, if a server answers at http://127.0.0.1:4200/api: use it (host and
   port are Prefect's own ``PREFECT_SERVER_API_HOST`` / ``PREFECT_SERVER_API_PORT``
   when set, as for ``prefect server start``).
3. Otherwise start one in the background (``prefect server start --background``,
   about 20 s, once per machine boot) and use it. It keeps running after the run,
   so the UI at http://127.0.0.1:4200 shows every run; ``prefect server stop`` ends it.
   A PID file left by a server that is gone (a reboot, a kill -9) is cleared first.

This must run before ``prefect`` is imported: Prefect reads its settings at import.

While a run goes, :class:`ServerWatch` asks the server's ``/health`` every 2 s. A
Prefect 3 client whose server stopped answering retries each call for about a
minute and the process then needs about 5 minutes to exit; training does not need
the server, but every stage's flow run does. So when the server has not answered
for :data:`LOST_AFTER_S` seconds the watch calls its ``on_lost`` hook, which ends
``fedpipe run`` with one line (:func:`server_lost_message`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from fedpipe.core.errors import FedpipeError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4200
STARTUP_TIMEOUT_S = 90.0
WATCH_EVERY_S = 2.0  # how often a run asks its server's /health
LOST_AFTER_S = 10.0  # connections refused for this long: the server is gone
SILENT_AFTER_S = 25.0  # no answer at all (a hung server, a lost network) this long


class PrefectServerError(FedpipeError, RuntimeError):
    """No Prefect API could be reached or started."""


def api_url(host: str | None = None, port: int | None = None) -> str:
    """The API address of a local server: ``host`` / ``port``, else Prefect's
    ``PREFECT_SERVER_API_HOST`` / ``PREFECT_SERVER_API_PORT``, else
    127.0.0.1:4200."""
    return f"http://{_host(host)}:{_port(port)}/api"


def _host(host: str | None = None) -> str:
    return host or os.environ.get("PREFECT_SERVER_API_HOST") or DEFAULT_HOST


def _port(port: int | None = None) -> int:
    raw = os.environ.get("PREFECT_SERVER_API_PORT", "")
    return port or (int(raw) if raw.isdigit() else DEFAULT_PORT)


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    """True when ``<url>/health`` answers 200."""
    return probe(url, timeout) == "ok"


def probe(url: str, timeout: float = 2.0) -> str:
    """``ok`` (``<url>/health`` answers 200), ``refused`` (nothing listens: the
    server is gone) or ``silent`` (no answer in time, or an error answer)."""
    try:
        with urllib.request.urlopen(
            f"{url.rstrip('/')}/health", timeout=timeout
        ) as resp:
            return "ok" if resp.status == 200 else "silent"
    except urllib.error.URLError as exc:
        refused = isinstance(exc.reason, ConnectionRefusedError)
        return "refused" if refused else "silent"
    except ConnectionRefusedError:
        return "refused"
    except (OSError, ValueError):
        return "silent"


def wait_healthy(url: str, timeout: float = STARTUP_TIMEOUT_S) -> None:
    """Block until the API at ``url`` answers, or raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_healthy(url):
            return
        time.sleep(0.5)
    raise PrefectServerError(
        f"Prefect API at {url} did not answer within {timeout:.0f} s"
    )


def _prefect_exe() -> str:
    beside = Path(sys.executable).with_name("prefect")
    return str(beside) if beside.exists() else (shutil.which("prefect") or "prefect")


def server_env() -> dict[str, str]:
    """Environment for a local server: analytics off (machines here are offline)."""
    env = dict(os.environ)
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT", "false")
    env.pop("PREFECT_API_URL", None)
    return env


def start_background_server(host: str | None = None, port: int | None = None) -> str:
    """Start ``prefect server start --background`` and wait until it answers."""
    return begin_background_server(host, port)()


def begin_background_server(
    host: str | None = None, port: int | None = None
) -> Callable[[], str]:
    """:func:`start_background_server` in two halves: ``prefect server start
    --background`` begins now; the function returned waits until it has started
    the server and the server answers (raising as that would), and returns the
    URL. What the caller does meanwhile (importing TensorFlow) overlaps the
    server's start."""
    host, port = _host(host), _port(port)
    url = api_url(host, port)
    cmd = [
        _prefect_exe(),
        "server",
        "start",
        "--background",
        "--host",
        host,
        "--port",
        str(port),
        "--analytics-off",
    ]
    # a session of its own: Prefect's --background server stays in the caller's
    # process group, so a Ctrl-C of the `fedpipe run` (or sweep) that started it
    # would also end the server that is meant to outlive it
    start = functools.partial(
        subprocess.Popen,
        cmd,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    begun = start()

    def started() -> str:
        return _wait_started(begun, start, cmd, url)

    return started


def _wait_started(
    begun: subprocess.Popen[str],
    start: Callable[[], subprocess.Popen[str]],
    cmd: list[str],
    url: str,
) -> str:
    """The second half of :func:`begin_background_server`."""
    out, err = begun.communicate()
    proc = subprocess.CompletedProcess(cmd, begun.returncode, out, err)
    if "already running" in proc.stdout + proc.stderr and not is_healthy(url):
        # a PID file left by a server that no longer runs (a reboot, a kill -9):
        # `prefect server stop` clears it; then start for real
        subprocess.run(
            [_prefect_exe(), "server", "stop"],
            env=server_env(),
            capture_output=True,
            text=True,
        )
        again = start()
        out, err = again.communicate()
        proc = subprocess.CompletedProcess(cmd, again.returncode, out, err)
    if proc.returncode != 0 and not is_healthy(url):
        raise PrefectServerError(
            f"could not start a Prefect server ({' '.join(cmd)}):\n"
            f"{proc.stdout}{proc.stderr}"
        )
    wait_healthy(url)
    return url


def configured_url() -> str | None:
    """``PREFECT_API_URL`` from the environment or the active Prefect profile."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
    profiles = home / "profiles.toml"
    if not profiles.is_file():
        return None
    import tomllib

    data = tomllib.loads(profiles.read_text())
    active = os.environ.get("PREFECT_PROFILE") or data.get("active", "ephemeral")
    return data.get("profiles", {}).get(active, {}).get("PREFECT_API_URL") or None


def ensure_api(*, start: bool = True, log=print) -> str:  # type: ignore[no-untyped-def]
    """Make sure flow runs in this process report to a long-lived Prefect API.

    Sets ``PREFECT_API_URL`` in this process's environment and returns it.
    """
    return begin_api(start=start, log=log)()


def begin_api(*, start: bool = True, log=print) -> Callable[[], str]:  # type: ignore[no-untyped-def]
    """:func:`ensure_api` in two halves: ``PREFECT_API_URL`` is set now (Prefect
    reads it when imported), a local server that must be started is begun
    (:func:`begin_background_server`); the function returned waits until the
    API answers (raising :class:`PrefectServerError` as :func:`ensure_api`
    would) and returns its URL. The caller imports Prefect and TensorFlow in
    between: on a machine whose server is not up yet, the two overlap."""
    url = configured_url()
    if url:
        if not is_healthy(url):
            raise PrefectServerError(
                f"PREFECT_API_URL={url} does not answer; start that server or unset "
                "PREFECT_API_URL to let fedpipe use a local one"
            )
        os.environ["PREFECT_API_URL"] = url
        return lambda: url
    url = api_url()
    if is_healthy(url):
        os.environ["PREFECT_API_URL"] = url
        return lambda: url
    if not start:
        raise PrefectServerError(f"no Prefect server at {url}")
    log(
        f"starting a local Prefect server at {url.removesuffix('/api')} "
        "(once; `prefect server stop` ends it) ..."
    )
    started = begin_background_server()
    os.environ["PREFECT_API_URL"] = url
    return started


class ServerWatch:
    """Asks ``url``'s ``/health`` from a daemon thread while a ``with`` block runs.

    When its connections were refused for ``lost_after`` seconds (nothing
    listens: the server process is gone), or nothing answered for ``silent_after``
    seconds (a hung server), calls ``on_lost(url, silent_s)`` once, from that
    thread (the main thread is then typically inside a Prefect client call that
    retries for a minute). A slow answer is not a lost server: each probe waits
    up to ``interval + 1`` seconds, and a busy server gets the longer grace.
    """

    def __init__(
        self,
        url: str,
        on_lost: Callable[[str, float], None],
        *,
        interval: float = WATCH_EVERY_S,
        lost_after: float = LOST_AFTER_S,
        silent_after: float = SILENT_AFTER_S,
    ) -> None:
        self.url = url
        self.on_lost = on_lost
        self.interval = interval
        self.lost_after = lost_after
        self.silent_after = silent_after
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="prefect-server-watch", daemon=True
        )

    def _watch(self) -> None:
        answered = time.monotonic()
        while not self._stop.wait(self.interval):
            said = probe(self.url, timeout=self.interval + 1.0)
            if said == "ok":
                answered = time.monotonic()
                continue
            silent = time.monotonic() - answered
            grace = self.lost_after if said == "refused" else self.silent_after
            if silent >= grace:
                if not self._stop.is_set():
                    self.on_lost(self.url, silent)
                return

    def __enter__(self) -> ServerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 2.0)


def server_lost_message(url: str, silent_s: float, last_round: int | None) -> str:
    """The one line a run stopped by a lost Prefect server ends with."""
    where = (
        f"round {last_round} is the last recorded round (dvc.lock)"
        if last_round is not None
        else "no round recorded yet (dvc.lock)"
    )
    return (
        f"the Prefect server at {url} stopped answering (nothing for "
        f"{silent_s:.0f} s): run stopped; {where}; `fedpipe run` resumes from there "
        "once a Prefect server answers"
    )
