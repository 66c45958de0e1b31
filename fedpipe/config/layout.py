"""Where each pipeline stage reads and writes, relative to the project root.

``dvc.yaml`` declares the same paths; ``tests/test_pipeline_sync.py`` checks that the
two agree, so a path is changed in both places or the tests fail.

:data:`RUN_FILES` classes every file a run writes, once: **public** (git-tracked
or a DVC output: what ``git push`` and ``dvc push`` send) or **private** (under
``.fedpipe/``, or git-ignored: never tracked, never pushed). docs/privacy.md's
inventory is :func:`inventory_markdown`'s table;
:func:`fedpipe.observe.leaks.public_leaks` checks a run's public files against
what they may hold under DP.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

RAW_DIR = Path("data/raw")
PREPARED_DIR = Path("data/prepared")
PREPARED_SCHEMA = PREPARED_DIR / "schema.json"
VALIDATION_DIR = Path("reports/validation")
MANIFEST = Path("data/partition/manifest.json")
PARTITION_REPORT_DIR = Path("reports/partition")
PREPROCESS_DIR = Path("data/preprocess")
TRANSFORM = PREPROCESS_DIR / "transform.json"
CLIENT_STATS = PREPROCESS_DIR / "stats.json"  # `fedpipe stats`
PREPROCESS_REPORT_DIR = Path("reports/preprocess")
SKEW_PNG = PREPROCESS_REPORT_DIR / "feature_skew.png"
MODELS_DIR = Path("models")
ROUND_METRICS_DIR = Path("metrics/rounds")
CLIENT_METRICS_DIR = Path("metrics/clients")
HEALTH_METRICS_DIR = Path("metrics/health")
HISTORY_CSV = Path("metrics/history.csv")
SUMMARY_METRICS = Path("metrics/summary.json")
SUMMARY_TABLE = Path("reports/summary.md")
REPORT_HTML = Path("reports/report.html")
CENTRALIZED_METRICS = Path(
    "metrics/centralized.json"
)  # `fedpipe centralized`  # `fedpipe report`; not a pipeline output

#: the secret key of DP noise (fedpipe.core.secretkey): ignored by git and DVC,
#: neither a dependency nor an output of any stage
DP_KEY = Path(".fedpipe/dp.key")
#: under DP, the simulation's oracle diagnostics of each round (per-client norms,
#: losses, the sampled set): beside the key, git- and dvc-ignored, no stage's out
ORACLE_DIR = Path(".fedpipe/oracle")
#: under DP, what the clients keep between rounds (personal models, control
#: variates: trained on their records without clip or noise) when any client
#: keeps anything: beside the key, git- and dvc-ignored, no stage's out; the
#: public ``models/round-K/clients`` then holds an index naming no client
#: (:func:`fedpipe.federation.clientstate.save_round_client_states`)
PRIVATE_CLIENT_STATE_DIR = Path(".fedpipe/clients")

ROUND_STAGE = "round"


def model_dir(round_: int) -> Path:
    """Directory of the global model after ``round_`` (0 = initial model)."""
    return MODELS_DIR / f"round-{round_}"


def model_weights(round_: int) -> Path:
    """Global weights after ``round_`` (0 = the initial model)."""
    return model_dir(round_) / "weights.npz"


def server_state(round_: int) -> Path:
    """The strategy's server state after ``round_`` (momentum, moments, ...)."""
    return model_dir(round_) / "server_state.npz"


def client_state(round_: int) -> Path:
    """Folder of what each client keeps across rounds
    (:mod:`fedpipe.federation.clientstate`)."""
    return model_dir(round_) / "clients"


def private_client_state(round_: int) -> Path:
    """Under DP, the folder of what each client keeps after ``round_``
    (:data:`PRIVATE_CLIENT_STATE_DIR`)."""
    return PRIVATE_CLIENT_STATE_DIR / f"round-{round_}"


def round_metrics(round_: int) -> Path:
    """The round's metrics: global test and client means."""
    return ROUND_METRICS_DIR / f"round-{round_}.json"


def client_metrics(round_: int) -> Path:
    """The round's per-client table."""
    return CLIENT_METRICS_DIR / f"round-{round_}.csv"


def health_metrics(round_: int) -> Path:
    """The round's health record (:func:`fedpipe.federation.health.round_health`)."""
    return HEALTH_METRICS_DIR / f"round-{round_}.json"


def oracle_record(round_: int) -> Path:
    """Round K's oracle view under DP (:mod:`fedpipe.federation.privacy.views`)."""
    return ORACLE_DIR / f"round-{round_}.json"


#: the ``summary`` stage's outputs (all rounds' history, the final metrics)
SUMMARY_OUTPUTS = (HISTORY_CSV, SUMMARY_METRICS, SUMMARY_TABLE)


def round_outputs(round_: int) -> list[Path]:
    """Every file and folder round K writes, published and private."""
    return [
        model_dir(round_),
        round_metrics(round_),
        client_metrics(round_),
        health_metrics(round_),
        oracle_record(round_),
        private_client_state(round_),
    ]


def unreached_outputs(first: int, rounds: int) -> list[Path]:
    """What rounds ``first`` .. ``rounds`` and the summary write: the outputs a
    federation stopped before round ``first`` does not reach, so that any of
    them on disk is an earlier run's."""
    out = [path for k in range(first, rounds + 1) for path in round_outputs(k)]
    return out + list(SUMMARY_OUTPUTS)


DEMO_STAGE = "mnist5k"
"""The stage that writes the built-in demo data (``data.source: mnist5k``); a
project whose data is its own has no such stage (:func:`stage_names`,
:func:`fedpipe_app.project.sync_demo_stage`)."""


def stage_names(rounds: int, source: str = DEMO_STAGE) -> list[str]:
    """Every DVC stage of the pipeline, in execution order, for data read from
    ``source`` (``data.source``): the demo-data stage only for the demo data."""
    demo = [DEMO_STAGE] if source == DEMO_STAGE else []
    return (
        demo
        + ["ingest", "validate", "partition", "preprocess", "init"]
        + [f"{ROUND_STAGE}@{k}" for k in range(1, rounds + 1)]
        + ["summary"]
    )


# ---------------------------------------------------------------- the inventory

PUBLIC = "public"
PRIVATE = "private"


@dataclass(frozen=True)
class RunFile:
    """A kind of file a run writes.

    Attributes
    ----------
    pattern : str
        Glob of its path relative to the project root (``*`` also crosses
        ``/``); the first matching entry of :data:`RUN_FILES` classes a file.
    access : str
        :data:`PUBLIC` or :data:`PRIVATE`.
    holds : str
        What it holds, and under DP what of the clients (one sentence).
    """

    pattern: str
    access: str
    holds: str

    def matches(self, relative: str | Path) -> bool:
        return fnmatch.fnmatchcase(PurePosixPath(relative).as_posix(), self.pattern)


RUN_FILES: tuple[RunFile, ...] = (
    RunFile(
        f"{DP_KEY.as_posix()}", PRIVATE, "the secret key of the DP noise (mode 0600)"
    ),
    RunFile(
        f"{ORACLE_DIR.as_posix()}/*",
        PRIVATE,
        "under DP, each round's oracle record: the sampled clients, their "
        "update norms, losses and own evaluations, the full client table",
    ),
    RunFile(
        f"{PRIVATE_CLIENT_STATE_DIR.as_posix()}/*",
        PRIVATE,
        "under DP, what each client keeps between rounds (personal models, "
        "control variates, DP-SGD books), trained without clip or noise",
    ),
    RunFile("logs/*", PRIVATE, "run logs (git-ignored)"),
    RunFile(
        REPORT_HTML.as_posix(),
        PRIVATE,
        "the HTML report (git-ignored); under DP it reads the oracle view",
    ),
    RunFile("models/*/model.keras", PRIVATE, "a Keras copy of a model (git-ignored)"),
    RunFile("params.yaml", PUBLIC, "the settings (git)"),
    RunFile("dvc.yaml", PUBLIC, "the pipeline (git)"),
    RunFile("dvc.lock", PUBLIC, "every stage output's hash (git)"),
    RunFile(f"{RAW_DIR.as_posix()}/*", PUBLIC, "the built-in demo data (DVC)"),
    RunFile(
        f"{PREPARED_DIR.as_posix()}/*",
        PUBLIC,
        "the ingested samples, labels and schema (DVC): the simulation's data",
    ),
    RunFile(f"{VALIDATION_DIR.as_posix()}/*", PUBLIC, "the data checks' results"),
    RunFile(
        MANIFEST.as_posix(),
        PUBLIC,
        "which samples each client holds: the simulation's setup, outside what "
        "epsilon covers",
    ),
    RunFile(
        f"{PARTITION_REPORT_DIR.as_posix()}/*",
        PUBLIC,
        "per-client class counts and skew of the partition (setup, outside "
        "epsilon; counts below preprocess.min_count_shown hidden)",
    ),
    RunFile(
        f"{PREPROCESS_DIR.as_posix()}/*",
        PUBLIC,
        "the federated transform and per-client column statistics (setup, "
        "outside epsilon; counts below preprocess.min_count_shown hidden)",
    ),
    RunFile(f"{PREPROCESS_REPORT_DIR.as_posix()}/*", PUBLIC, "the feature-skew plot"),
    RunFile(
        f"{MODELS_DIR.as_posix()}/round-*/clients/*",
        PUBLIC,
        "what clients keep between rounds; under DP, when any client keeps "
        "anything, only index.json naming no client (the state is private)",
    ),
    RunFile(
        f"{MODELS_DIR.as_posix()}/round-*",
        PUBLIC,
        "the global model and the server's state after round K (under DP: noised)",
    ),
    RunFile(
        f"{ROUND_METRICS_DIR.as_posix()}/*",
        PUBLIC,
        "each round's record; under DP the server's view: held-out evaluation, "
        "epsilon, settings",
    ),
    RunFile(
        f"{HEALTH_METRICS_DIR.as_posix()}/*",
        PUBLIC,
        "each round's health record; under DP the server's view: the model on "
        "the held-out set, dead units",
    ),
    RunFile(
        f"{CLIENT_METRICS_DIR.as_posix()}/*",
        PUBLIC,
        "each round's per-client table; under DP its header alone (no row: the "
        "rows would say who was sampled)",
    ),
    RunFile(HISTORY_CSV.as_posix(), PUBLIC, "one row per round, from the records"),
    RunFile(SUMMARY_METRICS.as_posix(), PUBLIC, "the last round's record"),
    RunFile(SUMMARY_TABLE.as_posix(), PUBLIC, "the final table"),
    RunFile(
        CENTRALIZED_METRICS.as_posix(),
        PUBLIC,
        "`fedpipe centralized`: one central model's evaluation (git)",
    ),
)


def classify(relative: str | Path) -> RunFile | None:
    """The :data:`RUN_FILES` entry of a path relative to the project root (None:
    not a file a run writes)."""
    return next((f for f in RUN_FILES if f.matches(relative)), None)


def is_public(relative: str | Path) -> bool:
    """Whether a run's file is public (git-tracked or a DVC output)."""
    entry = classify(relative)
    return entry is not None and entry.access == PUBLIC


def inventory_markdown() -> str:
    """:data:`RUN_FILES` as the Markdown table docs/privacy.md holds."""
    lines = ["| path | class | holds |", "| --- | --- | --- |"]
    for f in RUN_FILES:
        lines.append(f"| `{f.pattern}` | {f.access} | {f.holds} |")
    return "\n".join(lines) + "\n"
