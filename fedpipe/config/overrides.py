"""Change a few settings in ``params.yaml`` itself, keeping its comments and order.

A run started with overrides (``fedpipe run -S federation.rounds=20``, or from the
Prefect UI, say ``rounds: 20``) writes them into ``params.yaml`` first, as
``dvc exp run -S key=value`` does: the file stays the one source of settings, and
``dvc.lock`` records the values that actually ran. Keys are dotted paths at any
depth (``model.options.alpha``); values are YAML (``0.1``, ``fedadam``, ``[32,
32]``, ``{alpha: 0.01}``, ``null``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedpipe.config.params import (
    ROUND_CHAIN_KEY,
    ROUND_CHAIN_MARKER,
    Params,
    ParamsError,
    load_params,
    parse_params,
    round_chain,
    sync_round_chain,
)
from fedpipe.core import atomic
from fedpipe.core.dotted import lookup


def yaml_scalar(value: Any) -> str:
    """``value`` as it would be written in YAML flow style (``20``, ``fedprox``)."""
    return yaml.safe_dump([value], default_flow_style=True, width=1000).strip()[1:-1]


def _set_line(lines: list[str], index: int, key: str, text: str) -> None:
    """Replace the value on ``lines[index]`` (``  key: old  # comment``)."""
    line = lines[index].rstrip("\n")
    match = re.match(rf"^(\s*){re.escape(key)}:\s*(.*?)(\s+#.*)?$", line)
    assert match is not None
    indent, _, comment = match.groups()
    head = f"{indent}{key}: {text}"
    if comment:
        # keep the comment in its column when the new value fits
        column = len(line) - len(comment.lstrip())
        head = head.ljust(column - 1) + " " + comment.lstrip()
    lines[index] = head + "\n"


def _find(lines: list[str], pattern: str, start: int = 0, stop: int | None = None):
    stop = len(lines) if stop is None else stop
    for i in range(start, stop):
        if re.match(pattern, lines[i]):
            return i
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    """A line holding YAML (not blank, not only a comment)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block_end(lines: list[str], header: int) -> int:
    """Index of the first line after the value block of the key on ``header``:
    the next content line indented no deeper than the key (a ``- item`` at the
    key's own indent belongs to its block, as YAML allows for sequences)."""
    depth = _indent(lines[header])
    for i in range(header + 1, len(lines)):
        line = lines[i]
        if not _is_content(line):
            continue
        inner = _indent(line)
        if inner < depth or (inner == depth and not line.lstrip().startswith("- ")):
            return i
    return len(lines)


def _find_key(lines: list[str], key: str, start: int, stop: int, indent: int):
    pattern = re.compile(rf"^ {{{indent}}}{re.escape(key)}:(\s|$)")
    for i in range(start, stop):
        if _indent(lines[i]) == indent and pattern.match(lines[i]):
            return i
    return None


def _inline_value(line: str, key: str) -> str:
    """What follows ``key:`` on its line, without a trailing comment."""
    rest = line.split(f"{key}:", 1)[1]
    return re.sub(r"\s+#.*$", "", rest).strip()


def _nested(parts: list[str], value: Any) -> Any:
    for part in reversed(parts):
        value = {part: value}
    return value


def _block_lines(parts: list[str], value: Any, indent: int) -> list[str]:
    """``a:\\n  b: value`` for ``parts`` [a, b], starting at ``indent`` spaces."""
    out = []
    for depth, part in enumerate(parts[:-1]):
        out.append(" " * (indent + 2 * depth) + f"{part}:\n")
    last = " " * (indent + 2 * (len(parts) - 1))
    out.append(f"{last}{parts[-1]}: {yaml_scalar(value)}\n")
    return out


def _replace_value(lines: list[str], index: int, key: str, value: Any) -> None:
    """Set the value of the key on ``lines[index]``, dropping its old block value
    (``- 64`` items, nested keys) but keeping comment lines."""
    end = _block_end(lines, index)
    keep = [line for line in lines[index + 1 : end] if not _is_content(line)]
    _set_line(lines, index, key, yaml_scalar(value))
    lines[index + 1 : end] = keep


def _write_value(lines: list[str], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    start, stop, indent = 0, len(lines), 0
    for depth, part in enumerate(parts):
        found = _find_key(lines, part, start, stop, indent)
        rest = parts[depth + 1 :]
        if found is None:
            if depth == 0 and not rest:
                lines.insert(0, f"{part}: {yaml_scalar(value)}\n")
            elif depth == 0:
                marker = _find(lines, rf"^{re.escape(ROUND_CHAIN_MARKER)}")
                at = len(lines) if marker is None else marker
                lines[at:at] = [*_block_lines(parts, value, 0), "\n"]
            else:
                lines[start:start] = _block_lines(parts[depth:], value, indent)
            return
        if not rest:
            _replace_value(lines, found, part, value)
            return
        inline = _inline_value(lines[found], part)
        if inline in ("null", "~", "{}"):
            # an empty section (`options: null`): it becomes a flow mapping
            _replace_value(lines, found, part, _nested(rest, value))
            return
        if inline:
            raise ParamsError(
                f"could not set {dotted} in place: {'.'.join(parts[: depth + 1])} "
                "is not written one key per line (flow style?); edit the file by hand"
            )
        end = _block_end(lines, found)
        child = next(
            (_indent(lines[i]) for i in range(found + 1, end) if _is_content(lines[i])),
            indent + 2,
        )
        start, stop, indent = found + 1, end, child


def _lookup(raw: Any, dotted: str) -> Any:
    return lookup(raw, dotted, _MISSING)


_MISSING = object()


def set_params(path: str | Path, values: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``values`` (dotted keys, e.g. ``federation.rounds``) into ``path``.

    Only the lines holding those keys change (and the generated ``round_chain``
    when ``federation.rounds`` does). The result must still be valid params
    (:func:`fedpipe.config.params.load_params`); otherwise the file is left as it was
    and :class:`ParamsError` names the key.

    Returns
    -------
    dict
        The keys whose value changed, with their new values.
    """
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    original = path.read_text()
    raw = yaml.safe_load(original) or {}
    changed = {k: v for k, v in values.items() if _lookup(raw, k) != v}
    if not changed:
        return {}
    lines = original.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for dotted, value in changed.items():
        _write_value(lines, dotted, value)
    text = "".join(lines)
    written = yaml.safe_load(text) or {}
    for dotted, value in changed.items():
        if _lookup(written, dotted) != value:
            raise ParamsError(
                f"{path}: could not set {dotted} in place (is the section written "
                "in flow style?); edit the file by hand"
            )
    atomic.write_text(path, text)  # the user's file: never left half-written
    try:
        sync_round_chain(path)
        load_params(path)
    except ParamsError:
        atomic.write_text(path, original)
        raise
    return changed


_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def parse_overrides(args: Sequence[str]) -> dict[str, Any]:
    """``["train.lr=0.1", "strategy.name=fedadam"]`` (DVC's ``-S`` syntax) as
    ``{"train.lr": 0.1, "strategy.name": "fedadam"}``: each value read as YAML.

    Raises
    ------
    ParamsError
        Naming the argument that is not ``dotted.key=value``.
    """
    values: dict[str, Any] = {}
    for arg in args:
        key, sep, text = arg.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise ParamsError(
                f"-S {arg}: expected dotted.key=value, e.g. -S train.lr=0.1 or "
                "-S strategy.name=fedadam"
            )
        if key.split(".")[0] == ROUND_CHAIN_KEY:
            raise ParamsError(
                f"-S {arg}: {ROUND_CHAIN_KEY} is generated from federation.rounds; "
                "set -S federation.rounds=N instead"
            )
        try:
            values[key] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise ParamsError(f"-S {arg}: {key}: not a YAML value ({exc})") from None
    return values


def with_overrides(raw: Mapping[str, Any], values: Mapping[str, Any]) -> dict:
    """A copy of ``raw`` (parsed params) with ``values`` set at their dotted
    keys and ``round_chain`` regenerated for ``federation.rounds``."""
    import copy

    out = copy.deepcopy(dict(raw))
    for dotted, value in values.items():
        node = out
        parts = dotted.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ParamsError(
                    f"-S {dotted}: {where} is a value ({child!r}), not a section"
                )
            node = child
        node[parts[-1]] = value
    rounds = (out.get("federation") or {}).get("rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 1:
        out[ROUND_CHAIN_KEY] = round_chain(rounds)
    return out


def check_overrides(path: str | Path, values: Mapping[str, Any]) -> Params:
    """Validate ``values`` on top of ``path`` without writing anything; the
    params they give.

    Raises
    ------
    ParamsError
        One line per problem, as for ``params.yaml``
        (:func:`fedpipe.config.params.parse_params`), prefixed ``-S``.
    """
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found (run from the project root)")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping of settings, got {raw!r}")
    return parse_params(with_overrides(raw, values), source="-S")


def apply_overrides(path: str | Path, args: Sequence[str]) -> dict[str, Any]:
    """Parse ``-S`` arguments, validate them, and write them into ``path``.

    Nothing is written unless every override is valid. Returns the keys whose
    value changed (see :func:`set_params`).
    """
    values = parse_overrides(args)
    check_overrides(path, values)
    return set_params(path, values)
