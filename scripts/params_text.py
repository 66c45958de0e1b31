"""Editing params.yaml as text, for the scripts that sweep settings."""

from __future__ import annotations


def set_param(text: str, section: str, key: str, value: object) -> str:
    """Set ``section.key`` in params.yaml text, keeping comments and layout."""
    lines = text.split("\n")
    inside = False
    for n, line in enumerate(lines):
        if not line.startswith(" ") and line.strip():
            inside = line.startswith(f"{section}:")
            continue
        if inside and line.startswith(f"  {key}:"):
            comment = line.find("#")
            tail = "  " + line[comment:] if comment > 0 else ""
            lines[n] = f"  {key}: {value}{tail}"
            return "\n".join(lines)
    raise SystemExit(f"params.yaml: cannot set {section}.{key}")
