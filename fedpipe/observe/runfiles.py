"""A finished (or half-finished) run's recorded files, read once.

:func:`load_run` reads what the pipeline wrote under a project directory (paths
from :mod:`fedpipe.config.layout`) into one frozen :class:`RunFiles`: the per-round
metrics, health records and client tables, ``params.yaml`` (as written and as
typed settings), the prepared data's schema and labels, the partition manifest and
report, the outputs ``dvc.lock`` records and the git commit. The doctor
(:mod:`fedpipe.observe.doctor`) and the report (:mod:`fedpipe.observe.report`) both read
a run through it, so each file format is parsed in one place.

Every part may be missing (left empty or ``None``). A part that exists but cannot
be read does not stop the others: its exception is kept in
:attr:`RunFiles.errors`, and :meth:`RunFiles.require` raises it for a caller that
cannot do without that part.

Also here, once, the small text helpers the doctor, the report and the lineage
share: :func:`fmt`, :func:`rounds_text`, :func:`flat_params`, :func:`git` and
:func:`git_output`.

Nothing here imports Prefect, DVC or TensorFlow; numpy, pandas and the typed
settings are imported when a part needs them, so importing this module is cheap.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedpipe.config import layout
from fedpipe.core.git import git, git_output  # noqa: F401 - the run's git, re-exported

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from fedpipe.config.params import Params

__all__ = [
    "CLASS_COUNTS_CSV",
    "DVC_LOCK",
    "FEATURES_NPY",
    "PARAMS_YAML",
    "PARTS",
    "SAMPLES_PARQUET",
    "SKEW_JSON",
    "Commit",
    "RunFiles",
    "flat_params",
    "fmt",
    "git",
    "git_output",
    "load_run",
    "numbered_files",
    "read_commit",
    "read_lock_inputs",
    "read_lock_outs",
    "report_is_current",
    "rounds_text",
    "stale_views",
    "foreign_files",
    "foreign_round_files",
    "round_files",
    "unread_files",
]

PARAMS_YAML = Path("params.yaml")
DVC_LOCK = Path("dvc.lock")
SAMPLES_PARQUET = layout.PREPARED_DIR / "samples.parquet"
CLASS_COUNTS_CSV = layout.PARTITION_REPORT_DIR / "class_counts.csv"
SKEW_JSON = layout.PARTITION_REPORT_DIR / "skew.json"
FEATURES_NPY = layout.PREPARED_DIR / "features.npy"
#: rows of a prepared table read at a time for its column statistics
_COLUMN_CHUNK_ROWS = 2**14
#: PyYAML's safe loader on libyaml when PyYAML was built with it (the same data,
#: several times faster on a long ``dvc.lock``), else its pure-Python one
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: files the views read that are a stage's output of their own (a file, not a
#: folder, in ``dvc.lock``), besides the per-round records (:func:`stale_views`)
VIEW_OUTS = (layout.MANIFEST, layout.CLIENT_STATS, layout.HISTORY_CSV)

#: the parts :func:`load_run` reads, each kept or failed on its own (the keys of
#: :attr:`RunFiles.errors`)
PARTS = (
    "rounds",
    "health",
    "clients",
    "history",
    "params",
    "config",
    "schema",
    "samples",
    "manifest",
    "class_counts",
    "skew",
    "columns",
    "lock",
)


@dataclass(frozen=True)
class Commit:
    """The git state of the project directory.

    Attributes
    ----------
    sha : str or None
        ``HEAD``'s commit; ``None`` outside a repository or before a commit.
    dirty : int or None
        Changed or untracked paths (``git status --porcelain`` lines); ``None``
        without a commit.
    repository : bool
        The directory is in a git work tree (``fedpipe init`` makes one, with no
        commit: ``sha`` is ``None`` until the first).
    """

    sha: str | None = None
    dirty: int | None = None
    repository: bool = False


@dataclass(frozen=True)
class RunFiles:
    """What :func:`load_run` read; every part may be missing (empty / ``None``).

    Attributes
    ----------
    root : Path
        The project directory.
    rounds : dict of int to dict
        ``metrics/rounds/round-K.json`` by ascending round K.
    health : dict of int to dict
        ``metrics/health/round-K.json``
    (:func:`fedpipe.federation.health.round_health`). clients : dict of int to
        pandas.DataFrame ``metrics/clients/round-K.csv``: one row per client.
    history : pandas.DataFrame or None
        ``metrics/history.csv``, read only when no round file exists (the report
        falls back to it).
    params : dict or None
        ``params.yaml`` as written (``{}`` for an empty file).
    config : Params or None
        The same, as typed settings; ``None`` when they do not validate.
    schema : dict or None
        ``data/prepared/schema.json``.
    labels, sample_ids : numpy.ndarray or None
        Label and id of every readable prepared sample
        (``data/prepared/samples.parquet``, status ``ok``), in file order.
    manifest : dict or None
        ``data/partition/manifest.json``.
    class_counts : pandas.DataFrame or None
        ``reports/partition/class_counts.csv``, columns named as strings.
    skew : dict or None
        ``reports/partition/skew.json``.
    columns : list of dict or None
        Per feature column of a prepared *table* (``schema.json`` ``source``
        ``"table"``; ``None`` for images), from ``data/prepared/features.npy``
        as ingested: ``name``, ``count`` (finite values), ``mean``, ``std``,
        ``rms`` (root mean square: the size the model's first layer sees) and
        ``max_abs`` (see :func:`column_statistics`).
    lock_outs : list of dict or None
        Every stage's outs in ``dvc.lock`` (see :func:`read_lock_outs`); ``None``
        without a lock file.
    commit : Commit
        The git state (:func:`read_commit`).
    view : str
        Which view of a DP run's rounds was read
        (:mod:`fedpipe.federation.privacy.views`): ``oracle`` (the oracle records
        of ``.fedpipe/oracle/`` replaced the published ones), ``server`` (DP, no
        oracle records: the published server view only) or ``full`` (no DP, or
        ``privacy.publish_oracle``: the records hold everything).
    ignored : tuple of str
        One line per file a view would have read that is not of the run
        ``dvc.lock`` records (:func:`foreign_round_files`; an oracle record
        written beside other published records than the ones read), left
        unread: ``"<path>: <why>"``.
    read_files : tuple of str
        The per-round records read (:data:`ROUND_RECORDS`), relative to
        ``root``: what :func:`stale_views` checks.
    errors : dict of str to Exception
        A part (one of :data:`PARTS`) that exists but could not be read, with
        the exception reading it raised.
    """

    root: Path
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)
    health: dict[int, dict[str, Any]] = field(default_factory=dict)
    clients: dict[int, pd.DataFrame] = field(default_factory=dict)
    history: pd.DataFrame | None = None
    params: dict[str, Any] | None = None
    config: Params | None = None
    schema: dict[str, Any] | None = None
    labels: np.ndarray | None = None
    sample_ids: np.ndarray | None = None
    manifest: dict[str, Any] | None = None
    class_counts: pd.DataFrame | None = None
    skew: dict[str, Any] | None = None
    columns: list[dict[str, Any]] | None = None
    lock_outs: list[dict[str, Any]] | None = None
    commit: Commit = Commit()
    view: str = "full"
    ignored: tuple[str, ...] = ()
    read_files: tuple[str, ...] = ()
    errors: dict[str, Exception] = field(default_factory=dict)

    @property
    def view_text(self) -> str | None:
        """One line saying which view of a DP run was read (None: ``full``), and
        one more naming the files left unread as not of this run, if any."""
        lines = [VIEW_TEXT.get(self.view), self.secure_text, ignored_text(self.ignored)]
        return "\n".join(line for line in lines if line) or None

    @property
    def secure_text(self) -> str | None:
        """What the doctor and the report cannot see under secure aggregation
        (None without it): the server, and so every record, holds only the sum
        of each round's updates."""
        rounds = self.rounds.values()
        if not any("secure_aggregation" in (r.get("wire") or {}) for r in rounds):
            return None
        return SECURE_TEXT

    @property
    def n_classes(self) -> int | None:
        """Classes the model was built for (its loss expects 0 .. C-1)."""
        return None if self.schema is None else len(self.schema["classes"])

    def require(self, *parts: str) -> None:
        """Raise the exception that reading the first failed of ``parts`` raised.

        Raises
        ------
        ValueError
            If a name is not one of :data:`PARTS`.
        Exception
            Whatever reading that part raised (``JSONDecodeError``, ``OSError``,
            ...), unchanged.
        """
        unknown = [p for p in parts if p not in PARTS]
        if unknown:
            raise ValueError(f"unknown run parts {unknown}; known: {', '.join(PARTS)}")
        for part in parts:
            if part in self.errors:
                raise self.errors[part]


#: what the doctor and the report say of the view they read (none for ``full``)
VIEW_TEXT = {
    "oracle": (
        "View: oracle. This private run's per-client diagnostics (norms, losses, the "
        f"sampled clients) were read from {layout.ORACLE_DIR}/, which is not "
        "published (git- and dvc-ignored); the published records hold the "
        "server's view only."
    ),
    "server": (
        "View: server. This private run's published records hold only what the server "
        "may release (the model, epsilon under DP, its own held-out evaluation); "
        f"without the oracle records ({layout.ORACLE_DIR}/) the per-client "
        "diagnostics are not available, so findings that need them are silent."
    ),
}


#: what the doctor and the report say under secure aggregation
SECURE_TEXT = (
    "Secure aggregation: the server saw only the sum of each round's updates, so "
    "no record holds a client's update; the checks that read one (update norms "
    "and cosines, aggregation weights, outlying and attacking clients, "
    "per-client norm statistics) have nothing to read and are silent."
)


# ---------------------------------------------------------------- reading


def numbered_files(folder: Path, suffix: str) -> dict[int, Path]:
    """``round-K<suffix>`` files in ``folder`` by ascending K (``{}`` if none)."""
    out = {}
    for path in Path(folder).glob(f"round-*{suffix}"):
        number = path.name.removeprefix("round-").removesuffix(suffix)
        if number.isdigit():
            out[int(number)] = path
    return dict(sorted(out.items()))


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _read_yaml(path: Path) -> Any:
    """The YAML file at ``path`` as :func:`yaml.safe_load` reads it."""
    return yaml.load(path.read_text(), Loader=_SAFE_LOADER)


def _json_rounds(files: Mapping[int, Path]) -> dict[int, dict[str, Any]]:
    return {k: _read_json(p) for k, p in files.items()}


def _client_tables(files: Mapping[int, Path]) -> dict[int, pd.DataFrame]:
    import pandas as pd

    return {k: pd.read_csv(p) for k, p in files.items()}


def _typed(params: dict[str, Any] | None, source: Path) -> Params | None:
    from fedpipe.config.params import ParamsError, parse_params

    if params is None:
        return None
    try:
        return parse_params(params, source=str(source))
    except ParamsError:
        return None


def _samples(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np
    import pyarrow.parquet as pq

    # one file's columns, without pyarrow.dataset (pandas.read_parquet imports it)
    columns = ["sample_id", "label", "status"]
    table = pq.ParquetFile(path).read(columns=columns).to_pandas()
    table = table[table["status"] == "ok"]
    return (
        table["label"].to_numpy(dtype=np.int64),
        table["sample_id"].astype(str).to_numpy(),
    )


def column_statistics(
    path: Path, names: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Per column of the 2-D features file at ``path``: its finite values'
    ``count``, ``mean``, ``std``, ``rms`` and ``max_abs`` (``None`` when it has
    none), with its ``name`` (``names``, else ``"column <j>"``).

    Read in chunks of rows from a memory map, in float64, so a large table costs
    one pass and bounded memory.

    Raises
    ------
    ValueError
        If the array is not 2-D (one row per sample, one column per feature).
    """
    import numpy as np

    features = np.load(path, mmap_mode="r")
    if features.ndim != 2:
        raise ValueError(f"features of shape {features.shape}, not (rows, columns)")
    n_columns = features.shape[1]
    count = np.zeros(n_columns)
    total, squares, peak = np.zeros(n_columns), np.zeros(n_columns), np.zeros(n_columns)
    for start in range(0, features.shape[0], _COLUMN_CHUNK_ROWS):
        block = np.asarray(features[start : start + _COLUMN_CHUNK_ROWS], np.float64)
        finite = np.isfinite(block)
        values = np.where(finite, block, 0.0)
        count += finite.sum(axis=0)
        total += values.sum(axis=0)
        squares += np.square(values).sum(axis=0)
        peak = np.maximum(peak, np.abs(values).max(axis=0, initial=0.0))
    labels = list(names) if names and len(names) == n_columns else None
    out = []
    for j in range(n_columns):
        row: dict[str, Any] = {
            "name": labels[j] if labels else f"column {j}",
            "count": int(count[j]),
            "mean": None,
            "std": None,
            "rms": None,
            "max_abs": None,
        }
        if count[j]:
            mean, square = total[j] / count[j], squares[j] / count[j]
            row.update(
                mean=float(mean),
                std=float(math.sqrt(max(square - mean * mean, 0.0))),
                rms=float(math.sqrt(square)),
                max_abs=float(peak[j]),
            )
        out.append(row)
    return out


def read_lock_stages(path: Path) -> dict[str, dict[str, Any]] | None:
    """The ``stages`` of the ``dvc.lock`` at ``path`` (``None``: no such file)."""
    if not path.is_file():
        return None
    lock = _read_yaml(path) or {}
    return {str(k): v or {} for k, v in (lock.get("stages") or {}).items()}


def read_lock_outs(path: Path) -> list[dict[str, Any]] | None:
    """Every stage's outs in the ``dvc.lock`` at ``path``, in lock order.

    Returns
    -------
    list of dict or None
        ``{"stage", "path", "md5", "size", "nfiles"}`` per out (missing keys
        ``None``); ``None`` if there is no such file.
    """
    stages = read_lock_stages(path)
    if stages is None:
        return None
    return [
        {
            "stage": str(stage),
            "path": str(out["path"]),
            "md5": out.get("md5"),
            "size": out.get("size"),
            "nfiles": out.get("nfiles"),
        }
        for stage, entry in stages.items()
        for out in entry.get("outs") or []
    ]


#: the per-round records the views read: folder, file suffix
ROUND_RECORDS = (
    (layout.ROUND_METRICS_DIR, ".json"),
    (layout.HEALTH_METRICS_DIR, ".json"),
    (layout.CLIENT_METRICS_DIR, ".csv"),
)


def out_hashes(stages: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each output path ``dvc.lock``'s ``stages`` record -> its md5."""
    return {
        str(out["path"]): out.get("md5")
        for entry in stages.values()
        for out in entry.get("outs") or []
    }


def chained_rounds(stages: Mapping[str, Mapping[str, Any]]) -> set[int]:
    """The rounds K whose ``round@K`` record in ``dvc.lock`` (``stages``) is of
    the run it records: built on what the lock records for its inputs (the
    ``init`` stage's model for round 1, round K-1's for round K, the prepared
    data, the partition), round 1 to K without a gap.

    A record left by an earlier run is not: a later run that rewrote round K-1
    (or the data) and stopped before round K (a privacy budget stop, a kill)
    leaves round K's record naming the old round K-1's hashes.
    """
    produced = out_hashes(stages)

    def built_on_recorded(entry: Mapping[str, Any]) -> bool:
        return all(
            produced.get(str(dep["path"]), dep.get("md5")) == dep.get("md5")
            for dep in entry.get("deps") or []
        )

    out: set[int] = set()
    if "init" in stages and not built_on_recorded(stages["init"]):
        return out
    k = 1
    while f"round@{k}" in stages and built_on_recorded(stages[f"round@{k}"]):
        out.add(k)
        k += 1
    return out


def foreign_round_files(root: Path) -> dict[str, str]:
    """Each per-round record under ``root`` (:data:`ROUND_RECORDS`) that is not
    of the run ``dvc.lock`` records, with why. Without a ``dvc.lock`` only the
    rounds beyond ``federation.rounds`` are not (nothing else ties a file to a
    run then).

    A file is of the recorded run when ``dvc.lock`` records it with these bytes,
    in a round record that is of the run (:func:`chained_rounds`), and its round
    is not beyond ``federation.rounds``. Not of it: a round a run stopped before
    recording (Ctrl-C, a kill, a full disk), a round an earlier, longer run left
    (DVC removes neither the files nor their records when the rounds are fewer),
    a round an earlier run recorded that a later run did not reach (a privacy
    budget stop over an earlier run's rounds), a file changed since.

    Raises
    ------
    Exception
        Whatever reading ``dvc.lock`` raised (a malformed lock file).
    """
    from fedpipe.federation.privacy.views import file_md5

    root = Path(root)
    stages = read_lock_stages(root / DVC_LOCK)
    planned = _planned_rounds(root)
    chained = chained_rounds(stages or {})
    recorded = out_hashes(stages or {})
    out = {}
    for folder, suffix in ROUND_RECORDS:
        for k, path in numbered_files(root / folder, suffix).items():
            name = path.relative_to(root).as_posix()
            if planned is not None and k > planned:
                out[name] = (
                    f"round {k} is beyond federation.rounds ({planned}) in "
                    "params.yaml: an earlier, longer run's"
                )
            elif stages is None:
                continue  # no recorded run: only the params tie a file to it
            elif name not in recorded:
                out[name] = (
                    f"not recorded in {DVC_LOCK}: a run stopped before recording it"
                )
            elif file_md5(path) != recorded[name]:
                out[name] = f"not the file {DVC_LOCK} records (changed since)"
            elif k not in chained:
                out[name] = (
                    f"{DVC_LOCK}'s record of round {k} was built on another round "
                    f"{k - 1} or other data than the ones recorded: an earlier "
                    "run's, which a later run stopped before reaching"
                )
    return out


def round_files(
    root: Path, folder: Path, suffix: str, foreign: Mapping[str, str] | None = None
) -> dict[int, Path]:
    """``round-K<suffix>`` files in ``root / folder`` of the run ``dvc.lock``
    records, by ascending K (:func:`numbered_files` less
    :func:`foreign_round_files`, or less ``foreign`` when given)."""
    if foreign is None:
        try:
            foreign = foreign_round_files(root)
        except Exception:  # noqa: BLE001 - an unreadable lock ties nothing
            foreign = {}
    return {
        k: path
        for k, path in numbered_files(Path(root) / folder, suffix).items()
        if path.relative_to(root).as_posix() not in foreign
    }


def read_lock_inputs(path: Path, data_path: str) -> list[dict[str, Any]]:
    """The dependencies on ``data_path`` (``data.path``: the data the run read)
    that ``dvc.lock`` at ``path`` records, as :func:`read_lock_outs`' dicts; one
    per path (the first stage that reads it); ``[]`` without a lock file."""
    if not path.is_file():
        return []
    lock = _read_yaml(path) or {}
    found: dict[str, dict[str, Any]] = {}
    for stage, entry in (lock.get("stages") or {}).items():
        for dep in (entry or {}).get("deps") or []:
            where = str(dep.get("path", "")).rstrip("/")
            if where == data_path.rstrip("/") and where not in found:
                found[where] = {
                    "stage": str(stage),
                    "path": where,
                    "md5": dep.get("md5"),
                    "size": dep.get("size"),
                    "nfiles": dep.get("nfiles"),
                }
    return list(found.values())


def report_is_current(root: Path, rounds: int) -> bool:
    """Whether ``reports/report.html`` is there and no older than the run's
    last metrics (its last round's record and ``metrics/summary.json``)."""
    root = Path(root)
    metrics = [layout.round_metrics(rounds), layout.SUMMARY_METRICS]
    try:
        written = (root / layout.REPORT_HTML).stat().st_mtime_ns
        return all(
            written >= (root / m).stat().st_mtime_ns
            for m in metrics
            if (root / m).exists()
        )
    except OSError:
        return False


def read_commit(root: Path) -> Commit:
    """``HEAD``'s commit and the number of changed paths of the repository at
    ``root`` (both ``None`` outside a repository or before its first commit), and
    whether ``root`` is in a repository."""
    sha = git_output(root, "rev-parse", "--verify", "-q", "HEAD")
    status = git_output(root, "status", "--porcelain") if sha else None
    dirty = None if status is None else len(status.splitlines())
    inside = (
        bool(sha) or git_output(root, "rev-parse", "--is-inside-work-tree") == "true"
    )
    return Commit(sha=sha or None, dirty=dirty, repository=inside)


def load_run(root: Path) -> RunFiles:
    """Read the files of the run under ``root``.

    Missing files leave their part empty; a file that cannot be read leaves it
    empty too and keeps the exception in :attr:`RunFiles.errors` (so this never
    raises for a run's content). ``metrics/history.csv`` is read only when no
    ``metrics/rounds/round-K.json`` exists.
    """
    root = Path(root)
    parts: dict[str, Any] = {}
    errors: dict[str, Exception] = {}

    def read(part: str, path: Path, reader: Callable[[Path], Any]) -> None:
        if not path.exists():
            return
        try:
            parts[part] = reader(path)
        except Exception as exc:  # kept for require(): one bad file spoils no other
            errors[part] = exc

    read("lock", root / DVC_LOCK, read_lock_outs)
    try:
        foreign = foreign_round_files(root) if "lock" in parts else {}
    except Exception:  # noqa: BLE001 - an unreadable lock ties nothing (errors)
        foreign = {}
    ignored: list[str] = [f"{name}: {why}" for name, why in foreign.items()]
    files = {
        part: round_files(root, folder, suffix, foreign)
        for part, (folder, suffix) in zip(
            ("rounds", "health", "clients"), ROUND_RECORDS, strict=True
        )
    }
    read(
        "rounds",
        root / layout.ROUND_METRICS_DIR,
        lambda _: _json_rounds(files["rounds"]),
    )
    read(
        "health",
        root / layout.HEALTH_METRICS_DIR,
        lambda _: _json_rounds(files["health"]),
    )
    read(
        "clients",
        root / layout.CLIENT_METRICS_DIR,
        lambda _: _client_tables(files["clients"]),
    )
    if not files["rounds"]:
        read("history", root / layout.HISTORY_CSV, _read_csv)
    read("params", root / PARAMS_YAML, lambda p: _read_yaml(p) or {})
    if "params" in parts:
        read("config", root / PARAMS_YAML, lambda p: _typed(parts["params"], p))
    read("schema", root / layout.PREPARED_SCHEMA, _read_json)
    read("samples", root / SAMPLES_PARQUET, _samples)
    read("manifest", root / layout.MANIFEST, _read_json)
    read("class_counts", root / CLASS_COUNTS_CSV, _read_csv)
    read("skew", root / SKEW_JSON, _read_json)
    schema = parts.get("schema")
    if isinstance(schema, dict) and schema.get("source") == "table":
        names = schema.get("feature_names")
        read("columns", root / FEATURES_NPY, lambda p: column_statistics(p, names))
    view = _with_oracle(root, parts, ignored, foreign)
    labels, sample_ids = parts.pop("samples", (None, None))
    return RunFiles(
        root=root,
        labels=labels,
        sample_ids=sample_ids,
        lock_outs=parts.pop("lock", None),
        commit=read_commit(root),
        view=view,
        ignored=tuple(ignored),
        read_files=tuple(
            path.relative_to(root).as_posix()
            for part, numbered in files.items()
            if part in parts
            for path in numbered.values()
        ),
        errors=errors,
        **parts,
    )


def _with_oracle(
    root: Path,
    parts: dict[str, Any],
    ignored: list[str],
    foreign: Mapping[str, str] | None = None,
) -> str:
    """Put the oracle records of ``.fedpipe/oracle/`` in place of the published
    rounds, health records and client tables; the view read. An oracle record
    that is not of the published records it would replace is left unread, with
    a line in ``ignored`` (:func:`oracle_problem`)."""
    import pandas as pd

    from fedpipe.federation.privacy.views import full_records

    oracle = {}
    for k, path in numbered_files(root / layout.ORACLE_DIR, ".json").items():
        try:
            record = _read_json(path)
            problem = oracle_problem(root, record, foreign)
            if problem is not None:
                ignored.append(f"{layout.oracle_record(k)}: {problem}")
                continue
            oracle[k] = full_records(record)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    for k, (summary, health, clients) in oracle.items():
        if summary:
            parts.setdefault("rounds", {})[k] = summary
        parts.setdefault("health", {})[k] = health
        if clients:
            parts.setdefault("clients", {})[k] = pd.DataFrame(clients)
    for part in ("rounds", "health", "clients"):
        if part in parts:
            parts[part] = dict(sorted(parts[part].items()))
    if oracle:
        return "oracle"
    published = [*parts.get("rounds", {}).values(), *parts.get("health", {}).values()]
    if any(_server_view(record) for record in published):
        return "server"
    return "full"


def oracle_problem(
    root: Path, record: Any, foreign: Mapping[str, str] | None = None
) -> str | None:
    """Why the oracle record ``record`` is not of the round whose published
    records are under ``root`` (None: it is).

    The oracle record carries the md5 of each record its round published
    beside it (:data:`fedpipe.federation.privacy.views.BELONGS_TO`); it belongs
    while those files are still the ones there, the files the views read (after
    a finished run, the hashes ``dvc.lock`` records). A round rewritten by a
    later run (one without DP, another DP run), a round's records removed, or an
    oracle record of a fedpipe that wrote no tie: not this run's. Nor is one
    tied to published records that are not of the run ``dvc.lock`` records
    (``foreign``, :func:`foreign_round_files`).
    """
    from fedpipe.federation.privacy.views import BELONGS_TO, file_md5

    tie = record.get(BELONGS_TO) if isinstance(record, dict) else None
    if not isinstance(tie, dict) or not tie:
        return (
            "names no published record it belongs to (written by an older "
            "fedpipe); not read"
        )
    for path, md5 in tie.items():
        published = root / path
        if not published.is_file():
            return f"its round's {path} is gone; not read"
        if file_md5(published) != md5:
            return (
                f"written beside another {path} than this run's (md5 {md5}); not read"
            )
        if foreign and path in foreign:
            return f"its round's {path} is not of the recorded run; not read"
    return None


def foreign_files(project_root: Path) -> list[str]:
    """One line per file under ``project_root`` that ``fedpipe status``,
    ``doctor`` or ``report`` would read were it of the run ``dvc.lock`` records,
    and that is not ([]: every such file is), ``"<path>: <why>"``.

    - An oracle record (``.fedpipe/oracle/round-K.json``) not of the round's
      published records (:func:`oracle_problem`).
    - A round's published record (:data:`ROUND_RECORDS`) not of the recorded run
      (:func:`foreign_round_files`: never recorded, changed since, beyond
      ``federation.rounds``, or of a round record built on other inputs).
    - The other files the views read that are a stage's output of their own
      (:data:`VIEW_OUTS`: the partition manifest, the clients' statistics, the
      history), when not the bytes ``dvc.lock`` records. Files inside a folder
      output (``data/prepared``, ``reports/partition``, ...) are not checked
      here (their folder's hash is DVC's; ``dvc status`` checks it).

    The views leave the first two kinds unread and say so
    (:attr:`RunFiles.ignored`); they read the third (:func:`stale_views`).
    Pure: reads the project's files, writes nothing.
    """
    from fedpipe.federation.privacy.views import file_md5

    root = Path(project_root)
    try:
        out = unread_files(root, strict=True)
    except Exception as exc:  # noqa: BLE001 - an unreadable lock is a finding
        return [f"{DVC_LOCK}: not readable ({type(exc).__name__})"]
    outs = read_lock_outs(root / DVC_LOCK)
    recorded = {o["path"]: o["md5"] for o in outs or [] if o["md5"]}
    for path in VIEW_OUTS if outs is not None else ():
        name = path.as_posix()
        if not (root / path).is_file():
            continue
        if name not in recorded:
            out.append(f"{name}: not recorded in {DVC_LOCK}")
        elif file_md5(root / path) != recorded[name]:
            out.append(
                f"{name}: not the file {DVC_LOCK} records (md5 {recorded[name]})"
            )
    return out


def unread_files(root: Path, *, strict: bool = False) -> list[str]:
    """The files the views leave unread as not of the run ``dvc.lock``
    records, ``"<path>: <why>"`` (:attr:`RunFiles.ignored`): oracle records not
    of their round's published records, then published round records not of
    the run (:func:`foreign_round_files`). A ``dvc.lock`` that cannot be read
    ties nothing (``strict``: raise what reading it raised)."""
    try:
        foreign = foreign_round_files(root)
    except Exception:
        if strict:
            raise
        foreign = {}
    out = stale_oracle_records(root, foreign)
    return out + [f"{name}: {why}" for name, why in foreign.items()]


def stale_views(project_root: Path) -> list[str]:
    """One line per file ``fedpipe status``, ``doctor`` or ``report`` *reads*
    that is not of the run ``dvc.lock`` records ([]: the views read only this
    run's files): the per-round records :func:`load_run` read
    (:attr:`RunFiles.read_files`) and the stage outputs of :data:`VIEW_OUTS`,
    each checked against :func:`foreign_files`. Files left on disk that the
    views do not read (another run's, said in :attr:`RunFiles.ignored`) are not
    in it. Without a ``dvc.lock`` there is no recorded run: [].
    """
    root = Path(project_root)
    if not (root / DVC_LOCK).is_file():
        return []
    why = dict(line.split(": ", 1) for line in foreign_files(root))
    if DVC_LOCK.as_posix() in why:
        return [f"{DVC_LOCK}: {why[DVC_LOCK.as_posix()]}"]
    read = [*load_run(root).read_files, *(p.as_posix() for p in VIEW_OUTS)]
    return [f"{name}: {why[name]}" for name in read if name in why]


def _planned_rounds(root: Path) -> int | None:
    """``federation.rounds`` in ``root``'s ``params.yaml`` (None: not readable)."""
    try:
        params = _read_yaml(root / PARAMS_YAML) or {}
        rounds = (params.get("federation") or {}).get("rounds")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None


def stale_oracle_records(
    root: Path, foreign: Mapping[str, str] | None = None
) -> list[str]:
    """One line per oracle record under ``root`` that is not of its round's
    published records (:func:`oracle_problem`, with ``foreign`` the published
    records not of the recorded run; an unreadable one too)."""
    out = []
    for k, path in numbered_files(Path(root) / layout.ORACLE_DIR, ".json").items():
        try:
            problem = oracle_problem(root, _read_json(path), foreign)
        except (OSError, ValueError) as exc:
            problem = f"not readable ({type(exc).__name__}); not read"
        if problem is not None:
            out.append(f"{layout.oracle_record(k)}: {problem}")
    return out


def ignored_text(ignored: Sequence[str]) -> str | None:
    """One line naming the files the views left unread as not of the run
    ``dvc.lock`` records, grouped by why (None if none); ``ignored`` holds
    ``"<path>: <why>"`` lines (:attr:`RunFiles.ignored`)."""
    if not ignored:
        return None
    by_reason: dict[str, list[str]] = {}
    for line in ignored:
        name, _, reason = line.partition(": ")
        reason = re.sub(r"\bround \d+", "round K", reason)
        by_reason.setdefault(reason, []).append(name)
    said = "; ".join(
        f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()
    )
    return (
        f"Not read: {len(ignored)} file(s) not of the run dvc.lock records: {said}. "
        "`fedpipe run` (or `dvc repro`) writes this run's; or delete them."
    )


def _server_view(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    privacy = record.get("privacy")
    return record.get("view") == "server" or (
        isinstance(privacy, dict) and privacy.get("view") == "server"
    )


def _read_csv(path: Path) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(path).rename(columns=str)


# ---------------------------------------------------------------- text


def fmt(value: Any, digits: int = 4, *, decimals: bool = False) -> str:
    """A value for a person to read.

    Parameters
    ----------
    value : Any
        A number, or anything else (shown as ``str(value)``).
    digits : int, optional
        Significant digits of a non-integer number (default 4); with
        ``decimals``, digits after the point.
    decimals : bool, optional
        Fixed-point (``0.1000``) rather than significant digits (``0.1``).

    Returns
    -------
    str
        ``"n/a"`` for ``None`` and NaN; integers as they are.
    """
    if value is None:
        return "n/a"
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)
        if math.isnan(number):
            return "n/a"
        return f"{number:.{digits}{'f' if decimals else 'g'}}"
    return str(value)


def rounds_text(rounds: Sequence[int]) -> str:
    """``"round 3"``, ``"rounds 2, 5"``, or ``"rounds 1-4"`` for 3+ consecutive."""
    rounds = sorted(rounds)
    if len(rounds) > 2 and rounds == list(range(rounds[0], rounds[-1] + 1)):
        return f"rounds {rounds[0]}-{rounds[-1]}"
    label = "round" if len(rounds) == 1 else "rounds"
    return f"{label} " + ", ".join(str(r) for r in rounds)


def flat_params(
    params: Mapping[str, Any], *, prefix: str = "", keep_empty: bool = False
) -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` -> ``[("a.b", 1)]``, in mapping order.

    ``keep_empty`` keeps an empty mapping as a value of its own (``("a", {})``)
    rather than dropping it.
    """
    flat: list[tuple[str, Any]] = []
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and (value or not keep_empty):
            flat.extend(flat_params(value, prefix=f"{name}.", keep_empty=keep_empty))
        else:
            flat.append((name, value))
    return flat
