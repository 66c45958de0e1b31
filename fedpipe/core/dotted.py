"""Dotted keys (``train.lr``, ``model.options.alpha``) in nested mappings: the one
lookup that params files, overrides, sweeps and status share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def lookup(tree: Any, dotted: str, default: Any = None) -> Any:
    """The value at ``dotted`` in the nested mappings ``tree``, or ``default``
    when a part is missing or a step on the way is not a mapping."""
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node
