"""Errors a person can act on, each with the exit code the CLI ends with.

The CLI catches :class:`FedpipeError` once and exits with the error's
:attr:`~FedpipeError.exit_code` (Flower's ``serverapp/exception.py`` does the same).
"""

from __future__ import annotations

from typing import ClassVar


class FedpipeError(Exception):
    """Base of fedpipe's user-facing errors: the message says what was wrong,
    where, and what would be accepted.

    Attributes
    ----------
    exit_code : int
        The CLI's exit status for this error (1 unless a subclass says otherwise).
    """

    exit_code: ClassVar[int] = 1


class ParamsError(FedpipeError, ValueError):
    """``params.yaml`` is missing, malformed or holds a bad value (exit status 2)."""

    exit_code = 2
