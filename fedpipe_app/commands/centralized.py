"""``fedpipe centralized``: the same model trained on the pooled client data
(the baseline the federation is compared with)."""

from __future__ import annotations

import argparse

from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
    load,
)

NAME = "centralized"
EXAMPLES = [
    ("fedpipe centralized", "the pooled-data baseline of the same model"),
    ("fedpipe centralized --steps 1", "the one-step control"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe centralized`` on ``sub``."""
    central = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="train the same model on the pooled client data (the baseline)",
        description="Train the run's initial model (round 0) on the union of every "
        "client's training split, same optimizer, lr and batch size, for rounds x "
        "train.epochs epochs; evaluate on the held-out test set; write "
        "metrics/centralized.json. The federation's gap to this is the price of "
        "federating.",
    )
    central.add_argument(
        "--epochs",
        type=int,
        help="passes over the pooled data (default: rounds x train.epochs)",
    )
    central.add_argument("--batch-size", type=int, help="default: train.batch_size")
    central.add_argument(
        "--steps", type=int, help="stop after this many steps (the one-step control)"
    )
    central.set_defaults(func=cmd_centralized)
    return central


def cmd_centralized(args: argparse.Namespace) -> int:
    """``fedpipe centralized``: writes metrics/centralized.json, says its result."""
    params = load(PARAMS, sync=False)
    from fedpipe.config import layout
    from fedpipe.core.jsonio import read_json, write_json
    from fedpipe.core.weights import load_weights
    from fedpipe.data.ingest import open_features, read_samples
    from fedpipe.data.preprocess import read_transform
    from fedpipe.data.sources import prepared_spec
    from fedpipe.data.splits import federated_data
    from fedpipe.federation.build import federated_class_counts
    from fedpipe.model.centralized import train_centralized
    from fedpipe.model.training import ModelRunner, model_spec_for

    for needed in (layout.MANIFEST, layout.TRANSFORM, layout.model_weights(0)):
        if not needed.is_file():
            raise FileNotFoundError(
                f"{needed}: not found; run `fedpipe run` (or `dvc repro init`) first"
            )
    # the rows as the federation reads them: through the preprocess stage's
    # transform (its federated fit equals the pooled training rows' statistics)
    manifest = read_json(layout.MANIFEST)
    data = federated_data(
        open_features(layout.PREPARED_DIR),
        read_samples(layout.PREPARED_DIR),
        manifest,
        prepared_spec(layout.PREPARED_DIR),
        transform=read_transform(layout.TRANSFORM),
    )
    # train.class_weight: the same class weights as the federation's
    model = model_spec_for(
        params.model, params.train, data.spec, federated_class_counts(manifest)
    )
    epochs = args.epochs or params.federation.rounds * params.train.epochs
    _, record = train_centralized(
        ModelRunner(model),
        load_weights(layout.model_weights(0)),
        data,
        epochs=epochs,
        batch_size=args.batch_size or params.train.batch_size,
        seed=params.seed,
        steps=args.steps,
    )
    write_json(layout.CENTRALIZED_METRICS, record)
    g = record["global"]
    print(
        f"centralized: {record['steps']} steps ({epochs} epochs max, batch "
        f"{record['batch_size']}, {record['n_train']} samples): held-out acc "
        f"{g['accuracy']:.4f} loss {g['loss']:.4f} -> {layout.CENTRALIZED_METRICS}"
    )
    return 0
