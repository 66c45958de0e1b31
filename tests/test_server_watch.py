"""A run's Prefect server gone: the watch notices, finished stages get recorded."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from orchestration.dvclock import LockRecorder, freeze
from orchestration.server import ServerWatch, probe, server_lost_message


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *args: object) -> None:
        pass


def _serve() -> tuple[http.server.HTTPServer, str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/api"


def test_watch_calls_on_lost_once_after_the_server_stops_answering() -> None:
    server, url = _serve()
    lost: list[tuple[str, float]] = []
    with ServerWatch(
        url, lambda u, s: lost.append((u, s)), interval=0.1, lost_after=0.5
    ):
        time.sleep(1.0)
        assert lost == []  # answering: nothing happens
        server.shutdown()
        server.server_close()
        stopped = time.monotonic()
        while not lost and time.monotonic() - stopped < 10:
            time.sleep(0.05)
        time.sleep(0.5)
    assert len(lost) == 1
    assert lost[0][0] == url and lost[0][1] >= 0.5


def test_a_hung_server_gets_the_longer_grace() -> None:
    hung = socket.socket()  # listens, never answers: connections wait in its backlog
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    url = f"http://127.0.0.1:{hung.getsockname()[1]}/api"
    lost: list[tuple[str, float]] = []
    try:
        assert probe(url, timeout=0.2) == "silent"
        watch = ServerWatch(
            url,
            lambda u, s: lost.append((u, s)),
            interval=0.1,
            lost_after=0.3,
            silent_after=1.5,
        )
        with watch:
            time.sleep(1.0)
            assert lost == []  # refused would have counted by now; silent not yet
            deadline = time.monotonic() + 10
            while not lost and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        hung.close()
    assert len(lost) == 1 and lost[0][1] >= 1.5
    assert probe(url, timeout=0.2) == "refused"  # closed: nothing listens


def test_watch_stops_quietly_with_its_block() -> None:
    server, url = _serve()
    lost: list[tuple[str, float]] = []
    with ServerWatch(
        url, lambda u, s: lost.append((u, s)), interval=0.1, lost_after=0.3
    ):
        time.sleep(0.3)
    server.shutdown()
    server.server_close()
    time.sleep(0.6)
    assert lost == []


def test_message_names_the_server_and_the_last_recorded_round() -> None:
    said = server_lost_message("http://h:1/api", 10.4, 3)
    assert said == (
        "the Prefect server at http://h:1/api stopped answering (nothing for 10 s): "
        "run stopped; round 3 is the last recorded round (dvc.lock); `fedpipe run` "
        "resumes from there once a Prefect server answers"
    )
    assert "no round recorded yet (dvc.lock)" in server_lost_message("u", 10, None)


def test_freeze_records_the_stages_queued_behind_the_record_in_flight(
    tmp_path: Path,
) -> None:
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True).close()
    stages = {
        name: {"cmd": f"echo {name} > {name}.txt", "outs": [f"{name}.txt"]}
        for name in ("a", "b")
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    for name in stages:
        (tmp_path / f"{name}.txt").write_text(f"{name}\n")
    recorder = LockRecorder(tmp_path)
    try:
        recorder.record(["a"])
        recorder.queue(["b"])  # finished; its record had not started
        assert freeze(timeout=60)
        lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())
        assert list(lock["stages"]) == ["a", "b"]
    finally:
        recorder._lock.release()  # frozen: a process would end here
        recorder.close()


def test_lock_recorder_rests_so_it_is_busy_at_most_its_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After a record that took t seconds the recorder is not rested until
    t * (1 / BUSY_SHARE - 1) seconds later (a fake clock: no timing)."""
    from orchestration import dvclock

    clock = [100.0]
    monkeypatch.setattr(dvclock.time, "monotonic", lambda: clock[0])
    recorder = dvclock.LockRecorder(tmp_path)

    def record(names: list[str]) -> None:  # a record that takes 2 s
        clock[0] += 2.0

    monkeypatch.setattr(recorder, "_record", record)
    assert recorder.rested()
    recorder.queue(["round@1"])
    recorder.record(["round@1"])
    rest = 2.0 * (1 / dvclock.BUSY_SHARE - 1)
    clock[0] += rest - 0.01
    assert not recorder.rested()
    clock[0] += 0.01
    assert recorder.rested()
