"""Client algorithms, one per file, behind :class:`fedpipe.client.base.ClientAlgorithm`.

A strategy names the client algorithm it needs (``Strategy.client_algorithm``:
FedProx's proximal clients, SCAFFOLD's corrected ones, plain SGD otherwise);
``client.algorithm`` in ``params.yaml`` may name another one, built in or your own
(``path/to/file.py:ClassName``). Personalization (:mod:`fedpipe.client.personal`)
wraps whichever it is.
"""

from __future__ import annotations

from typing import Any

from fedpipe.client.base import (
    ClientAlgorithm,
    ClientReply,
    ClientState,
    ClientTask,
    LocalFit,
    LocalTrainer,
    LocalTraining,
    pack,
    unpack,
)
from fedpipe.client.fedprox import FedProxClient
from fedpipe.client.personal import Ditto, FedBN, FedPer, FineTune, KeptLayers
from fedpipe.client.scaffold import ScaffoldClient
from fedpipe.client.sgd import LocalSGD
from fedpipe.core import registry
from fedpipe.core.errors import ParamsError

CLIENT_ALGORITHMS: dict[str, type[ClientAlgorithm]] = registry.classes("client")
"""The built-in client algorithms by name (the registry's table, resolved)."""


def client_class(
    name: str | type, *, key: str = "client.algorithm"
) -> type[ClientAlgorithm]:
    """The class a client-algorithm name or reference stands for.

    Raises
    ------
    ParamsError
        Unknown name; a reference that is missing or not a ClientAlgorithm.
    """
    if isinstance(name, type):
        if not issubclass(name, ClientAlgorithm):
            raise ParamsError(
                f"params.yaml: {key}: its client algorithm {name.__name__} is not a "
                "subclass of fedpipe.client.base.ClientAlgorithm"
            )
        return name
    return registry.resolve("client", name, key=key)


def make_client(
    name: str | type, *, key: str = "client.algorithm", **settings: Any
) -> ClientAlgorithm:
    """The client algorithm ``name`` built from its settings.

    Raises
    ------
    ParamsError
        As :func:`client_class`, or a setting the class refuses (naming the key).
    """
    cls = client_class(name, key=key)
    try:
        return cls.from_settings(**settings)
    except (TypeError, ValueError) as exc:
        label = name.__name__ if isinstance(name, type) else name
        raise ParamsError(f"params.yaml: {key}={label!r}: {exc}") from None


__all__ = [
    "CLIENT_ALGORITHMS",
    "ClientAlgorithm",
    "ClientReply",
    "ClientState",
    "ClientTask",
    "Ditto",
    "FedBN",
    "FedPer",
    "FedProxClient",
    "FineTune",
    "KeptLayers",
    "LocalFit",
    "LocalSGD",
    "LocalTrainer",
    "LocalTraining",
    "ScaffoldClient",
    "client_class",
    "make_client",
    "pack",
    "unpack",
]
