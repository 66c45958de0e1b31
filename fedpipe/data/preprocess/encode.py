"""Categorical and free-text columns: what a client counts, the vocabulary the
merged counts fix, and the encoding of the stored codes.

The ingest stores a string column as codes into its table of values
(``schema.json`` ``strings``). A client counts the values of its own training
rows (:func:`value_counts`; for a text column the tokens, :func:`token_counts`),
keyed by value, so the counts mean the same on every client; the server adds
them up (:func:`merge_counts`) and keeps a vocabulary (:func:`vocabulary`).
:class:`Encoding` maps each code to its output slots once, so applying it is a
table lookup per row (elementwise: any chunking gives the same bits).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CATEGORICAL_KINDS",
    "OTHER",
    "TEXT_KINDS",
    "Encoding",
    "categorical_encoding",
    "merge_counts",
    "text_encoding",
    "token_counts",
    "tokens",
    "value_counts",
    "vocabulary",
]

CATEGORICAL_KINDS = ("onehot", "index")
TEXT_KINDS = ("multihot", "tfidf")
OTHER = "<other>"  # slot 0 of a categorical column: rare, unseen or no value

# Keras TextVectorization's "lower_and_strip_punctuation" and "whitespace"
# split, exactly (tf.strings.lower: ASCII letters only; its punctuation regex;
# tf.strings.split: ASCII whitespace), so a model file can tokenize raw text
# with the built-in layer and get the tokens the federation counted.
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_PUNCTUATION = re.compile(r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']')
_SPLIT = re.compile(r"[ \t\n\v\f\r]+")


def tokens(text: str) -> list[str]:
    """``text``'s tokens in order, repeats kept: ASCII letters lower-cased,
    ASCII punctuation removed, split on ASCII whitespace (empty parts dropped),
    as Keras' ``TextVectorization`` (default ``standardize`` and ``split``)
    tokenizes it."""
    stripped = _PUNCTUATION.sub("", text.translate(_LOWER))
    return [t for t in _SPLIT.split(stripped) if t]


# ---------------------------------------------------------------- client side


def _code_counts(codes: np.ndarray, n_values: int) -> np.ndarray:
    codes = np.asarray(codes, dtype=np.float64)
    present = codes[~np.isnan(codes)].astype(np.int64)
    return np.bincount(present, minlength=n_values)


def value_counts(codes: np.ndarray, values: Sequence[str]) -> Counter[str]:
    """One client's rows per value of a categorical column (missing skipped).

    Parameters
    ----------
    codes : numpy.ndarray
        The column's stored codes in the client's rows (NaN = missing).
    values : sequence of str
        The column's values in code order (``schema.json`` ``strings``).
    """
    counts = _code_counts(codes, len(values))
    return Counter({values[i]: int(counts[i]) for i in np.flatnonzero(counts)})


def token_counts(
    codes: np.ndarray, values: Sequence[str]
) -> tuple[Counter[str], Counter[str], int]:
    """One client's token occurrences, documents (rows) holding each token,
    and rows with a text, of a text column."""
    counts = _code_counts(codes, len(values))
    occurrences: Counter[str] = Counter()
    documents: Counter[str] = Counter()
    for code in np.flatnonzero(counts):
        n = int(counts[code])
        words = tokens(values[code])
        for token, k in Counter(words).items():
            occurrences[token] += k * n
            documents[token] += n
    return occurrences, documents, int(counts.sum())


def merge_counts(parts: Iterable[Mapping[str, int]]) -> Counter[str]:
    """The clients' counts added up."""
    out: Counter[str] = Counter()
    for part in parts:
        out.update(part)
    return out


def vocabulary(
    counts: Mapping[str, int], min_count: int, limit: int | None = None
) -> list[str]:
    """The values counted at least ``min_count`` times, most frequent first
    (ties by value), at most ``limit``."""
    kept = [v for v, c in counts.items() if c >= min_count]
    kept.sort(key=lambda v: (-counts[v], v))
    return kept if limit is None else kept[:limit]


# ---------------------------------------------------------------- the encoding


@dataclass(frozen=True, eq=False)
class Encoding:
    """How one string column's codes become output columns.

    Code ``c`` maps to the slots ``indices[indptr[c]:indptr[c + 1]]``: one slot
    for a categorical column (0 = :data:`OTHER`, ``1 + i`` = vocabulary entry
    ``i``), a text's known tokens (repeats kept) for a text column. A missing
    value (NaN) or a code beyond the table maps to slot 0 (categorical) or to
    no token (text).

    Attributes
    ----------
    column : int
        The stored column it encodes.
    name : str
        That column's name.
    kind : str
        ``onehot`` (``1 + len(vocabulary)`` columns, the first "other"),
        ``index`` (one column: the slot), ``multihot`` (one column per token,
        1.0 when present) or ``tfidf`` (token counts times ``idf``, each row
        scaled to unit Euclidean length).
    vocabulary : tuple of str
        The kept values or tokens, in slot order.
    indptr, indices : numpy.ndarray
        The code -> slots table (int64).
    idf : numpy.ndarray or None
        ``tfidf``: per token ``ln((1 + n) / (1 + df)) + 1`` (sklearn's smooth
        idf), from the clients' merged document counts.
    """

    column: int
    name: str
    kind: str
    vocabulary: tuple[str, ...]
    indptr: np.ndarray
    indices: np.ndarray
    idf: np.ndarray | None = None

    @property
    def width(self) -> int:
        """Output columns."""
        if self.kind == "onehot":
            return 1 + len(self.vocabulary)
        if self.kind == "index":
            return 1
        return len(self.vocabulary)

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        """``(n,)`` stored codes in, ``(n, width)`` float64 out."""
        codes = np.asarray(codes, dtype=np.float64)
        n_codes = len(self.indptr) - 1
        known = ~np.isnan(codes) & (codes >= 0) & (codes < n_codes)
        code = np.where(known, np.nan_to_num(codes), 0).astype(np.int64)
        lower = self.indptr[np.minimum(code, n_codes)]
        upper = self.indptr[np.minimum(code + 1, n_codes)]
        start = np.where(known, lower, 0)
        length = np.where(known, upper - lower, 0)
        n = len(codes)
        if self.kind in CATEGORICAL_KINDS:
            slot = np.zeros(n, dtype=np.int64)
            slot[known] = self.indices[start[known]]
            if self.kind == "index":
                return slot.astype(np.float64)[:, None]
            out = np.zeros((n, self.width))
            out[np.arange(n), slot] = 1.0
            return out
        out = np.zeros((n, self.width))
        total = int(length.sum())
        if total:
            row = np.repeat(np.arange(n), length)
            first = np.repeat(np.cumsum(length) - length, length)
            at = np.arange(total) - first + np.repeat(start, length)
            np.add.at(out, (row, self.indices[at]), 1.0)
        if self.kind == "multihot":
            return np.minimum(out, 1.0)
        assert self.idf is not None
        out *= self.idf
        norm = np.sqrt((out * out).sum(axis=1, keepdims=True))
        return np.divide(out, norm, out=out, where=norm > 0)

    def to_json(self) -> dict[str, Any]:
        """Readable: the vocabulary, and per code its slots."""
        slots: list[Any] = []
        for c in range(len(self.indptr) - 1):
            part = [int(s) for s in self.indices[self.indptr[c] : self.indptr[c + 1]]]
            slots.append(part[0] if self.kind in CATEGORICAL_KINDS else part)
        out: dict[str, Any] = {
            "column": self.name,
            "kind": self.kind,
            "vocabulary": list(self.vocabulary),
            "code_slots": slots,
        }
        if self.idf is not None:
            out["idf"] = [float(v) for v in self.idf]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], columns: Sequence[str]) -> Encoding:
        """The inverse of :meth:`to_json`."""
        kind = str(raw["kind"])
        slots = raw["code_slots"]
        if kind in CATEGORICAL_KINDS:
            lists = [[int(s)] for s in slots]
        else:
            lists = [[int(s) for s in part] for part in slots]
        idf = raw.get("idf")
        return cls(
            column=list(columns).index(raw["column"]),
            name=str(raw["column"]),
            kind=kind,
            vocabulary=tuple(str(v) for v in raw["vocabulary"]),
            indptr=_indptr(lists),
            indices=_indices(lists),
            idf=None if idf is None else np.asarray(idf, dtype=np.float64),
        )


def _indptr(lists: Sequence[Sequence[int]]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(p) for p in lists])]).astype(np.int64)


def _indices(lists: Sequence[Sequence[int]]) -> np.ndarray:
    return np.fromiter((s for p in lists for s in p), dtype=np.int64)


def categorical_encoding(
    column: int, name: str, kind: str, kept: Sequence[str], values: Sequence[str]
) -> Encoding:
    """The encoding of a categorical column with vocabulary ``kept``, for the
    stored values ``values`` (code order): a value outside ``kept`` -> 0."""
    slot = {v: 1 + i for i, v in enumerate(kept)}
    lists = [[slot.get(v, 0)] for v in values]
    return Encoding(column, name, kind, tuple(kept), _indptr(lists), _indices(lists))


def text_encoding(
    column: int,
    name: str,
    kind: str,
    kept: Sequence[str],
    values: Sequence[str],
    *,
    documents: Mapping[str, int] | None = None,
    rows: int = 0,
) -> Encoding:
    """The encoding of a text column with token vocabulary ``kept``; ``tfidf``
    takes the idf from the merged ``documents`` counts of ``rows`` texts."""
    slot = {t: i for i, t in enumerate(kept)}
    lists = [[slot[t] for t in tokens(v) if t in slot] for v in values]
    idf = None
    if kind == "tfidf":
        df = np.array([(documents or {}).get(t, 0) for t in kept], dtype=np.float64)
        idf = np.log((1.0 + rows) / (1.0 + df)) + 1.0
    return Encoding(
        column, name, kind, tuple(kept), _indptr(lists), _indices(lists), idf
    )
