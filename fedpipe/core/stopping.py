"""Ctrl-C and SIGTERM that a command cannot lose.

Python raises :class:`KeyboardInterrupt` wherever the main thread happens to be
when the signal arrives. Prefect's flow engine swallows one that lands after a
flow's own code has finished (its state is already final: "BaseException was
raised after user code finished executing"), so a Ctrl-C pressed as a round ends
would be lost and the run would go on to the last round. The handler installed
here also remembers the signal; the pipeline calls :func:`raise_if_stopped`
between stages, where the interrupt is raised again if it was swallowed.
"""

from __future__ import annotations

import signal
from types import FrameType

_received: int | None = None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum
    raise KeyboardInterrupt(signum)


def install() -> None:
    """Latch SIGINT (unless ignored, as in a background job) and SIGTERM."""
    global _received
    _received = None
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def stop_requested() -> bool:
    """Whether SIGINT or SIGTERM arrived since :func:`install`."""
    return _received is not None


def received() -> int | None:
    """The signal that arrived since :func:`install` (None: none did)."""
    return _received


def raise_if_stopped() -> None:
    """Raise :class:`KeyboardInterrupt` again if a signal arrived and was lost."""
    if _received is not None:
        raise KeyboardInterrupt(_received)
