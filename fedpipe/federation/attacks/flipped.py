"""A client's data with its training labels flipped (what label flipping trains on).

Apart from :mod:`~fedpipe.federation.attacks.label_flip` because it subclasses
the data layer's :class:`~fedpipe.data.splits.ClientData` (pandas): the attacks
themselves, and the settings ``params.yaml`` checks against them, stay light.
"""

from __future__ import annotations

from typing import Any

from fedpipe.data.splits import ClientData
from fedpipe.federation.attacks.labels import flipped


class FlippedLabels(ClientData):
    """A client's data with its training labels flipped; test labels are kept.

    Pickles as the original data plus the class count, so data that pickles as
    a reference to its files (:func:`fedpipe.data.splits.open_federated`) still does
    and the flip happens wherever the client's job is unpickled (Dask workers).
    """

    __slots__ = ("_inner", "_n_classes")

    def __init__(self, inner: ClientData, n_classes: int) -> None:
        super().__init__(
            inner.client,
            inner.x_train_lazy,
            flipped(inner.y_train, n_classes),
            inner.x_test_lazy,
            inner.y_test,
        )
        self._inner, self._n_classes = inner, int(n_classes)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FlippedLabels, (self._inner, self._n_classes))
