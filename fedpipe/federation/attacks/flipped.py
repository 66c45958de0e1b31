"""A client's data with its training labels flipped (what label flipping trains on).

Apart from the label flipping attacks
(:mod:`~fedpipe.federation.attacks.label_flip_all`,
:mod:`~fedpipe.federation.attacks.label_flip_targeted`) because it subclasses
the data layer's :class:`~fedpipe.data.splits.ClientData` (pandas): the attacks
themselves, and the settings ``params.yaml`` checks against them, stay light.
"""

from __future__ import annotations

from typing import Any

from fedpipe.data.splits import ClientData
from fedpipe.federation.attacks.labels import flipped, flipped_pair


class FlippedLabels(ClientData):
    """A client's data with its training labels flipped; test labels are kept.

    ``pair`` None flips every label (``C - 1 - y``); ``(source, target)`` sets
    each ``source`` label to ``target``.

    Pickles as the original data plus the class count, so data that pickles as
    a reference to its files (:func:`fedpipe.data.splits.open_federated`) still does
    and the flip happens wherever the client's job is unpickled (Dask workers).
    """

    __slots__ = ("_inner", "_n_classes", "_pair")

    def __init__(
        self, inner: ClientData, n_classes: int, pair: tuple[int, int] | None = None
    ) -> None:
        y = (
            flipped(inner.y_train, n_classes)
            if pair is None
            else flipped_pair(inner.y_train, *pair)
        )
        super().__init__(
            inner.client, inner.x_train_lazy, y, inner.x_test_lazy, inner.y_test
        )
        self._inner, self._n_classes, self._pair = inner, int(n_classes), pair

    def __reduce__(self) -> tuple[Any, ...]:
        return (FlippedLabels, (self._inner, self._n_classes, self._pair))
