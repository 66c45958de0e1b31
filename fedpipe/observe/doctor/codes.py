"""The doctor's finding codes: stable ids that scripts, reports and tests match on.

Each is the ``code`` of one kind of :class:`~fedpipe.observe.doctor.findings.Finding`;
write them through these names, never as string literals.
"""

from __future__ import annotations

LABELS_OUTSIDE_LOSS_RANGE = "labels-outside-loss-range"
# rows dropped as repeats before the held-out split
# (fedpipe.observe.doctor.rows_dropped)
ROWS_DROPPED = "rows-dropped"
# table columns on scales far apart, fed to the model raw
# (fedpipe.observe.doctor.inputs)
INPUTS_UNSCALED = "inputs-unscaled"
LEARNING_RATE_TOO_HIGH = "learning-rate-too-high"
AGGREGATION_WEIGHTS_NOT_NORMALIZED = "aggregation-weights-not-normalized"
CLIENT_UPDATE_OUTLIER = "client-update-outlier"
NORM_STATISTICS_DISAGREE = "norm-statistics-disagree"
CLIENT_DRIFT = "client-drift"
LOSS_RISING_ACCURACY_HOLDS = "loss-rising-accuracy-holds"
NOT_LEARNING = "not-learning"
HEALTH_RECORDS_MISSING = "health-records-missing"
# clients left out of rounds (fedpipe.observe.doctor.failures)
ROUND_STOPPED_CLIENTS_LOST = "round-stopped-clients-lost"
CLIENTS_FAILED = "clients-failed"
CLIENT_UPDATES_NONFINITE = "client-updates-nonfinite"
CLIENTS_DROPPED_OUT = "clients-dropped-out"
# a round whose updates were fewer than the strategy needs kept the model
ROUND_MODEL_KEPT = "round-model-kept"
# personal models at chance while the round's step budget cut their fits
PERSONAL_MODELS_STARVED = "personal-models-starved"
PRIVACY_NOISE_DOMINATES = "privacy-noise-dominates"
CLIENTS_AGAINST_FEDERATION = "clients-against-federation"
# the server's own step (fedpipe.observe.doctor.server_step)
SERVER_STEP_TOO_LARGE = "server-step-too-large"
# a model that learned and then fell back, or died (fedpipe.observe.doctor.collapse)
ACCURACY_COLLAPSED = "accuracy-collapsed"
PREDICTIONS_CONSTANT = "predictions-constant"
# rare classes and short local training (fedpipe.observe.doctor.rare_classes)
PREDICTS_MAJORITY_CLASS = "predicts-majority-class"
UNDER_TRAINED = "under-trained"
DEAD_UNITS = "dead-units"
# files the doctor could not read, checks it could not run
# (fedpipe.observe.doctor.reading)
RECORDS_UNREADABLE = "records-unreadable"

#: every code, root causes before the symptoms they cause
ALL = (
    LABELS_OUTSIDE_LOSS_RANGE,
    ROWS_DROPPED,
    INPUTS_UNSCALED,
    SERVER_STEP_TOO_LARGE,
    ACCURACY_COLLAPSED,
    LEARNING_RATE_TOO_HIGH,
    AGGREGATION_WEIGHTS_NOT_NORMALIZED,
    CLIENTS_AGAINST_FEDERATION,
    CLIENT_UPDATE_OUTLIER,
    NORM_STATISTICS_DISAGREE,
    CLIENT_DRIFT,
    PRIVACY_NOISE_DOMINATES,
    LOSS_RISING_ACCURACY_HOLDS,
    PREDICTIONS_CONSTANT,
    PREDICTS_MAJORITY_CLASS,
    UNDER_TRAINED,
    DEAD_UNITS,
    NOT_LEARNING,
    HEALTH_RECORDS_MISSING,
    RECORDS_UNREADABLE,
    ROUND_STOPPED_CLIENTS_LOST,
    ROUND_MODEL_KEPT,
    PERSONAL_MODELS_STARVED,
    CLIENTS_FAILED,
    CLIENT_UPDATES_NONFINITE,
    CLIENTS_DROPPED_OUT,
)
