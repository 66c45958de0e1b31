"""fedpipe.core.stopping: the signal latch, without Prefect."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from fedpipe.core import stopping


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    # as in a terminal, even when the suite runs as a background job (SIGINT
    # ignored there, and install() then leaves it ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    stopping._received = None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_signal_is_raised_again(handlers: None, signum: int) -> None:
    stopping.install()
    assert not stopping.stop_requested()
    stopping.raise_if_stopped()  # nothing arrived: no-op
    try:
        os.kill(os.getpid(), signum)
    except KeyboardInterrupt:
        pass  # what Prefect's engine does after a flow's code finished
    assert stopping.stop_requested()
    with pytest.raises(KeyboardInterrupt) as raised:
        stopping.raise_if_stopped()
    assert raised.value.args == (signum,)


def test_an_ignored_sigint_stays_ignored(handlers: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's SIGINT
    stopping.install()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is stopping._on_signal
