"""``attack.*`` and the defenses' settings in params.yaml: bad input stops before
any work with one line naming the key; defaults plant nothing."""

from __future__ import annotations

from typing import Any

import pytest

from fedpipe.config.params import ParamsError, parse_params, round_chain
from fedpipe.federation.build import attack_plan_for, strategy_for


def _raw(**sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "round_chain": {str(k): v for k, v in round_chain(10).items()}
    }
    raw.update(sections)
    return raw


def _error(**sections: Any) -> str:
    with pytest.raises(ParamsError) as info:
        parse_params(_raw(**sections))
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_no_attack_by_default() -> None:
    params = parse_params(_raw())
    assert params.attack.name is None
    assert attack_plan_for(params) is None


def test_a_share_draws_fixed_malicious_clients() -> None:
    params = parse_params(
        _raw(federation={"clients": 20}, attack={"name": "alie", "share": 0.2})
    )
    plan = attack_plan_for(params)
    assert plan is not None and len(plan.malicious) == 4
    assert plan.malicious == attack_plan_for(params).malicious  # type: ignore[union-attr]
    listed = parse_params(_raw(attack={"name": "ipm", "clients": [3, 1], "epsilon": 2}))
    plan = attack_plan_for(listed)
    assert plan is not None and plan.malicious == (1, 3)
    assert plan.attack.epsilon == 2.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("sections", "key", "says"),
    [
        ({"attack": {"name": "zombie", "share": 0.1}}, "attack.name",
         "allowed: label_flip_all, label_flip_targeted, sign_flip, scaling, "
         "gaussian, alie, ipm"),
        ({"attack": {"name": "scaling", "share": 0.1, "scale": 0}}, "attack.scale",
         "> 0"),
        ({"attack": {"name": "sign_flip", "share": 0.1, "scale": -1}},
         "attack.scale", "> 0"),
        ({"attack": {"name": "sign_flip", "clients": [2, 10]}}, "attack.clients",
         "0..9"),
        ({"attack": {"name": "sign_flip", "share": 0.2, "clients": [1]}},
         "attack.share and attack.clients", "set one"),
        ({"attack": {"name": "sign_flip"}}, "attack.share", "attack.clients"),
        ({"attack": {"name": "sign_flip", "share": 1.5}}, "attack.share", "1"),
        ({"attack": {"name": "gaussian", "share": 0.1, "noise_std": 0}},
         "attack.noise_std", "0"),
        ({"attack": {"name": "sign_flip", "share": 0.5},
          "strategy": {"name": "fedmedian"}}, "attack.share", "minority"),
        ({"attack": {"name": "alie", "clients": [0, 1, 2, 3, 4, 5]},
          "strategy": {"name": "krum", "num_byzantine": 2}}, "attack.share",
         "strategy.name=krum"),
        ({"attack": {"name": "ipm", "share": 0.6},
          "strategy": {"name": "fedtrimmedavg"}}, "attack.share", "fedtrimmedavg"),
        ({"strategy": {"name": "bulyan", "num_byzantine": 2}},
         "strategy.num_byzantine", "4 * 2 + 3 = 11"),
        ({"strategy": {"name": "clipping", "clip_norm": 0}}, "strategy.clip_norm",
         "greater than 0"),
        ({"strategy": {"name": "clipping", "clip_norm": 1, "clip_quantile": 0.5}},
         "strategy.clip_norm and strategy.clip_quantile", "set one"),
        ({"strategy": {"name": "clipping", "clip_quantile": 1.5}},
         "strategy.clip_quantile", "1"),
    ],
)  # fmt: skip
def test_bad_input_names_the_key(sections: dict, key: str, says: str) -> None:
    message = _error(**sections)
    assert key in message and says in message, message


def test_a_majority_is_allowed_for_fedavg_and_bulyan_fits_enough_clients() -> None:
    parse_params(_raw(attack={"name": "sign_flip", "share": 0.6}))
    params = parse_params(
        _raw(
            federation={"clients": 20},
            strategy={"name": "bulyan", "num_byzantine": 4},
            attack={"name": "sign_flip", "share": 0.2},
        )
    )
    assert strategy_for(params).num_byzantine == 4  # type: ignore[attr-defined]
