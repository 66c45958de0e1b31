"""Change a few settings in ``params.yaml`` itself, keeping its comments and order.

A run started with overrides (from the Prefect UI, say ``rounds: 20``) writes them
into ``params.yaml`` first, as ``dvc exp run -S key=value`` does: the file stays the
one source of settings, and ``dvc.lock`` records the values that actually ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from fedpipe.config import (
    ROUND_CHAIN_MARKER,
    ParamsError,
    load_params,
    sync_round_chain,
)


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


def _section_end(lines: list[str], header: int) -> int:
    """Index of the first line after the block that starts at ``header``."""
    for i in range(header + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line[0].isspace():
            return i
    return len(lines)


def _write_value(lines: list[str], dotted: str, value: Any) -> None:
    text = yaml_scalar(value)
    parts = dotted.split(".")
    if len(parts) == 1:
        found = _find(lines, rf"^{re.escape(parts[0])}:")
        if found is None:
            lines.insert(0, f"{parts[0]}: {text}\n")
        else:
            _set_line(lines, found, parts[0], text)
        return
    if len(parts) != 2:
        raise ParamsError(f"{dotted}: only section.key overrides are supported")
    section, key = parts
    header = _find(lines, rf"^{re.escape(section)}:\s*(#.*)?$")
    if header is None and _find(lines, rf"^{re.escape(section)}:") is not None:
        raise ParamsError(
            f"could not set {dotted} in place: section {section} is not written "
            "one key per line; edit the file by hand"
        )
    if header is None:
        marker = _find(lines, rf"^{re.escape(ROUND_CHAIN_MARKER)}")
        at = len(lines) if marker is None else marker
        lines[at:at] = [f"{section}:\n", f"  {key}: {text}\n", "\n"]
        return
    end = _section_end(lines, header)
    found = _find(lines, rf"^\s+{re.escape(key)}:", header + 1, end)
    if found is None:
        lines.insert(header + 1, f"  {key}: {text}\n")
    else:
        _set_line(lines, found, key, text)


def _lookup(raw: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(raw, dict) or part not in raw:
            return _MISSING
        raw = raw[part]
    return raw


_MISSING = object()


def set_params(path: str | Path, values: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``values`` (dotted keys, e.g. ``federation.rounds``) into ``path``.

    Only the lines holding those keys change (and the generated ``round_chain``
    when ``federation.rounds`` does). The result must still be valid params
    (:func:`fedpipe.config.load_params`); otherwise the file is left as it was and
    :class:`ParamsError` names the key.

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
    path.write_text(text)
    try:
        sync_round_chain(path)
        load_params(path)
    except ParamsError:
        path.write_text(original)
        raise
    return changed
