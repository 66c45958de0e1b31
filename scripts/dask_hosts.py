"""Machines on this machine: a TLS Dask cluster across network namespaces.

Each "host" is a Linux network namespace with its own loopback and one address
on a private /24 (``10.231.X.0/24``, X the first not already used here), joined
by a bridge in the root namespace that also holds ``10.231.X.254``, so
``fedpipe run`` started as usual (root namespace) reaches every host. Nothing
outside this machine is contacted: the hosts have no route but their /24. The
file system is shared, as the NFS mount of docs/scaling.md would be: the workers
open the project at the same path.

Names are unique per invocation (``fpd<pid>``, the namespaces ``fpd<pid>-a``,
``-b``, ...), so parallel runs never collide; everything is torn down on exit,
also on failure (a context manager and ``atexit``).

The certificates are made with the openssl commands of docs/scaling.md, the
scheduler and the workers started with its ``dask`` commands: the scheduler in
host a, one single-threaded worker in each other host, mutual TLS required.

Usage (root; Ctrl-C tears everything down)::

    python scripts/dask_hosts.py --workers 2 --project /path/to/project

It prints the ``runtime.*`` settings to give the project, e.g.
``fedpipe run -S runtime.runner=dask -S runtime.dask_address=tls://10.231.0.1:8786
...``. The test ``tests/e2e/test_dask_hosts.py`` uses :class:`Hosts` and
:class:`TlsCluster` from here.
"""

from __future__ import annotations

import argparse
import atexit
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The private range the hosts' /24 is taken from (10.231.X.0/24).
NET = "10.231"
BIN = Path(sys.executable).parent
LOCK = Path("/run/lock/fedpipe-dask-hosts.lock")
SCHEDULER_PORT = 8786


class HostsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, refused)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise HostsUnavailable(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def probe() -> str | None:
    """Why the hosts cannot be made here, or None when they can (a namespace is
    made and removed)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if shutil.which("openssl") is None:
        return "no `openssl` command (the certificates are made with it)"
    name = f"fpdprobe{os.getpid()}"
    proc = _ip("netns", "add", name, check=False)
    if proc.returncode != 0:
        return f"`ip netns add` failed: {proc.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


class Hosts:
    """``n`` hosts (network namespaces) on one bridge, for the ``with`` block.

    ``hosts.address(i)`` is host i's IPv4 address (host 0 is ``10.231.X.1``),
    ``hosts.popen(i, argv)`` runs a command in it, ``hosts.kill(i)`` kills every
    process in it (SIGKILL: the machine is gone).
    """

    def __init__(self, n: int, *, prefix: str = "fpd") -> None:
        if not 1 <= n <= 26:
            raise ValueError(f"1 to 26 hosts, not {n}")
        self.n = n
        self.tag = f"{prefix}{os.getpid()}"  # <= 15 chars with a 3-char suffix
        self.bridge = f"{self.tag}br"
        self.namespaces = [f"{self.tag}-{chr(ord('a') + i)}" for i in range(n)]
        self.subnet: ipaddress.IPv4Network | None = None
        self._procs: list[subprocess.Popen[Any]] = []
        self._up = False

    # -- addresses --------------------------------------------------------
    def address(self, i: int) -> str:
        """Host ``i``'s address (host 0: ``10.231.X.1``)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + i + 1)

    @property
    def gateway(self) -> str:
        """The root namespace's address on the hosts' bridge (``10.231.X.254``)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 254)

    # -- lifetime ---------------------------------------------------------
    def __enter__(self) -> Hosts:
        atexit.register(self.close)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(LOCK, "w") as lock:  # two invocations never take the same /24
            fcntl.flock(lock, fcntl.LOCK_EX)
            sweep_stale(self.tag.rstrip("0123456789"))
            self._up = True
            self.subnet = _free_subnet()
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            outer, inner = f"{self.tag}h{i}", f"{self.tag}n{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", outer, "master", self.bridge)
            _ip("link", "set", outer, "up")
            _ip("link", "set", inner, "netns", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")

    def close(self) -> None:
        """Kill every process in the hosts, remove the namespaces and the bridge
        (idempotent; also run at exit)."""
        if not self._up:
            return
        for i in range(self.n):
            self.kill(i)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)  # its veth end, and so the pair
        _ip("link", "del", self.bridge, check=False)
        self._up = False  # only now: interrupted, atexit tries again
        atexit.unregister(self.close)

    # -- processes --------------------------------------------------------
    def popen(self, i: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """``argv`` started in host ``i`` (its own session)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[i], *argv],
            start_new_session=True,
            **kwargs,
        )
        self._procs.append(proc)
        return proc

    def pids(self, i: int) -> list[int]:
        """The processes running in host ``i``."""
        out = _ip("netns", "pids", self.namespaces[i], check=False).stdout
        return [int(p) for p in out.split()]

    def kill(self, i: int) -> list[int]:
        """SIGKILL every process in host ``i`` (until none is left); the pids."""
        killed: list[int] = []
        for _ in range(20):
            pids = self.pids(i)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed += pids
            time.sleep(0.1)
        return killed


def sweep_stale(prefix: str) -> list[str]:
    """Remove the hosts an invocation killed before its teardown left (its pid
    no longer runs): their processes, namespaces and bridge. The names removed."""
    names = re.findall(rf"^({prefix}(\d+)-[a-z])\b", _ip("netns", "list").stdout, re.M)
    links = re.findall(rf"^\d+: ({prefix}(\d+)br)[:@]", _ip("link").stdout, re.M)
    removed = []
    for name, pid in [*names, *links]:
        if int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if name.endswith("br"):
            _ip("link", "del", name, check=False)
        else:
            out = _ip("netns", "pids", name, check=False).stdout
            for p in out.split():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _free_subnet() -> ipaddress.IPv4Network:
    """The first ``10.231.X.0/24`` no interface of this machine is on."""
    used = set(re.findall(rf"inet {NET}\.(\d+)\.", _ip("-4", "-o", "addr").stdout))
    for x in range(256):
        if str(x) not in used:
            return ipaddress.IPv4Network(f"{NET}.{x}.0/24")
    raise HostsUnavailable(f"every {NET}.X.0/24 is in use on this machine")


def make_certificates(folder: Path) -> Path:
    """A CA and certificates for the scheduler, the workers and the client, made
    with docs/scaling.md's openssl commands in ``folder``; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    script = """
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=fedpipe-ca \\
    -keyout ca-key.pem -out ca.pem
for who in scheduler worker client; do
  openssl req -newkey rsa:2048 -nodes -subj /CN=$who -keyout $who-key.pem -out $who.csr
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \\
      -days 365 -out $who.pem
done
"""
    proc = subprocess.run(
        ["bash", "-euc", script], cwd=folder, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"openssl failed:\n{proc.stderr}")
    return folder


class TlsCluster:
    """A Dask scheduler in host 0 and one worker (one thread) in each other host,
    started as docs/scaling.md says, mutual TLS with the certificates in
    ``certs`` (:func:`make_certificates`); the workers start in ``project``.

    ``env`` is the processes' environment; their output goes to ``logs``.
    """

    def __init__(
        self,
        hosts: Hosts,
        *,
        certs: Path,
        project: Path,
        logs: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.hosts = hosts
        self.certs = certs
        self.project = project
        self.logs = logs
        self.env = dict(os.environ if env is None else env)
        self.address = f"tls://{hosts.address(0)}:{SCHEDULER_PORT}"

    def start(self) -> TlsCluster:
        """Start the scheduler and the workers (not waiting for them)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        c = self.certs
        self._start(
            0,
            "scheduler",
            [str(BIN / "dask"), "scheduler", "--tls-ca-file", f"{c}/ca.pem",
             "--tls-cert", f"{c}/scheduler.pem",
             "--tls-key", f"{c}/scheduler-key.pem"],
            cwd=c,
        )  # fmt: skip
        for i in range(1, self.hosts.n):
            self._start(
                i,
                "worker",
                [str(BIN / "dask"), "worker", self.address, "--nthreads", "1",
                 "--nworkers", "1", "--preload", "tasks.federation",
                 "--tls-ca-file", f"{c}/ca.pem",
                 "--tls-cert", f"{c}/worker.pem", "--tls-key", f"{c}/worker-key.pem",
                 "--name", self.hosts.namespaces[i]],
                cwd=self.project,
            )  # fmt: skip
        return self

    def _start(self, i: int, what: str, argv: list[str], *, cwd: Path) -> None:
        log = open(self.logs / f"{what}-{self.hosts.namespaces[i]}.log", "w")  # noqa: SIM115
        self.hosts.popen(
            i, argv, cwd=cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def security(self, *, cert: bool = True) -> Any:
        """The client's ``distributed.Security`` (without ``cert``: the CA only)."""
        from distributed.security import Security

        c = self.certs
        return Security(
            tls_ca_file=str(c / "ca.pem"),
            tls_client_cert=str(c / "client.pem") if cert else None,
            tls_client_key=str(c / "client-key.pem") if cert else None,
            require_encryption=True,
        )

    def workers(self) -> dict[str, Any]:
        """The scheduler's workers (address -> info), over mutual TLS."""
        from distributed import Client

        with Client(
            self.address, timeout=10, security=self.security(), set_as_default=False
        ) as client:
            return client.scheduler_info(n_workers=-1)["workers"]

    def wait(self, *, timeout: float = 180) -> dict[str, Any]:
        """Wait until every worker is connected; the scheduler's workers."""
        deadline = time.monotonic() + timeout
        want = self.hosts.n - 1
        while True:
            try:
                workers = self.workers()
                if len(workers) >= want:
                    return workers
            except OSError:
                workers = {}
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(workers)} of {want} Dask workers connected to "
                    f"{self.address} after {timeout:.0f} s (logs: {self.logs})"
                )
            time.sleep(0.5)

    def params(self) -> dict[str, Any]:
        """The ``runtime.*`` settings of a run on this cluster."""
        c = self.certs
        return {
            "runtime.runner": "dask",
            "runtime.dask_address": self.address,
            "runtime.dask_tls_ca": str(c / "ca.pem"),
            "runtime.dask_tls_cert": str(c / "client.pem"),
            "runtime.dask_tls_key": str(c / "client-key.pem"),
        }


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker hosts")
    parser.add_argument(
        "--project", type=Path, default=Path.cwd(), help="where workers start"
    )
    parser.add_argument(
        "--certs", type=Path, help="certificate folder (default: a temporary one)"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # torn down on `kill` too
    why = probe()
    if why:
        print(f"dask_hosts: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="dask-hosts-"))
    certs = make_certificates(args.certs or work / "certs")
    with Hosts(args.workers + 1) as hosts:
        cluster = TlsCluster(
            hosts, certs=certs, project=args.project.resolve(), logs=work / "logs"
        ).start()
        workers = cluster.wait()
        print(f"scheduler {cluster.address} (host {hosts.namespaces[0]}), workers:")
        for address in sorted(workers):
            print(f"  {address}")
        sets = " ".join(f"-S {k}={v}" for k, v in cluster.params().items())
        print(f"run: fedpipe run {sets}\nlogs: {work / 'logs'}\nCtrl-C to stop")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second one waits
            signal.signal(signum, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
