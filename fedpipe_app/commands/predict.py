"""``fedpipe predict``: score a raw table with a round's global model."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpipe.core.errors import SettingError
from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
    load,
)

NAME = "predict"
EXAMPLES = [
    ("fedpipe predict new.csv", "final global model -> predictions.csv"),
    ("fedpipe predict new.csv --round 3", "round 3's global model"),
    ("fedpipe predict new.csv --out scored.csv", "somewhere else"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe predict`` on ``sub``."""
    predict = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="score a raw table with the final global model (or round K's)",
        description="Reads TABLE (CSV or Parquet) with the feature columns the run "
        "was trained on, raw as in data.path (other columns are ignored), and "
        "writes one line per row: its id (data.id_column, else row-1, row-2, ...), "
        "the predicted class and each class's probability. The model it scores "
        "with is saved first as models/round-K/model.keras: the round's global "
        "weights behind the preprocess stage's fitted transform, so "
        "keras.saving.load_model() of that file takes the same raw rows outside "
        "fedpipe (docs/own-data.md).",
    )
    predict.add_argument("table", type=Path, metavar="TABLE", help="the rows to score")
    predict.add_argument(
        "--round",
        type=int,
        dest="round_",
        metavar="K",
        help="the global model after round K (default: the final round)",
    )
    predict.add_argument(
        "--out",
        type=Path,
        default=Path("predictions.csv"),
        help="where to write the predictions (default: predictions.csv)",
    )
    predict.set_defaults(func=cmd_predict)
    return predict


def cmd_predict(args: argparse.Namespace) -> int:
    """``fedpipe predict``: writes the predictions, says where."""
    params = load(PARAMS, sync=False)
    from fedpipe.model.scoring import score_table

    rounds = params.federation.rounds
    round_ = rounds if args.round_ is None else args.round_
    if not 0 <= round_ <= rounds:
        raise SettingError(
            f"--round {round_}: this run has rounds 0..{rounds} (federation.rounds)"
        )
    from fedpipe_app import tfnotices

    with tfnotices.quiet():  # TensorFlow's E0000 line of a predict with strings
        result = score_table(
            args.table,
            model=params.model,
            train=params.train,
            id_column=params.data.id_column,
            round_=round_,
            out=args.out,
        )
    print(
        f"predict: {result.rows} rows of {args.table} scored by round {round_}'s "
        f"global model ({result.model_file}) -> {args.out}"
    )
    if result.notes:
        print(f"note: {result.notes}")
    return 0
