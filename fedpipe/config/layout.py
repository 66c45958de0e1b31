"""Where each pipeline stage reads and writes, relative to the project root.

``dvc.yaml`` declares the same paths; ``tests/test_pipeline_sync.py`` checks that the
two agree, so a path is changed in both places or the tests fail.
"""

from __future__ import annotations

from pathlib import Path

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


def stage_names(rounds: int) -> list[str]:
    """Every DVC stage of the pipeline, in execution order."""
    return (
        ["mnist5k", "ingest", "validate", "partition", "preprocess", "init"]
        + [f"{ROUND_STAGE}@{k}" for k in range(1, rounds + 1)]
        + ["summary"]
    )
