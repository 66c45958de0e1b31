"""The ``strategy``, ``partition`` and ``attack`` keys as the registry declares them.

Prints, per section, every setting the registered components declare, with its
``params.yaml`` default and a comment naming the components that read it and
what it means (its ``help``), in the layout of the commented ``params.yaml``:
what to paste into ``params.yaml`` and ``fedpipe_app/templates/params.yaml.in``
for a new component's key. ``tests/test_registry.py`` checks both files list
every declared key with its default.

    python scripts/params_blocks.py [strategy partition attack]
"""

from __future__ import annotations

import sys
from typing import Any

from fedpipe.config.params import AttackParams, PartitionParams, StrategyParams
from fedpipe.config.sections import ComponentSection, declared_keys
from fedpipe.core import registry

SECTIONS: dict[str, type[ComponentSection]] = {
    "strategy": StrategyParams,
    "partition": PartitionParams,
    "attack": AttackParams,
}
COMMENT_COLUMN = 29


def _yaml(value: Any) -> str:
    """A default as ``params.yaml`` writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def block(section: str) -> list[str]:
    """The lines of ``section``'s declared keys: ``  key: default  # who: help``."""
    model = SECTIONS[section]
    components = registry.classes(model.kind)
    lines = []
    for key, setting in declared_keys(model.kind, tuple(model.model_fields)).items():
        head = f"  {key}: {_yaml(setting.params_default)}"
        lines.append(f"{head.ljust(COMMENT_COLUMN)}# {_comment(key, components)}")
    return lines


def _comment(key: str, components: dict[str, Any]) -> str:
    """``fedadam, fedyogi: adaptivity``: who reads ``key``, and what it means to
    them (one text when they agree, else each its own)."""
    helps: dict[str, list[str]] = {}
    for name, cls in components.items():
        for setting in cls.declared():
            if setting == key:
                helps.setdefault(setting.help, []).append(name)
    parts = [
        ", ".join(names) + (f": {text}" if text else "")
        for text, names in helps.items()
    ]
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    for section in argv or list(SECTIONS):
        print(f"{section}:")
        print("\n".join(block(section)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
