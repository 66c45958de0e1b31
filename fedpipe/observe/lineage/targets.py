"""What ``fedpipe lineage TARGET`` names: a round, a stage or a path a stage
produces, resolved against the stages ``dvc.lock`` records."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from fedpipe.config import layout
from fedpipe.observe.lineage.dvcstate import DvcProject
from fedpipe.observe.lineage.records import ROUND_PREFIX, round_of
from fedpipe.observe.lineage.result import LineageError

__all__ = ["resolve_target"]


def _rounds(names: Iterable[str]) -> list[int]:
    return sorted(r for r in map(round_of, names) if r is not None)


def _accepted(project: DvcProject) -> str:
    rounds = _rounds(project.stages)
    span = f"0..{rounds[-1]}" if rounds else "0"
    paths: list[str] = []
    for stage in project.stages.values():
        for out in stage.outs:
            shown = re.sub(r"round-\d+", "round-K", project.rel(out))
            shown += "/..." if out.hash_info.isdir else ""
            if shown not in paths:
                paths.append(shown)
    names = [n for n in project.stages if round_of(n) is None] + ["round@K"]
    return (
        f"accepted: a round number ({span}; 0 = the initial model), a stage "
        f"({', '.join(names)}) or a path a stage produces ({', '.join(paths)})"
    )


def _normalize(root: str, raw: str) -> str:
    path = Path(raw)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(Path(root).resolve())
        except ValueError:
            return raw
    return path.as_posix().removeprefix("./").rstrip("/")


def resolve_target(
    project: DvcProject, tokens: Sequence[str]
) -> tuple[str, str, str | None]:
    """Turn the command-line target into ``(spec, stage, path)``.

    Accepted: nothing (the whole pipeline: the last stage recorded), ``round N``
    or ``N`` (round N's global model; 0 = the initial model), a stage name
    (``partition``, ``round@3``), or a path that a stage produces (a file, a
    directory output, or a file inside one).

    Raises
    ------
    LineageError
        Naming what would be accepted.
    """
    stages = project.stages
    words = [t for t in tokens if t]
    if not words:
        return "the whole pipeline", list(stages)[-1], None
    if words == [layout.ROUND_STAGE]:
        raise LineageError(f"round: give the round number; {_accepted(project)}")
    if len(words) == 2 and words[0] == layout.ROUND_STAGE:
        words = [words[1]]
        if not words[0].isdigit():
            raise LineageError(
                f"round {words[0]!r}: not a round number; {_accepted(project)}"
            )
    if len(words) != 1:
        raise LineageError(
            f"{' '.join(tokens)!r}: give one target; {_accepted(project)}"
        )
    word = words[0]
    if word.isdigit():
        k = int(word)
        stage = "init" if k == 0 else f"{ROUND_PREFIX}{k}"
        if stage not in stages:
            rounds = _rounds(stages)
            have = f"1..{rounds[-1]}" if rounds else "none"
            raise LineageError(
                f"round {k} is not recorded in dvc.lock (rounds recorded: {have}); "
                f"{_accepted(project)}"
            )
        return f"round {k}", stage, layout.model_weights(k).as_posix()
    if word in stages:
        return word, word, None
    path = _normalize(project.root, word)
    out = project.holder(project.fs_path(path))
    if out is None:
        raise LineageError(
            f"{word}: no stage in dvc.lock produces this path; {_accepted(project)}"
        )
    return path, out.stage.name, path
