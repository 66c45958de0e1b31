"""What the terminal shows when a run stops on bad input: one line, no traceback.

Prefect logs every failed task and flow run with its traceback. For a failure a
person can act on (a bad param, user code that does not fit, data that failed
validation) the traceback says nothing the message does not; fedpipe's CLI prints
the message once. A real bug keeps its traceback.
"""

from __future__ import annotations

import logging

RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs", "prefect.engine")


class _NoTracebackFor(logging.Filter):
    def __init__(self, kinds: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.kinds = kinds

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, self.kinds):
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_user_errors(kinds: tuple[type[BaseException], ...]) -> None:
    """Drop the traceback from Prefect's run logs for exceptions of ``kinds``."""
    log_filter = _NoTracebackFor(kinds)
    for name in RUN_LOGGERS:
        logging.getLogger(name).addFilter(log_filter)
