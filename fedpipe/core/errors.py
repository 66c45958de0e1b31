"""Errors a person can act on, each with the exit code the CLI ends with.

The CLI catches :class:`FedpipeError` once and exits with the error's
:attr:`~FedpipeError.exit_code` (Flower's ``serverapp/exception.py`` does the same).
Each error class stays in the module that raises it and derives from
:class:`FedpipeError` as well as from the built-in it always was (``ValueError``,
``RuntimeError``), so every ``except ValueError`` still catches it.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_FAILED = 1
"""Exit status of a command that failed in a way a person can act on."""

EXIT_BAD_PARAMS = 2
"""Exit status of bad input: ``params.yaml``, a command's arguments or target."""


class FedpipeError(Exception):
    """Base of fedpipe's user-facing errors: the message says what was wrong,
    where, and what would be accepted.

    Attributes
    ----------
    exit_code : int
        The CLI's exit status for this error (:data:`EXIT_FAILED` unless a
        subclass says otherwise).
    """

    exit_code: ClassVar[int] = EXIT_FAILED


class ParamsError(FedpipeError, ValueError):
    """``params.yaml`` is missing, malformed or holds a bad value (exit status 2)."""

    exit_code = EXIT_BAD_PARAMS


class FederationStopped(FedpipeError):
    """The federation ends before the round that raised it runs (a stopping
    rule, not a failure of the round: a privacy budget that the round would
    pass). The rounds from that one on are not of this run: what an earlier
    run left of them is removed from the workspace
    (:func:`fedpipe.config.layout.unreached_outputs`), as DVC removes a stage's
    outputs before it runs the stage.

    Attributes
    ----------
    round : int
        The first round not run.
    """

    def __init__(self, message: str, *, round_: int) -> None:
        super().__init__(message)
        self.round = round_


class SettingError(FedpipeError, ValueError):
    """A setting's or an argument's value that cannot work, found where it is
    used (a model's option, a codec's bits, a plugin registered twice): named,
    with what would be accepted. Other ``ValueError``\\ s are bugs, and keep
    their traceback."""
