"""The warm worker behind ``fedpipe stage`` (the client:
:mod:`fedpipe_app.stageclient`).

One process per project and environment, started by the first ``fedpipe stage``
that finds none. It runs one stage at a time, each through the same
``fedpipe_app.cli.main`` a fresh process would run, with the client's stdin, stdout
and stderr on its own descriptors 0-2 for the length of the stage, in the client's
working directory; what it keeps between stages is what ``fedpipe run`` keeps
between its stages in one process: the imported modules, the Prefect client, the
compiled models and loaded arrays of :mod:`fedpipe.model.process` (keyed by what
they were made from).

It exits (removing its socket) after ``$FEDPIPE_WARM_IDLE`` seconds without a
stage, once the ``dvc`` process that ran its last stage has ended, after a stage
that did not exit 0 (a process that saw an error or an interrupt is not reused),
when asked to (:func:`fedpipe_app.stageclient.stop_workers`), or on SIGTERM; and it
refuses a stage (the client then starts a new worker) when a Python file it has
imported changed since.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from fedpipe_app import stageclient

ACCEPT_POLL_S = 0.5  # how often an idle worker checks whether to exit
_EXIT_SIGINT = 128 + signal.SIGINT  # fedpipe_app.cli's status after Ctrl-C


class _Stop(SystemExit):
    """SIGTERM to an idle worker: exit cleanly."""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise _Stop(0)


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} worker {os.getpid()}: {message}", file=sys.stderr, flush=True)


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def run_cli(argv: list[str]) -> int:
    """``fedpipe ARGV`` as the ``fedpipe`` script runs it: its exit status, and on
    an exception nobody caught, the traceback on stderr and status 1."""
    from fedpipe_app import cli

    sys.argv = ["fedpipe", *argv]
    try:
        return int(cli.main(argv))
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _EXIT_SIGINT
    except BaseException:  # noqa: BLE001 - what the interpreter would print
        traceback.print_exc()
        return 1


class Worker:
    """Serve stages on the unix socket ``path`` for clients of ``key``."""

    def __init__(self, path: Path, key: str, *, idle: float) -> None:
        self.path = path
        self.key = key
        self.idle = idle
        self.home = os.getcwd()
        self.files: dict[str, tuple[int, int, int] | None] = {}
        self.owner: int | None = None
        self.inode: int | None = None

    # --- the loop -----------------------------------------------------------

    def serve(self) -> None:
        """Accept stages until a reason to exit comes up."""
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        self.inode = os.stat(self.path).st_ino
        listener.listen(16)
        listener.settimeout(ACCEPT_POLL_S)
        _log(f"started for {self.home} (idle timeout {self.idle:g} s)")
        self._note_modules()
        reason: str | None = None
        last = time.monotonic()
        try:
            while reason is None:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    reason = self._reason_to_exit(last)
                    continue
                conn.settimeout(None)
                with conn:
                    reason = self._serve_one(conn)
                last = time.monotonic()
        except _Stop:
            reason = "SIGTERM"
        except KeyboardInterrupt:
            reason = "SIGINT"
        finally:
            self._close(listener)
            _log(f"exiting: {reason}")

    def _reason_to_exit(self, last: float) -> str | None:
        if time.monotonic() - last >= self.idle:
            return f"no stage for {self.idle:g} s"
        if self.owner is not None and not stageclient.alive(self.owner):
            return f"dvc (pid {self.owner}) ended"
        signature = _signature(str(self.path))
        if signature is None or signature[2] != self.inode:
            return f"{self.path} was removed"
        return None

    def _close(self, listener: socket.socket) -> None:
        """Remove the socket (if still ours), refuse whoever already connected."""
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self.inode:
                self.path.unlink()
        listener.setblocking(False)
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                break
            with conn:
                with contextlib.suppress(OSError):
                    _send(conn, {"refused": "exiting"})
        listener.close()

    # --- one stage --------------------------------------------------------------

    def _serve_one(self, conn: socket.socket) -> str | None:
        """Serve one connection; a reason to exit afterwards, or None."""
        try:
            message, fds = _receive(conn)
        except (OSError, ValueError):  # a client gone, or not a client
            return None
        try:
            verdict = self._admit(conn, message, fds)
        except OSError:
            verdict = "gone"
        if verdict != "accepted":
            for fd in fds:
                os.close(fd)
            return None if verdict in ("refused", "gone") else verdict
        assert message is not None
        self.owner = message.get("owner")
        code = self._run(conn, message, fds)
        # logged before the client hears: whoever reads the log once the client
        # has returned finds the stage there
        _log(f"fedpipe {' '.join(message['argv'])}: exit {code}")
        with contextlib.suppress(OSError):
            _send(conn, {"exit": code})
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        self._note_modules()
        return None if code == 0 else f"the stage exited {code}"

    def _admit(self, conn: socket.socket, message: dict | None, fds: list[int]) -> str:
        """``accepted`` (told the client so), ``refused``, ``gone`` or a reason
        to exit."""
        if message is None:
            return "gone"
        if message.get("stop"):
            _send(conn, {"stopping": os.getpid()})
            return "asked to stop"
        if message.get("key") != self.key or len(fds) != 3:
            _send(conn, {"refused": "another project or environment"})
            return "refused"
        changed = self._changed_file()
        if changed is not None:
            _send(conn, {"refused": f"{changed} changed"})
            return f"{changed} changed since it was imported"
        _send(conn, {"accepted": os.getpid()})
        return "accepted"

    def _run(self, conn: socket.socket, message: dict, fds: list[int]) -> int:
        """The stage on the client's descriptors, in its directory; its status."""
        saved = [os.dup(n) for n in (0, 1, 2)]
        running = threading.Event()
        lock = threading.Lock()
        watcher = threading.Thread(
            target=_watch, args=(conn, running, lock), daemon=True
        )
        code = 1
        try:
            for n, fd in enumerate(fds):
                os.dup2(fd, n)
                os.close(fd)
            sys.stdout.reconfigure(line_buffering=sys.stdout.isatty())
            _set_env(message.get("env") or {})
            os.chdir(message["cwd"])
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            running.set()
            watcher.start()
            code = run_cli(list(message["argv"]))
        except KeyboardInterrupt:  # a signal passed on just before or after
            code = _EXIT_SIGINT
        finally:
            with lock:
                running.clear()
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # drops one still pending
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            for n, fd in enumerate(saved):
                os.dup2(fd, n)
                os.close(fd)
            sys.stdout.reconfigure(line_buffering=False)
            os.chdir(self.home)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, _stop_on_sigterm)
        return code

    # --- has the code changed? -----------------------------------------------------

    def _note_modules(self) -> None:
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and path not in self.files:
                self.files[path] = _signature(path)

    def _changed_file(self) -> str | None:
        for path, signature in self.files.items():
            if _signature(path) != signature:
                return path
        return None


def _watch(conn: socket.socket, running: threading.Event, lock: threading.Lock) -> None:
    """Pass the client's signals on to the stage; a client gone stops it too."""
    buffer = b""
    while True:
        try:
            chunk = conn.recv(4096)
        except OSError:
            chunk = b""
        if not chunk:
            with lock:
                if running.is_set():
                    os.kill(os.getpid(), signal.SIGTERM)
            return
        buffer += chunk
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            signum = json.loads(line).get("signal")
            with lock:
                if running.is_set() and signum in (signal.SIGINT, signal.SIGTERM):
                    os.kill(os.getpid(), signum)
                elif running.is_set() and signum == signal.SIGHUP:
                    os.kill(os.getpid(), signal.SIGTERM)


def _set_env(values: dict[str, str | None]) -> None:
    for name in stageclient.VOLATILE_ENV:
        value = values.get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _receive(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """The client's request and the descriptors sent with it."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    while data and not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data.strip():
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)


def main() -> None:
    """The worker's entry point, run as
    ``python -P -c 'from fedpipe_app.warm import main; main()' SOCKET KEY SYS_PATH``."""
    path, key, search_path = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    sys.path[:] = search_path
    stageclient.IN_WORKER = True
    Worker(Path(path), key, idle=stageclient.idle_seconds()).serve()
