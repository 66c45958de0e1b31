"""Record-level DP-SGD (``privacy.mechanism: dpsgd``) through the real CLI: a
tiny federation (3 clients, 2 a round, 2 rounds) by ``fedpipe run`` and by
``dvc repro`` in a copy holding the same secret key gives the same bits, and
every round's record carries each client's epsilon: the one an accountant built
here, by hand, from what the run did (the rounds each client trained in, its
records, the batch size, sigma, delta) finds, not fedpipe's own function."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import dp_accounting
import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main

from fedpipe.config import layout
from fedpipe.config.params import load_params
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.federation.clientstate import load_round_client_states
from fedpipe.observe.leaks import public_leaks

pytestmark = [
    pytest.mark.e2e,
]
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
PRIVACY = {"mechanism": "dpsgd", "noise_multiplier": 1.1, "clip_norm": 1.0}


def _epsilon_by_hand(q: float, sigma: float, steps: int, delta: float) -> dict:
    """DP-SGD's epsilon as TensorFlow Privacy and Opacus account it, built here
    from dp_accounting's parts and not from fedpipe's accountant: ``steps``
    steps, each a Poisson-sampled (rate ``q``) Gaussian of noise multiplier
    ``sigma``, add/remove-one neighbours; by PLD (what docs/privacy.md says the
    run reports) and by RDP (an independent, looser upper bound)."""
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    event = dp_accounting.SelfComposedDpEvent(step, steps)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    rdp = dp_accounting.rdp.RdpAccountant(list(range(2, 257)))  # add/remove-one
    return {
        "pld": pld.compose(event).get_epsilon(delta),
        "rdp": rdp.compose(event).get_epsilon(delta),
    }


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
    proc = run_main(run, by_run, cli_env)
    run_cli([FEDPIPE, "sync"], by_repro, cli_env)
    run_cli([DVC, "repro"], by_repro, cli_env)

    pattern = "models/round-*/**/*.npz"
    hashes = file_hashes(by_run, pattern)
    assert any("round-2" in name for name in hashes)
    assert hashes == file_hashes(by_repro, pattern)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("round")]
    assert len(lines) == 2 and all("(records, worst client)" in x for x in lines)

    params = yaml.safe_load((by_run / "params.yaml").read_text())
    batch, epochs = params["train"]["batch_size"], params["train"]["epochs"]
    delta = params["privacy"].get("delta", 1e-5)
    manifest = json.loads((by_run / layout.MANIFEST).read_text())
    n_train = {int(c["client"]): len(c["train"]) for c in manifest["clients"]}
    # the clients' books are theirs: kept under .fedpipe/, not in the DVC output
    assert not list((by_run / layout.client_state(2)).glob("client-*.npz"))
    states = load_round_client_states(by_run, 2)
    assert len(states) > 0
    assert public_leaks(by_run, load_params(by_run / "params.yaml")) == []
    trained = dict.fromkeys(n_train, 0)  # rounds each client trained in so far
    for k in (1, 2):
        record = json.loads((by_run / f"metrics/rounds/round-{k}.json").read_text())
        published = record["privacy"]
        assert published["level"] == "record" and published["view"] == "server"
        # the per-client books say who trained when: the oracle's, not published
        assert not {"epsilon_clients", "steps_clients", "stopped"} & set(published)
        oracle = json.loads((by_run / layout.oracle_record(k)).read_text())
        for row in oracle["clients"]:
            trained[int(row["client"])] += bool(row["selected"])
        privacy = oracle["summary"]["privacy"]
        # each step of each local epoch of each round a client trained in: steps
        # counted from what the run did, not read from its books
        books = {int(c): s for c, s in privacy["steps_clients"].items()}
        assert {c for c in n_train if trained[c]} <= set(books) <= set(n_train)
        steps = {c: trained[c] * epochs * math.ceil(n_train[c] / batch) for c in books}
        assert books == steps
        assert set(map(int, privacy["epsilon_clients"])) == set(steps)
        for c, eps in privacy["epsilon_clients"].items():
            if not steps[int(c)]:  # a client that has not trained spent nothing
                assert eps == 0.0
                continue
            q = min(1.0, batch / n_train[int(c)])
            sigma = PRIVACY["noise_multiplier"]
            by_hand = _epsilon_by_hand(q, sigma, steps[int(c)], delta)
            assert eps == pytest.approx(by_hand["pld"], abs=1e-6)
            assert eps <= by_hand["rdp"]  # PLD is the tighter of two valid bounds
        assert published["epsilon"] == max(privacy["epsilon_clients"].values())
    assert sorted(trained.values()) != [0] * len(trained)
    # each client's books are in its own state file, as a repro reads them
    for c, state in states.items():
        assert int(state["dpsgd"]["steps"]) == steps[c]
