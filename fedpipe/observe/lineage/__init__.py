"""Lineage audit: from an artifact back to the raw data, verified against dvc.lock.

``dvc.lock`` records, for every stage that ran, its command, the params it read and
the md5 of each input and output. The audit walks from a target artifact up
through the stages that produced its inputs to the raw data, and checks the
record against the project as it is now:

* **changed** - a file or directory on disk no longer has the md5 ``dvc.lock``
  records for it (directories are compared file by file when DVC's cache holds
  the recorded listing);
* **missing** - a recorded output or input is not on disk;
* **altered** / **uncached** - a recorded model output's object in DVC's cache
  is not its md5 or is gone (:mod:`fedpipe.observe.cachecheck`; DVC itself
  trusts a read-only cache file without hashing it), flagged as ``cache``;
* **stale** - the record no longer fits together: a stage ran on an input whose
  md5 differs from what the upstream stage now records, a param in
  ``params.yaml`` differs from the value the stage read, or ``dvc.yaml`` now gives
  the stage a different command (or no longer defines it).

Everything about DVC - reading ``dvc.lock`` and ``dvc.yaml``, templating, hashes,
``.dvcignore``, the cache - is DVC's own code, called from
:mod:`fedpipe.observe.lineage.dvcstate` (the one module of fedpipe that imports DVC), so
the audit says what DVC would say.

Modules: ``dvcstate`` (DVC's record and view of the disk), ``targets`` (what the
command line names), ``checks`` (one stage's checks), ``records`` (fedpipe's own
records about a stage), ``git`` (git state, reported, never flagged), ``result``
(what an audit finds), ``formats`` (text, JSON, Mermaid), ``chain`` (the audit).

Typical use::

    lineage = audit(Path("."), ["round", "4"])
    print(format_text(lineage))
    raise SystemExit(0 if lineage.verified else 1)
"""

from fedpipe.observe.lineage.chain import audit
from fedpipe.observe.lineage.dvcstate import expected_commands
from fedpipe.observe.lineage.formats import format_json, format_mermaid, format_text
from fedpipe.observe.lineage.git import GitState, git_state
from fedpipe.observe.lineage.result import (
    Check,
    Flag,
    Lineage,
    LineageError,
    RawData,
    StageAudit,
)
from fedpipe.observe.lineage.targets import resolve_target

__all__ = [
    "Check",
    "Flag",
    "GitState",
    "Lineage",
    "LineageError",
    "RawData",
    "StageAudit",
    "audit",
    "expected_commands",
    "format_json",
    "format_mermaid",
    "format_text",
    "git_state",
    "resolve_target",
]
