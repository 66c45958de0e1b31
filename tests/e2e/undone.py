"""A run's project taken back to before some of its stages: cheaper than making
and running a project again up to that point.

The e2e modules that need a project whose data stages (or round 1) are done, and
the rest to do for real, copy the session's tiny run and undo its later stages:
a ``fedpipe run`` of a fresh copy spends about 5 s of CPU on the data stages
(imports of Great Expectations, the parquet files), a tiny run's rounds 2-4
0.3 s.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from fedpipe.config import layout

CACHE = Path(".dvc/cache/files/md5")


def _objects(outs: list[dict], cache: Path) -> set[str]:
    """The md5s of the cache objects ``outs`` (dvc.lock entries) record: a
    folder's ``.dir`` listing and every file in it."""
    found = set()
    for out in outs:
        md5 = str(out["md5"])
        found.add(md5)
        if md5.endswith(".dir"):
            listing = cache / md5[:2] / md5[2:]
            if listing.is_file():
                found |= {str(e["md5"]) for e in json.loads(listing.read_text())}
    return found


def undo_from(project: Path, first_round: int) -> Path:
    """Take ``project``'s recorded rounds ``first_round`` onwards and its summary
    back (round 0: ``init`` too), as if its run had stopped before them.

    Their ``dvc.lock`` records go, and every file they wrote
    (:func:`fedpipe.config.layout.unreached_outputs`); so do their objects in
    DVC's cache (those no kept stage records) and DVC's run cache, so that the
    next ``fedpipe run`` or ``dvc repro`` runs them for real and writes and
    caches every file anew, as after a real stop. ``project`` is returned.
    """
    lock_path = project / "dvc.lock"
    lock = yaml.safe_load(lock_path.read_text())
    stages: dict = lock["stages"]
    undone = {"summary"} | {n for n in stages if n.startswith("round@")}
    undone -= {f"round@{k}" for k in range(1, first_round)}
    if first_round == 0:
        undone.add("init")
    undone &= set(stages)
    cache = project / CACHE
    kept_objects = _objects(
        [o for n, s in stages.items() if n not in undone for o in s.get("outs", [])],
        cache,
    )
    gone_objects = _objects(
        [o for n in undone for o in stages[n].get("outs", [])], cache
    )
    rounds = max(int(n.partition("@")[2]) for n in stages if n.startswith("round@"))
    paths = layout.unreached_outputs(max(first_round, 1), rounds)
    if first_round == 0:
        paths.append(layout.model_dir(0))
    for path in map(project.joinpath, paths):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for md5 in gone_objects - kept_objects:
        (cache / md5[:2] / md5[2:]).unlink(missing_ok=True)
    shutil.rmtree(project / ".dvc/cache/runs", ignore_errors=True)
    for name in undone:
        del stages[name]
    lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
    return project
