"""Where every built-in component lives: one table per kind, one line per component.

A line maps the name ``params.yaml`` uses to ``"module:Class"``; the class is
imported only when it is looked up (:func:`get`), so reading the names costs
nothing and this module imports no other layer. A user's own component is a
reference instead of a name (``path/to/file.py:Name`` or ``package.module:Name``,
:mod:`fedpipe.core.plugins`), resolved by :func:`resolve`.

Adding a built-in is its file plus its line here: the name lists
(``STRATEGY_NAMES``, ...), the ``params.yaml`` schema of its settings and the
factories (``make_strategy``, ``make_partitioner``, ...) read this table.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fedpipe.core import plugins
from fedpipe.core.errors import ParamsError, SettingError

STRATEGIES = {
    "fedavg": "fedpipe.strategy.fedavg:FedAvg",
    "fedprox": "fedpipe.strategy.fedprox:FedProx",
    "fedavgm": "fedpipe.strategy.fedavgm:FedAvgM",
    "fedadam": "fedpipe.strategy.fedadam:FedAdam",
    "fedyogi": "fedpipe.strategy.fedyogi:FedYogi",
    "fedadagrad": "fedpipe.strategy.fedadagrad:FedAdagrad",
    "fedmedian": "fedpipe.strategy.fedmedian:FedMedian",
    "fedtrimmedavg": "fedpipe.strategy.fedtrimmedavg:FedTrimmedAvg",
    "krum": "fedpipe.strategy.krum:Krum",
    "multikrum": "fedpipe.strategy.multikrum:MultiKrum",
    "scaffold": "fedpipe.strategy.scaffold:Scaffold",
    "bulyan": "fedpipe.strategy.bulyan:Bulyan",
    "clipping": "fedpipe.strategy.clipping:Clipping",
    "fednova": "fedpipe.strategy.fednova:FedNova",
}

CLIENT_ALGORITHMS = {
    "sgd": "fedpipe.client.sgd:LocalSGD",
    "fedprox": "fedpipe.client.fedprox:FedProxClient",
    "scaffold": "fedpipe.client.scaffold:ScaffoldClient",
}

PARTITIONERS = {
    "iid": "fedpipe.data.partition.iid:IidPartitioner",
    "dirichlet": "fedpipe.data.partition.dirichlet:DirichletPartitioner",
    "pathological": "fedpipe.data.partition.pathological:PathologicalPartitioner",
    "shards": "fedpipe.data.partition.shards:ShardsPartitioner",
    "quantity": "fedpipe.data.partition.quantity:QuantitySkewPartitioner",
    "natural": "fedpipe.data.partition.natural:NaturalIdPartitioner",
    "continuous": "fedpipe.data.partition.continuous:ContinuousPartitioner",
}

ATTACKS = {
    "label_flip_all": "fedpipe.federation.attacks.label_flip_all:LabelFlipAll",
    "label_flip_targeted": (
        "fedpipe.federation.attacks.label_flip_targeted:TargetedLabelFlip"
    ),
    "sign_flip": "fedpipe.federation.attacks.sign_flip:SignFlip",
    "scaling": "fedpipe.federation.attacks.scaling:Scaling",
    "gaussian": "fedpipe.federation.attacks.gaussian:Gaussian",
    "alie": "fedpipe.federation.attacks.alie:Alie",
    "ipm": "fedpipe.federation.attacks.ipm:Ipm",
}

MODELS = {
    "small_cnn": "fedpipe.model.zoo:small_cnn",
    "seed_cnn": "fedpipe.model.zoo:seed_cnn",
    "mlp": "fedpipe.model.zoo:mlp",
    "deep_mlp": "fedpipe.model.zoo:deep_mlp",
    "cnn": "fedpipe.model.zoo:cnn",
    "resnet": "fedpipe.model.zoo:resnet",
}

#: built-in models with normalization layers (what ``personalization.method:
#: fedbn`` keeps local): name -> (the ``model.*`` setting that adds them, its
#: default); the others have none. Checked against the built models by
#: tests/test_models.py, so that params can be refused before any stage runs.
NORMALIZING_MODELS = {"cnn": ("batch_norm", False), "resnet": ("batch_norm", True)}


def has_normalization(name: str, settings: dict[str, object]) -> bool | None:
    """Whether the built-in model ``name`` with ``settings`` (``model.*``) has
    normalization layers; None for a user's model (known once it is built)."""
    if name not in MODELS:
        return None
    if name not in NORMALIZING_MODELS:
        return False
    key, default = NORMALIZING_MODELS[name]
    value = settings.get(key)
    return bool(default if value is None else value)


@dataclass(frozen=True)
class Kind:
    """A kind of component: its table, the key that names one, its base class.

    Attributes
    ----------
    key : str
        The dotted param key whose value picks a component (``strategy.name``).
    table : dict of str to str
        Built-in name -> ``"module:Class"``.
    base : str or None
        ``"module:Class"`` of the base a user's class must subclass (None: user
        references are functions, as model builders).
    """

    key: str
    table: dict[str, str]
    base: str | None = None


KINDS: dict[str, Kind] = {
    "strategy": Kind("strategy.name", STRATEGIES, "fedpipe.strategy.base:Strategy"),
    "client": Kind(
        "client.algorithm", CLIENT_ALGORITHMS, "fedpipe.client.base:ClientAlgorithm"
    ),
    "partitioner": Kind(
        "partition.method", PARTITIONERS, "fedpipe.data.partition.base:Partitioner"
    ),
    "attack": Kind("attack.name", ATTACKS, "fedpipe.federation.attacks.base:Attack"),
    "model": Kind("model.name", MODELS),
}


def kind_of(kind: str) -> Kind:
    """The :class:`Kind` called ``kind`` (``"strategy"``, ``"partitioner"``, ...)."""
    try:
        return KINDS[kind]
    except KeyError:
        raise KeyError(
            f"no component kind {kind!r}; kinds: {', '.join(KINDS)}"
        ) from None


def base_class(kind: str) -> type:
    """The class every component of ``kind`` subclasses (``Strategy``, ...)."""
    spec = kind_of(kind)
    if spec.base is None:
        raise TypeError(f"{kind} components are functions, not classes")
    base: type = _load(spec.base)
    return base


def names(kind: str) -> tuple[str, ...]:
    """The built-in names of ``kind``, in table order (imports nothing)."""
    return tuple(kind_of(kind).table)


def is_builtin(kind: str, name: Any) -> bool:
    """Whether ``name`` is a built-in of ``kind``."""
    return isinstance(name, str) and name in kind_of(kind).table


def get(kind: str, name: str) -> Any:
    """The built-in class (or function) registered as ``name``.

    Raises
    ------
    ParamsError
        ``<key>: unknown 'x'; allowed: <the built-in names, sorted>``.
    """
    if not is_builtin(kind, name):
        raise ParamsError(unknown(kind, name))
    return _load(kind_of(kind).table[name])


def classes(kind: str) -> dict[str, Any]:
    """Every built-in of ``kind`` by name, in table order (imports them all)."""
    return {name: get(kind, name) for name in names(kind)}


def resolve(kind: str, name: str, *, key: str | None = None) -> Any:
    """The class a ``params.yaml`` value stands for: a built-in, or a reference
    to a subclass of the kind's base in the user's code.

    Parameters
    ----------
    key : str, optional
        The param key for messages (default the kind's, e.g. ``strategy.name``).

    Raises
    ------
    ParamsError
        An unknown name (listing the built-ins) or a reference that does not fit.
    """
    spec = kind_of(kind)
    key = key or spec.key
    if plugins.is_reference(name):
        if spec.base is None:
            return plugins.load_object(name, key=key)
        return plugins.load_subclass(name, base_class(kind), key=key)
    if not is_builtin(kind, name):
        raise ParamsError(
            f"params.yaml: {unknown(kind, name, key=key)} or path/to/file.py:ClassName"
        )
    return get(kind, name)


def unknown(kind: str, name: Any, *, key: str | None = None) -> str:
    """``<key>: unknown 'x'; allowed: a, b, c`` (built-ins sorted)."""
    allowed = ", ".join(sorted(names(kind)))
    return f"{key or kind_of(kind).key}: unknown {name!r}; allowed: {allowed}"


@contextmanager
def registered(kind: str, name: str, target: str) -> Iterator[None]:
    """Add ``name: "module:Class"`` to the ``kind`` table for the block: what a
    new built-in's line does, for a test."""
    table = kind_of(kind).table
    if name in table:
        raise SettingError(f"{kind} {name!r} is registered already")
    table[name] = target
    try:
        yield
    finally:
        del table[name]


def _load(target: str) -> Any:
    """The object ``"package.module:Name"`` names (its module imported once)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
