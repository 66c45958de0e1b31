"""Record-level DP-SGD (``privacy.mechanism: dpsgd``) through the real CLI: a
tiny federation (3 clients, 2 a round, 2 rounds) by ``fedpipe run`` and by
``dvc repro`` in a copy holding the same secret key gives the same bits, and
every round's record carries each client's epsilon from the accountant."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli

from fedpipe.config import layout
from fedpipe.config.params import load_params
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.federation.clientstate import load_round_client_states
from fedpipe.federation.privacy.accountant import dpsgd_epsilon
from fedpipe.observe.leaks import public_leaks

pytestmark = [
    pytest.mark.e2e,
]
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
PRIVACY = {"mechanism": "dpsgd", "noise_multiplier": 1.1, "clip_norm": 1.0}


def _dpsgd(project: Path) -> None:
    path = project / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params.pop("round_chain", None)
    params["federation"] = {**params["federation"], "rounds": 2}
    params["privacy"] = {**(params.get("privacy") or {}), **PRIVACY}
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def test_dpsgd_run_and_dvc_repro_same_bits_with_the_same_key(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    by_run, by_repro = tmp_path / "run", tmp_path / "repro"
    shutil.copytree(tiny_run["project"], by_run, symlinks=True)
    _dpsgd(by_run)
    load_or_create_key(by_run / layout.DP_KEY)  # the key both copies hold
    shutil.copytree(by_run, by_repro, symlinks=True)

    run = [FEDPIPE, "run", "--no-server-start", "--no-report"]
    proc = run_cli(run, by_run, cli_env)
    run_cli([FEDPIPE, "sync"], by_repro, cli_env)
    run_cli([DVC, "repro"], by_repro, cli_env)

    pattern = "models/round-*/**/*.npz"
    hashes = file_hashes(by_run, pattern)
    assert any("round-2" in name for name in hashes)
    assert hashes == file_hashes(by_repro, pattern)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("round")]
    assert len(lines) == 2 and all("(records, worst client)" in x for x in lines)

    manifest = json.loads((by_run / layout.MANIFEST).read_text())
    n_train = {int(c["client"]): len(c["train"]) for c in manifest["clients"]}
    # the clients' books are theirs: kept under .fedpipe/, not in the DVC output
    assert not list((by_run / layout.client_state(2)).glob("client-*.npz"))
    states = load_round_client_states(by_run, 2)
    assert len(states) > 0
    assert public_leaks(by_run, load_params(by_run / "params.yaml")) == []
    for k in (1, 2):
        record = json.loads((by_run / f"metrics/rounds/round-{k}.json").read_text())
        published = record["privacy"]
        assert published["level"] == "record" and published["view"] == "server"
        # the per-client books say who trained when: the oracle's, not published
        assert not {"epsilon_clients", "steps_clients", "stopped"} & set(published)
        oracle = json.loads((by_run / layout.oracle_record(k)).read_text())
        privacy = oracle["summary"]["privacy"]
        steps = {int(c): s for c, s in privacy["steps_clients"].items()}
        for c, eps in privacy["epsilon_clients"].items():
            expected = dpsgd_epsilon(
                min(1.0, 32 / n_train[int(c)]), 1.1, steps[int(c)], 1e-5
            )
            assert eps == pytest.approx(expected, abs=1e-6)
        assert published["epsilon"] == max(privacy["epsilon_clients"].values())
    # each client's books are in its own state file, as a repro reads them
    for c, state in states.items():
        books = int(state["dpsgd"]["steps"])
        assert books == steps[c]
        assert books % math.ceil(n_train[c] / 32) == 0
