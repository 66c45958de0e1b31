"""The registry: a new component is one file plus one line; every registered
component declares settings that hold; ``params.yaml`` cannot drift from them."""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from fedpipe.config.params import (
    AttackParams,
    ParamsError,
    PartitionParams,
    StrategyParams,
    parse_params,
    round_chain,
)
from fedpipe.config.sections import ComponentSection, declared_keys
from fedpipe.core import registry
from fedpipe.core.component import REQUIRED, Setting
from fedpipe.data.partition.deal import partition_table
from fedpipe_app.project import template_text

ROOT = Path(__file__).resolve().parents[1]
SECTIONS: dict[str, type[ComponentSection]] = {
    "strategy": StrategyParams,
    "partition": PartitionParams,
    "attack": AttackParams,
}
KINDS = ("strategy", "client", "partitioner", "attack")
COMPONENTS = [(kind, name) for kind in KINDS for name in registry.names(kind)]

# ---------------------------------------------------------------- a new strategy

FEDMIX = '''
"""FedMix: a share of FedAvg's mean mixed into the old global weights."""

from fedpipe.core.component import Setting
from fedpipe.strategy.aggregate import cast_like, weighted_average
from fedpipe.strategy.base import Strategy

MIX = Setting("mix", float, default=0.5, gt=0.0, le=1.0, help="share of the mean")


class FedMix(Strategy):
    name = "fedmix"
    settings = (MIX,)
    linear = True
    rounds = 0

    def __init__(self, *, mix=0.5):
        self.mix = self.checked(MIX, mix)

    def aggregate(self, global_weights, updates, state):
        type(self).rounds += 1
        mean = weighted_average(
            [u.weights for u in updates], [u.n_samples for u in updates], cast=False
        )
        new = [
            (1 - self.mix) * w.astype("float64") + self.mix * m
            for w, m in zip(global_weights, mean, strict=True)
        ]
        return cast_like(new, global_weights), {}
'''

HALVES = '''
"""Contiguous blocks of the pool, in order (no randomness)."""

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.data.partition.base import MIN_SAMPLES, Partitioner, validate_inputs

BLOCKS = Setting("blocks", int, default=1, ge=1, params_default=1, help="per client")


class BlocksPartitioner(Partitioner):
    name = "blocks"
    settings = (BLOCKS, MIN_SAMPLES)

    def __init__(self, *, blocks=1, min_samples=0):
        self.blocks, self.min_samples = blocks, min_samples

    def partition(self, labels, n_clients, rng, *, groups=None):
        labels = validate_inputs(labels, n_clients)
        pieces = np.array_split(np.arange(len(labels)), n_clients * self.blocks)
        return [
            np.sort(np.concatenate(pieces[k :: n_clients])).astype(np.int64)
            for k in range(n_clients)
        ]
'''


def _package(root: Path, monkeypatch: pytest.MonkeyPatch, **files: str) -> str:
    """A package ``newparts`` under ``root`` holding ``files`` (name -> source),
    importable for the test; returns its name."""
    package = root / "newparts"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in files.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(root))
    for module in [m for m in sys.modules if m.startswith("newparts")]:
        monkeypatch.delitem(sys.modules, module)
    return "newparts"


def _raw(**sections: Any) -> dict[str, Any]:
    return {
        "federation": {"clients": 6, "rounds": 1, "min_clients": 1},
        "round_chain": round_chain(1),
        **sections,
    }


def test_a_new_strategy_is_one_file_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers_fl import run_federation

    from fedpipe.federation.build import strategy_for

    package = _package(tmp_path, monkeypatch, fedmix=FEDMIX)
    with registry.registered("strategy", "fedmix", f"{package}.fedmix:FedMix"):
        params = parse_params(_raw(strategy={"name": "fedmix", "mix": 0.25}))
        assert params.strategy.mix == 0.25  # its own key, read from its class
        strategy = strategy_for(params)
        assert repr(strategy) == "FedMix(mix=0.25)"
        with pytest.raises(ParamsError, match=r"strategy\.mix: .*less than or equal"):
            parse_params(_raw(strategy={"name": "fedmix", "mix": 2}))
        # its traits are read where they matter: central DP fits a linear step
        parse_params(
            _raw(
                strategy={"name": "fedmix"},
                privacy={"mechanism": "central", "delta": 1e-3},
            )
        )
        (root := tmp_path / "run").mkdir()
        summaries = run_federation(
            root,
            clients=4,
            rounds=1,
            n_samples=300,
            strategy="fedmix",
            strategy_settings=params.strategy.settings(),
        )
        assert len(summaries) == 1 and type(strategy).rounds == 1
    with pytest.raises(ParamsError, match="strategy.name: unknown 'fedmix'"):
        parse_params(_raw(strategy={"name": "fedmix"}))


def test_a_new_partitioner_is_one_file_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(tmp_path, monkeypatch, blocks=HALVES)
    n = 40
    samples = pd.DataFrame(
        {"sample_id": [f"s{i:02d}" for i in range(n)], "label": np.arange(n) % 2}
    )
    with registry.registered(
        "partitioner", "blocks", f"{package}.blocks:BlocksPartitioner"
    ):
        assert "blocks" in PartitionParams.allowed_keys()  # a key of partition.*
        settings = {"blocks": 2, "min_samples": 1, "min_classes": 1}
        manifest = partition_table(
            samples,
            classes=[0, 1],
            seed=0,
            test_fraction=0.25,
            method="blocks",
            n_clients=3,
            local_test_fraction=0.0,
            dedupe=False,
            settings=settings,
        )
    assert manifest["method"] == "blocks"
    assert manifest["params"]["blocks"] == 2
    dealt = [s for c in manifest["clients"] for s in c["train"]]
    assert len(manifest["clients"]) == 3
    assert sorted(dealt + manifest["heldout"]) == sorted(samples["sample_id"])
    assert "blocks" not in PartitionParams.allowed_keys()


# ---------------------------------------------------------------- conformance


@pytest.mark.parametrize(("kind", "name"), COMPONENTS)
def test_registered_under_its_name_as_a_subclass_of_its_base(
    kind: str, name: str
) -> None:
    cls = registry.get(kind, name)
    assert cls.name == name
    assert issubclass(cls, registry.base_class(kind))


@pytest.mark.parametrize(("kind", "name"), COMPONENTS)
def test_declared_settings_hold(kind: str, name: str) -> None:
    cls = registry.get(kind, name)
    keywords = inspect.signature(cls.__init__).parameters
    for setting in cls.settings:
        assert isinstance(setting, Setting), f"{name}.{setting}: declare a Setting"
        assert setting.kind in (float, int, bool, str)
        param = keywords[setting]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        if setting.default is REQUIRED:
            assert param.default is inspect.Parameter.empty
        else:
            assert param.default == setting.default
            assert setting.default is None or setting.admits(setting.default)
        if setting.params_default is not None:
            assert setting.admits(setting.params_default)


@pytest.mark.parametrize(("kind", "name"), COMPONENTS)
def test_builds_from_what_params_yaml_gives_it(kind: str, name: str) -> None:
    cls = registry.get(kind, name)
    values: dict[str, Any] = {"total_clients": 4}
    for setting in cls.declared():
        if setting.params_default is not None:
            values[setting] = setting.params_default
    section = next((s for s in SECTIONS.values() if s.kind == kind), None)
    own = section.model_fields if section is not None else {}
    for key, field in own.items():  # the section's own keys: min_samples 10
        if key in cls.settings:
            values[key] = field.default
    component = cls.from_params(**values)
    for setting in cls.declared():
        assert hasattr(component, setting)


def _beyond(setting: Setting) -> Any:
    """A value of the setting's kind just outside its range."""
    if setting.ge is not None:
        return setting.kind(setting.ge - 1)
    if setting.gt is not None:
        return setting.kind(setting.gt)
    return setting.kind((setting.le if setting.le is not None else setting.lt) + 1)


RANGED = [
    (kind, name, setting)
    for kind, name in COMPONENTS
    for setting in registry.get(kind, name).declared()
    if setting.bounds()
]


@pytest.mark.parametrize(("kind", "name", "setting"), RANGED)
def test_a_value_out_of_range_is_refused_naming_its_key_and_range(
    kind: str, name: str, setting: Setting
) -> None:
    """Every component's constructor refuses it the one way (Setting.check)."""
    cls = registry.get(kind, name)
    values: dict[str, Any] = {
        s: s.params_default for s in cls.declared() if s.default is REQUIRED
    }
    if "total_clients" in cls.settings:
        values["total_clients"] = 4
    values[setting] = bad = _beyond(setting)
    with pytest.raises(ValueError) as info:
        cls(**values)
    section = "strategy" if kind == "client" else cls.section  # passed on by it
    assert str(info.value).startswith(
        f"{section}.{setting}: {bad!r} is out of range; allowed: "
    )
    assert f"{setting} {'>' if setting.bounds().keys() & {'ge', 'gt'} else '<'}" in (
        str(info.value)
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_shared_by_components_means_one_thing(kind: str) -> None:
    seen: dict[str, Setting] = {}
    for cls in registry.classes(kind).values():
        for setting in cls.declared():
            first = seen.setdefault(str(setting), setting)
            for what in ("kind", "ge", "gt", "le", "lt", "params_default", "note"):
                assert getattr(setting, what) == getattr(first, what), (
                    f"{kind} setting {setting}: {what} differs between components"
                )


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_own_keys_of_a_section_fit_the_components_that_read_them(
    section: str,
) -> None:
    model = SECTIONS[section]
    for cls in registry.classes(model.kind).values():
        for setting in cls.declared():
            field = model.model_fields.get(str(setting))
            if field is not None and field.default is not None:
                assert setting.admits(field.default), f"{cls.__name__}.{setting}"


# ---------------------------------------------------------------- params.yaml


def _sections(text: str) -> dict[str, dict[str, Any]]:
    raw = yaml.safe_load(text)
    return {name: raw[name] for name in SECTIONS}


@pytest.mark.parametrize(
    "text",
    [(ROOT / "params.yaml").read_text(), template_text("params.yaml")],
    ids=["params.yaml", "params.yaml.in"],
)
def test_the_commented_params_file_lists_every_declared_setting(text: str) -> None:
    for section, values in _sections(text).items():
        model = SECTIONS[section]
        assert sorted(values) == model.allowed_keys(), section
        declared = declared_keys(model.kind, tuple(model.model_fields))
        for key, setting in declared.items():
            assert values[key] == setting.params_default, f"{section}.{key}"
