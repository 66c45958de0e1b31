"""Label flipping (data poisoning): the client trains on ``y -> C - 1 - y``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpipe.data.splits import ClientData
from fedpipe.federation.attacks.base import Attack


def flipped(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Labels ``C - 1 - y`` (same dtype): class 0 becomes C - 1 and so on."""
    y = np.asarray(y)
    return (n_classes - 1 - y).astype(y.dtype)


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


class LabelFlip(Attack):
    """Malicious clients train honestly on flipped labels and send the result.

    Every training label ``y`` becomes ``C - 1 - y`` (Tolpegin et al., 2020,
    "Data Poisoning Attacks Against Federated Learning Systems",
    https://arxiv.org/abs/2007.08432; FedML's label flipping attack); local test
    labels are left as they are. No settings.
    """

    name = "label_flip"

    def poison(self, data: ClientData, n_classes: int) -> ClientData:
        return FlippedLabels(data, n_classes)
