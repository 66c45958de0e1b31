"""A round from and to the project's files.

:func:`load_round` reads round K's inputs (round K-1's model, server and client
state, the data, the round's settings); :func:`write_round` writes its versioned
outputs, :func:`write_health` the health record of a round aggregation refused.
Paths are the project's (:mod:`fedpipe.config.layout`), relative to the working
directory.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedpipe.config import layout
from fedpipe.config.params import Params
from fedpipe.core import atomic
from fedpipe.core.jsonio import read_json
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.core.weights import load_state, load_weights, save_state, save_weights
from fedpipe.data.splits import input_spec
from fedpipe.federation.build import model_spec, needs_key, round_inputs
from fedpipe.federation.clientstate import (
    load_round_client_states,
    save_round_client_states,
)
from fedpipe.federation.privacy.views import write_round_records
from fedpipe.federation.round import RoundInputs, RoundOutputs
from fedpipe.model.process import data_for


def load_round(params: Params, round_: int) -> RoundInputs:
    """Round K's inputs: the data, round K-1's model, server and client state, and
    the round's settings from ``params``."""
    # the clients' label counts, for train.class_weight: balanced only (the
    # manifest grows with the clients: 1.2 MB, 30-90 ms a round at 1,000)
    balanced = params.train.class_weight == "balanced"
    spec = model_spec(
        params,
        input_spec(layout.PREPARED_DIR, layout.TRANSFORM),
        read_json(layout.MANIFEST) if balanced else None,
    )
    return round_inputs(
        params,
        round_=round_,
        spec=spec,
        data=data_for(layout.PREPARED_DIR, layout.MANIFEST, layout.TRANSFORM),
        weights=load_weights(layout.model_weights(round_ - 1)),
        server_state=load_state(layout.server_state(round_ - 1)),
        client_states=load_round_client_states(Path("."), round_ - 1),
        key=noise_key(params),
    )


def noise_key(params: Params) -> bytes | None:
    """The project's secret key of DP noise (``.fedpipe/dp.key``, created at
    first use), or None: no privacy, or ``privacy.noise_key:
    params_not_private``."""
    return load_or_create_key(layout.DP_KEY) if needs_key(params) else None


def write_health(health: dict, round_: int, params: Params) -> None:
    """Write a round's health record when aggregation refused the round (under
    DP its server view, the full record in the oracle's)."""
    write_round_records(
        Path("."),
        round_,
        summary=None,
        health=health,
        table=None,
        private=params.split_views(),
        publish_oracle=params.privacy.publish_oracle,
    )


def write_round(outputs: RoundOutputs, round_: int, params: Params) -> pd.DataFrame:
    """Write round K's versioned outputs: model, server and client state, metrics,
    per-client table and health record; under DP the published records keep
    the server's view and the oracle's go to ``.fedpipe/oracle/round-K.json``
    (:mod:`fedpipe.federation.privacy.views`), and the clients' state to
    ``.fedpipe/clients/round-K`` (:mod:`fedpipe.federation.clientstate`).
    Returns the published per-client table. Written without flushing each file
    to disk (:func:`fedpipe.core.atomic.unflushed`): DVC versions them all."""
    with atomic.unflushed():
        return _write_round(outputs, round_, params)


def _write_round(outputs: RoundOutputs, round_: int, params: Params) -> pd.DataFrame:
    record = outputs.record
    save_weights(layout.model_weights(round_), outputs.weights)
    save_state(layout.server_state(round_), outputs.server_state)
    # under DP the clients' state is theirs: kept in .fedpipe/, not published
    save_round_client_states(
        Path("."),
        round_,
        outputs.client_states,
        private=params.split_views(),
    )
    table = write_round_records(
        Path("."),
        round_,
        summary=record.summary(),
        health=outputs.health,
        table=record.client_table(),
        private=params.split_views(),
        publish_oracle=params.privacy.publish_oracle,
    )
    assert table is not None
    return table
