"""``fedpipe stage NAME`` as a thin client of a warm per-project worker.

``dvc repro`` starts one ``fedpipe stage`` process per stage; each would import
TensorFlow, Prefect and Great Expectations and open a Prefect client again. Instead
the command hands the stage to a worker process (:mod:`fedpipe_app.warm`) that stays up
between the stages of one ``dvc repro`` and runs each stage exactly as a fresh
process would (the same ``fedpipe_app.cli.main``), keeping what is already imported
and compiled.

How it fits together:

- one worker per project directory, Python environment and environment variables
  (the *key*); its unix socket is ``<runtime dir>/<key>.sock``, the runtime dir
  ``$FEDPIPE_WARM_DIR`` or ``$XDG_RUNTIME_DIR/fedpipe`` or
  ``<tmp>/fedpipe-<uid>`` (mode 0700, checked);
- the client sends the stage's arguments and its own stdin/stdout/stderr (the file
  descriptors themselves, ``SCM_RIGHTS``), so the stage writes where a fresh
  process would, a terminal stays a terminal; it returns the stage's exit code;
- Ctrl-C (SIGINT) or SIGTERM of the client is passed on to the stage, which stops
  with the same message and exit code as in a process of its own; a client that
  dies stops its stage too;
- the first client starts the worker (under a file lock, so racing clients start
  one); the worker exits after ``$FEDPIPE_WARM_IDLE`` seconds without a stage
  (default 60), once the ``dvc`` process that ran its last stage has ended, after
  a stage that failed, and before running a stage if a Python file it has
  imported changed;
- ``FEDPIPE_WARM=0`` turns it off; if no worker can be reached or started, the
  stage runs in this process as before.

Only the standard library is imported here: the client starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from fedpipe.core.errors import FedpipeError

ENABLE_ENV = "FEDPIPE_WARM"  # 0/false/no/off: every stage in its own process
DIR_ENV = "FEDPIPE_WARM_DIR"  # where sockets, locks and worker logs live
IDLE_ENV = "FEDPIPE_WARM_IDLE"  # seconds a worker waits for the next stage
DEFAULT_IDLE_S = 60.0
START_TIMEOUT_S = 30.0  # for a new worker's socket to answer
MAX_LOG_BYTES = 1_000_000  # a worker's log starts afresh beyond this
# per-invocation variables: not part of a worker's key, set for each stage
VOLATILE_ENV = ("DVC_STAGE", "_", "SHLVL", "OLDPWD", "PWD", "COLUMNS", "LINES")
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish", "busybox"}
_OFF = {"0", "false", "no", "off"}
# Set by the worker: a stage there runs in its process, never through a client.
IN_WORKER = False


class WorkerUnavailable(FedpipeError, RuntimeError):
    """No worker could be reached or started (the stage runs in-process)."""


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``fedpipe stage`` goes through a warm worker."""
    if IN_WORKER or not hasattr(socket, "send_fds"):
        return False
    return environ.get(ENABLE_ENV, "1").strip().lower() not in _OFF


def idle_seconds(environ: Mapping[str, str] = os.environ) -> float:
    """``$FEDPIPE_WARM_IDLE`` (default 60 s)."""
    raw = environ.get(IDLE_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_IDLE_S
    except ValueError:
        return DEFAULT_IDLE_S


def runtime_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder of the workers' sockets; created private (0700) if missing.

    Raises
    ------
    WorkerUnavailable
        It exists but belongs to someone else or others may write into it.
    """
    if environ.get(DIR_ENV):
        path = Path(environ[DIR_ENV])
    elif environ.get("XDG_RUNTIME_DIR"):
        path = Path(environ["XDG_RUNTIME_DIR"]) / "fedpipe"
    else:
        path = Path(tempfile.gettempdir()) / f"fedpipe-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WorkerUnavailable(
            f"{path} is not a private folder of this user (owner {st.st_uid}, "
            f"mode {oct(st.st_mode & 0o777)})"
        )
    return path


def worker_key(
    project: Path, *, verbose: bool, environ: Mapping[str, str] = os.environ
) -> str:
    """What a worker must share with a stage to run it: the project folder, the
    interpreter and its import path, the environment (except
    :data:`VOLATILE_ENV`) and ``-v`` (Prefect's logging is set up once)."""
    env = {k: v for k, v in environ.items() if k not in VOLATILE_ENV}
    blob = json.dumps(
        {
            "project": str(project.resolve()),
            "python": sys.executable,
            "path": sys.path,
            "env": sorted(env.items()),
            "verbose": verbose,
        }
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def stage_argv(name: str, round_: int | None, *, flags: Sequence[str]) -> list[str]:
    """The ``fedpipe`` arguments the worker runs, e.g. ``stage round 3 -q``."""
    return ["stage", name, *([str(round_)] if round_ is not None else []), *flags]


def owner_pid(environ: Mapping[str, str] = os.environ) -> int | None:
    """The ``dvc`` process that runs this stage (DVC sets ``DVC_STAGE``), found
    through ``/proc`` past a shell between them; None outside DVC or off Linux."""
    if "DVC_STAGE" not in environ:
        return None
    pid = os.getppid()
    for _ in range(3):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if comm not in _SHELLS:
            return pid
        pid = int(stat.rpartition(")")[2].split()[1])  # field 4: the parent
    return None


def run_warm(argv: list[str], *, verbose: bool) -> int | None:
    """Run ``fedpipe ARGV`` (a stage) in the project's warm worker.

    Returns the stage's exit code, or None when no worker could be used (nothing
    has run then: run the stage in this process).
    """
    project = Path.cwd()
    try:
        folder = runtime_dir()
        key = worker_key(project, verbose=verbose)
        conn = _connect_or_start(folder, key, project)
    except (WorkerUnavailable, OSError) as exc:
        print(
            f"fedpipe: no warm worker ({exc}); running the stage in this process",
            file=sys.stderr,
            flush=True,
        )
        return None
    return _run_on(conn, argv, key)


# --- the connection -----------------------------------------------------------


def socket_path(folder: Path, key: str) -> Path:
    return folder / f"{key}.sock"


def _try_connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class _Refused(Exception):
    """The worker would not take the stage (it is going away): try another."""


def _connect_or_start(folder: Path, key: str, project: Path) -> socket.socket:
    path = socket_path(folder, key)
    sock = _try_connect(path)
    if sock is not None:
        return sock
    with _locked(folder / f"{key}.lock"):
        sock = _try_connect(path)  # started by a client we waited for
        if sock is not None:
            return sock
        return _start_worker(folder, key, project)


def _start_worker(folder: Path, key: str, project: Path) -> socket.socket:
    """Start the worker for ``key`` (the caller holds its lock); connect to it."""
    path = socket_path(folder, key)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # left by a worker that was killed
    log_path = folder / f"{key}.log"
    big = log_path.is_file() and log_path.stat().st_size > MAX_LOG_BYTES
    log = open(log_path, "wb" if big else "ab")  # noqa: SIM115 - for the child
    with log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-P",  # no project folder at the front of sys.path: it is set below
                "-c",
                "from fedpipe_app.warm import main; main()",
                str(path),
                key,
                json.dumps(sys.path),
            ],
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # the terminal's Ctrl-C goes to clients only
            close_fds=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        sock = _try_connect(path)
        if sock is not None:
            return sock
        if proc.poll() is not None:
            raise WorkerUnavailable(
                f"the worker exited at start ({proc.returncode}); see "
                f"{folder / (key + '.log')}"
            )
        time.sleep(0.02)
    proc.kill()
    raise WorkerUnavailable(f"the worker did not answer within {START_TIMEOUT_S} s")


def _send(conn: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(conn, [data], list(fds))
    else:
        conn.sendall(data)


class _Lines:
    """JSON messages, one per line, from a socket."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def next(self) -> dict | None:
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


def _request(argv: list[str], key: str) -> dict:
    env = {k: os.environ.get(k) for k in VOLATILE_ENV}
    return {
        "argv": argv,
        "cwd": os.getcwd(),
        "key": key,
        "env": env,
        "owner": owner_pid(),
    }


def _run_on(conn: socket.socket, argv: list[str], key: str) -> int | None:
    """Hand the stage over; pass signals on; return its exit code.

    A worker that refuses (it is exiting: idle, or its code changed) is replaced
    by a new one, twice at most.
    """
    for attempt in range(3):
        try:
            with conn:
                return _handover(conn, argv, key)
        except _Refused:
            if attempt == 2:
                break
            try:
                conn = _connect_or_start(runtime_dir(), key, Path.cwd())
            except (WorkerUnavailable, OSError):
                break
    print(
        "fedpipe: the warm worker refused the stage; running it in this process",
        file=sys.stderr,
        flush=True,
    )
    return None


def _handover(conn: socket.socket, argv: list[str], key: str) -> int:
    lines = _Lines(conn)
    try:
        _send(conn, _request(argv, key), fds=(0, 1, 2))
        reply = lines.next()
    except OSError:
        raise _Refused from None
    if reply is None or "refused" in reply:
        raise _Refused
    # from here on the stage runs in the worker: signals go there, those this
    # process would have reacted to (one started with SIGINT ignored ignores it)
    previous = {
        signum: signal.signal(signum, _forwarder(conn))
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(signum) != signal.SIG_IGN
    }
    try:
        done = lines.next()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if done is None or "exit" not in done:
        print(
            f"error: the fedpipe worker (pid {reply.get('accepted')}) stopped "
            "during the stage; nothing was recorded",
            file=sys.stderr,
        )
        return 1
    return int(done["exit"])


def _forwarder(conn: socket.socket):  # type: ignore[no-untyped-def]
    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            _send(conn, {"signal": signum})

    return forward


# --- stopping workers (tests, benchmarks) ---------------------------------------


def stop_workers(folder: Path, *, timeout: float = 30.0) -> list[int]:
    """Ask every worker with a socket in ``folder`` to exit; wait for them.

    A worker busy with a stage stops after it. Returns the workers' pids. Sockets
    nobody answers on (a killed worker's) are removed.
    """
    pids = []
    for path in sorted(folder.glob("*.sock")):
        sock = _try_connect(path)
        if sock is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        with sock:
            try:
                _send(sock, {"stop": True})
                reply = _Lines(sock).next()
            except OSError:
                continue
        if reply and reply.get("stopping"):
            pids.append(int(reply["stopping"]))
    deadline = time.monotonic() + timeout
    for pid in pids:
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    return pids


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"
