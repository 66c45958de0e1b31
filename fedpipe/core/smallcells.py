"""The minimum-count rule for published counts (``preprocess.min_count_shown``).

A published count of fewer than ``k`` rows (but more than none) describes so few
people that it may identify them: it is written ``"<k"``. Hiding one cell is not
enough when a total stands beside its parts: a client's ``count`` of 43 beside
its 44 ``rows`` gives away the ``missing`` cell written ``"<5"``. So counts are
published as *relations* (a total and the parts that add up to it) and
:func:`suppress` hides, besides every small cell, one more part of any relation
whose one hidden part would follow by difference (secondary suppression, the
rule statistical offices apply to tables with margins). A cell hidden that way
holds ``k`` or more rows and is written ``">=k"``: the reader learns nothing
that the first ``"<k"`` did not already say.

:func:`disclosures` is the reader's side: given the published cells and the
relations, every cell that shows a small count directly or by difference. The
audit (:mod:`fedpipe.observe.audit`) runs it on the files a run publishes.

Relations are closed one at a time until none has a single hidden part; that
is the usual heuristic, not a proof against every linear combination of
several relations (a tabular solver such as tau-argus goes further).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Relation",
    "disclosures",
    "hidden_above",
    "hidden_below",
    "is_hidden",
    "shown",
    "suppress",
    "suppress_rows",
]


def hidden_below(k: int) -> str:
    """The text written for a count of 1 to ``k - 1``."""
    return f"<{int(k)}"


def hidden_above(k: int) -> str:
    """The text written for a count of ``k`` or more hidden by difference."""
    return f">={int(k)}"


def is_hidden(value: object) -> bool:
    """True for a cell written as a range (``"<k"`` or ``">=k"``)."""
    return isinstance(value, str) and (value.startswith("<") or value.startswith(">"))


def shown(count: int, min_count: int) -> int | str:
    """``count`` as written under the minimum-count rule: ``"<k"`` for
    ``0 < count < k`` (an empty cell tells nothing about any row)."""
    count = int(count)
    return count if count == 0 or count >= min_count else hidden_below(min_count)


@dataclass(frozen=True)
class Relation:
    """``total`` = the sum of ``parts`` (keys of the cells).

    Attributes
    ----------
    total : hashable
        The key of the total's cell.
    parts : tuple of hashable
        The keys of the cells that add up to it.
    where : str
        Where a person reads it (for messages), e.g. ``"client 3, column age"``.
    """

    total: Hashable
    parts: tuple[Hashable, ...]
    where: str = ""


def suppress(
    counts: Mapping[Hashable, int], relations: Sequence[Relation], k: int
) -> dict[Hashable, int | str]:
    """The cells as published: small counts hidden, and by difference.

    Parameters
    ----------
    counts : mapping
        Every cell's exact count, by key.
    relations : sequence of Relation
        The totals and parts that a reader can add up.
    k : int
        ``preprocess.min_count_shown``.

    Returns
    -------
    dict
        Each key's count, ``"<k"`` or ``">=k"``.
    """
    out: dict[Hashable, int | str] = {key: shown(n, k) for key, n in counts.items()}
    changed = True
    while changed:
        changed = False
        for rel in relations:
            cells = [rel.total, *rel.parts]
            hidden = [c for c in cells if is_hidden(out[c])]
            if len(hidden) != 1:
                continue
            # the smallest other non-zero cell of the relation goes too
            candidates = [c for c in cells if c not in hidden and int(counts[c]) > 0]
            if not candidates:
                continue
            pick = min(candidates, key=lambda c: (int(counts[c]), str(c)))
            out[pick] = hidden_above(k)
            changed = True
    return out


def disclosures(
    cells: Mapping[Hashable, object], relations: Sequence[Relation], k: int
) -> list[str]:
    """What the published ``cells`` give away: a message per small count
    shown directly (``0 < n < k``) and per hidden cell that follows by
    difference (the one hidden cell of a relation whose others are shown).

    Cells that are not counts (``None``, floats of statistics) are ignored.
    """
    found = []
    for key, value in cells.items():
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        if 0 < value < k:
            found.append(f"{_name(key)}: shows a count of {value} (fewer than {k})")
    for rel in relations:
        keys = [rel.total, *rel.parts]
        if any(c not in cells for c in keys):
            continue
        hidden = [c for c in keys if is_hidden(cells[c])]
        others = [cells[c] for c in keys if c not in hidden]
        if len(hidden) == 1 and all(isinstance(v, int) for v in others):
            total, parts = cells[rel.total], [cells[c] for c in rel.parts]
            if hidden[0] == rel.total:
                value = sum(int(v) for v in parts)  # type: ignore[call-overload]
            else:
                value = int(total) - sum(  # type: ignore[call-overload]
                    int(v)  # type: ignore[call-overload]
                    for c, v in zip(rel.parts, parts, strict=True)
                    if c != hidden[0]
                )
            where = f" ({rel.where})" if rel.where else ""
            found.append(
                f"{_name(hidden[0])}: written {cells[hidden[0]]!r} but {value} by "
                f"difference from {_name(rel.total)}{where}"
            )
    return found


def _name(key: Hashable) -> str:
    """A cell's key as a person reads it: ``per_client[1].columns.age.missing``."""
    if not isinstance(key, tuple):
        return str(key)
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def suppress_rows(
    rows: Sequence[Mapping[str, int]], *, total: str, parts: Sequence[str], k: int
) -> list[dict[str, int | str]]:
    """Rows of a count table as published: in each row, ``total`` is the sum
    of ``parts`` (a client's training rows and its class counts); columns in
    neither are counts of their own, hidden when small.

    Examples
    --------
    >>> suppress_rows([{"n": 12, "a": 9, "b": 3}], total="n", parts=["a", "b"], k=5)
    [{'n': 12, 'a': '>=5', 'b': '<5'}]
    """
    out = []
    for row in rows:
        relation = Relation(total, tuple(parts))
        out.append(
            {str(key): value for key, value in suppress(row, [relation], k).items()}
        )
    return out
