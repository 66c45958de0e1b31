"""A Dask scheduler on another machine is reached over TLS (runtime.dask_*)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpipe.config.params import (
    ParamsError,
    dask_address_parts,
    parse_params,
    round_chain,
)


def _runtime(**values: object):
    return parse_params({"round_chain": round_chain(10), "runtime": values}).runtime


def _tls_files(tmp_path: Path) -> dict[str, str]:
    names = {"dask_tls_ca": "ca.pem", "dask_tls_cert": "me.pem", "dask_tls_key": "k"}
    out = {}
    for key, name in names.items():
        (tmp_path / name).write_text("PEM\n")
        out[key] = str(tmp_path / name)
    return out


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "address",
    [
        "tcp://127.0.0.1:8786",
        "127.0.0.1:8786",
        "tcp://127.0.1.1:8786",
        "localhost:8786",
        "tcp://LOCALHOST:8786",
        "tcp://[::1]:8786",
    ],
)
def test_loopback_tcp_needs_no_tls(address: str) -> None:
    assert _runtime(dask_address=address).dask_address == address


@pytest.mark.parametrize(
    "address", ["tcp://10.0.0.5:8786", "10.0.0.5:8786", "tcp://gpu-box:8786"]
)
def test_plain_tcp_to_another_machine_is_refused(address: str) -> None:
    with pytest.raises(ParamsError) as err:
        _runtime(dask_address=address)
    message = str(err.value)
    assert f"runtime.dask_address={address}" in message
    assert "runtime.dask_tls_ca" in message and "runtime.dask_tls_key" in message
    assert "runtime.dask_allow_insecure" in message


def test_plain_tcp_elsewhere_is_allowed_when_said_so() -> None:
    runtime = _runtime(dask_address="tcp://10.0.0.5:8786", dask_allow_insecure=True)
    assert runtime.dask_allow_insecure


def test_a_tls_address_needs_the_three_files(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"runtime\.dask_address=tls://.*dask_tls"):
        _runtime(dask_address="tls://10.0.0.5:8786")
    runtime = _runtime(dask_address="tls://10.0.0.5:8786", **_tls_files(tmp_path))
    assert runtime.tls_files()["runtime.dask_tls_ca"].endswith("ca.pem")


def test_tls_files_go_together(tmp_path: Path) -> None:
    files = _tls_files(tmp_path)
    files.pop("dask_tls_key")
    with pytest.raises(ParamsError, match=r"runtime\.dask_tls_key not set"):
        _runtime(dask_address="tls://10.0.0.5:8786", **files)


def test_tls_files_with_a_tcp_address_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"not encrypted; use tls://10\.0\.0\.5"):
        _runtime(dask_address="tcp://10.0.0.5:8786", **_tls_files(tmp_path))


def test_tls_files_without_an_address_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"runtime\.dask_address.*not set"):
        _runtime(**_tls_files(tmp_path))


def test_address_parts() -> None:
    assert dask_address_parts("tls://10.0.0.5:8786") == ("tls", "10.0.0.5")
    assert dask_address_parts("host:1") == ("tcp", "host")
    assert dask_address_parts("tcp://[fe80::1]:8786") == ("tcp", "fe80::1")
    assert dask_address_parts("WSS://h") == ("wss", "h")


# ---------------------------------------------------------------- the connection


def test_a_missing_certificate_file_names_the_key_and_path(tmp_path: Path) -> None:
    from orchestration.runtime import DaskScheduler

    files = _tls_files(tmp_path)
    (tmp_path / "me.pem").unlink()
    runtime = _runtime(dask_address="tls://10.0.0.5:8786", **files)
    with pytest.raises(ParamsError, match=r"runtime\.dask_tls_cert=.*me\.pem: file"):
        DaskScheduler.from_runtime(runtime)


def test_the_security_requires_encryption(tmp_path: Path) -> None:
    from orchestration.runtime import dask_security

    runtime = _runtime(dask_address="tls://10.0.0.5:8786", **_tls_files(tmp_path))
    security = dask_security(runtime)
    assert security.require_encryption
    assert security.tls_ca_file.endswith("ca.pem")
    assert security.tls_client_cert.endswith("me.pem")
    assert dask_security(_runtime()) is None


def test_a_job_runs_on_a_tls_cluster_through_the_scheduler_connection(
    tmp_path: Path,
) -> None:
    pytest.importorskip("cryptography")
    from distributed import Client, LocalCluster
    from distributed.security import Security

    from orchestration.runtime import DaskScheduler

    cluster_security = Security.temporary()  # one self-signed pair for every role
    files = {}
    for key, pem in (
        ("dask_tls_ca", cluster_security.tls_ca_file),
        ("dask_tls_cert", cluster_security.tls_client_cert),
        ("dask_tls_key", cluster_security.tls_client_key),
    ):
        path = tmp_path / f"{key}.pem"
        path.write_text(pem)
        files[key] = str(path)
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        dashboard_address=None,
        security=cluster_security,
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        runtime = _runtime(runner="dask", dask_address=address, **files)
        scheduler = DaskScheduler.from_runtime(runtime)
        assert scheduler.address() == address  # the worker check connected too
        with scheduler.client() as client:
            assert client.submit(sum, [20, 22]).result() == 42
        with scheduler:  # the run's one connection, closed with the scheduler
            run_client = scheduler.run_client()
            assert scheduler.run_client() is run_client
            assert run_client.submit(sum, [1, 2]).result() == 3
            assert run_client.security.require_encryption
        assert run_client.status == "closed"
        # without the certificates the scheduler cannot be reached at all
        with pytest.raises((OSError, TypeError, ValueError)):
            Client(address, timeout=3, set_as_default=False)
