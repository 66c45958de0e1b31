"""How fedpipe's flow runs reach a Prefect server (without a server per process).

Prefect with no ``PREFECT_API_URL`` starts a temporary server inside every process,
which costs 12-30 s each time and shows nothing in a UI afterwards. fedpipe instead
uses one long-lived local server:

1. ``PREFECT_API_URL`` set (environment or Prefect profile): use it as it is.
2. Otherwise, if a server answers at http://127.0.0.1:4200/api: use it.
3. Otherwise start one in the background (``prefect server start --background``,
   about 20 s, once per machine boot) and use it. It keeps running after the run,
   so the UI at http://127.0.0.1:4200 shows every run; ``prefect server stop`` ends it.

This must run before ``prefect`` is imported: Prefect reads its settings at import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4200
STARTUP_TIMEOUT_S = 90.0


class PrefectServerError(RuntimeError):
    """No Prefect API could be reached or started."""


def api_url(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    """The API address of a local server."""
    return f"http://{host}:{port}/api"


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    """True when ``<url>/health`` answers 200."""
    try:
        with urllib.request.urlopen(
            f"{url.rstrip('/')}/health", timeout=timeout
        ) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


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


def start_background_server(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    """Start ``prefect server start --background`` and wait until it answers."""
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
    proc = subprocess.run(cmd, env=server_env(), capture_output=True, text=True)
    if "already running" in proc.stdout + proc.stderr and not is_healthy(url):
        # a PID file left by a server that no longer runs (a reboot, a kill -9):
        # `prefect server stop` clears it; then start for real
        subprocess.run(
            [_prefect_exe(), "server", "stop"],
            env=server_env(),
            capture_output=True,
            text=True,
        )
        proc = subprocess.run(cmd, env=server_env(), capture_output=True, text=True)
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
    url = configured_url()
    if url:
        if not is_healthy(url):
            raise PrefectServerError(
                f"PREFECT_API_URL={url} does not answer; start that server or unset "
                "PREFECT_API_URL to let fedpipe use a local one"
            )
    else:
        url = api_url()
        if not is_healthy(url):
            if not start:
                raise PrefectServerError(f"no Prefect server at {url}")
            log(
                f"starting a local Prefect server at "
                f"http://{DEFAULT_HOST}:{DEFAULT_PORT} "
                "(once; `prefect server stop` ends it) ..."
            )
            url = start_background_server()
    os.environ["PREFECT_API_URL"] = url
    return url
