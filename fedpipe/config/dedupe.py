"""The values ``data.dedupe`` takes, and what each means for images and tables.

One list, read by the ``params.yaml`` schema (:class:`fedpipe.config.params.
DataParams`) and by the partition
(:func:`fedpipe.data.partition.deal.partition_table`); plain tuples, so importing it
costs nothing.
"""

from __future__ import annotations

from fedpipe.core.errors import SettingError

DEDUPE_MODES = ("auto", "content", "row", "none")
"""``data.dedupe``: ``auto`` (the default: images ``content``, tables ``none``),
``content`` (drop a sample whose features repeat an earlier sample's), ``row``
(... whose features and label both do: a whole table row repeated), ``none``
(keep every sample). The earlier ``true`` reads as ``content``, ``false`` as
``none``."""

DROP_REASONS = {
    "content": "repeated content (data.dedupe: content)",
    "row": "repeated row, label included (data.dedupe: row)",
}
"""Why the partition dropped a sample, by the mode that dropped it."""


def dedupe_mode(setting: str | bool, *, table: bool) -> str:
    """``data.dedupe`` resolved for the data at hand: ``content``, ``row`` or
    ``none``.

    A table's rows are distinct people unless told otherwise: two passengers
    who share sex, class and age band are two passengers, so ``auto`` keeps
    every row of a table (its ids, ``data.id_column``, are unique: the ingest
    refuses a repeated one). An image that repeats another's pixels is the same
    picture, so ``auto`` drops it. ``True`` / ``False`` (the earlier booleans)
    read as ``content`` / ``none``.
    """
    if isinstance(setting, bool):
        return "content" if setting else "none"
    if setting not in DEDUPE_MODES:
        raise SettingError(
            f"data.dedupe: unknown {setting!r}; allowed: {', '.join(DEDUPE_MODES)}"
        )
    if setting == "auto":
        return "none" if table else "content"
    return setting
