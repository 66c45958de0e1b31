"""One module per ``fedpipe`` command.

Each module holds its command's ``NAME``, its help text and examples, its
``add_parser(subparsers)`` and the function the command runs (``cmd_<name>``).
A module imports what its command needs (TensorFlow, Prefect, DVC) inside that
function, so ``fedpipe --help`` answers at once. :data:`COMMANDS` is the order
``fedpipe --help`` lists them in.
"""

from __future__ import annotations

from fedpipe_app.commands import (
    audit,
    centralized,
    deploy,
    doctor,
    init,
    lineage,
    predict,
    report,
    run,
    serve,
    stage,
    stats,
    status,
    sweep,
    sync,
)

COMMANDS = (
    run,
    stage,
    sync,
    doctor,
    status,
    audit,
    deploy,
    serve,
    init,
    report,
    lineage,
    centralized,
    stats,
    predict,
    sweep,
)

__all__ = ["COMMANDS"]
