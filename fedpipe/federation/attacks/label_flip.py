"""Label flipping (data poisoning): the client trains on ``y -> C - 1 - y``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedpipe.federation.attacks.base import Attack

if TYPE_CHECKING:
    from fedpipe.data.splits import ClientData


def flipped(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Labels ``C - 1 - y`` (same dtype): class 0 becomes C - 1 and so on."""
    y = np.asarray(y)
    return (n_classes - 1 - y).astype(y.dtype)


class LabelFlip(Attack):
    """Malicious clients train honestly on flipped labels and send the result.

    Every training label ``y`` becomes ``C - 1 - y`` (Tolpegin et al., 2020,
    "Data Poisoning Attacks Against Federated Learning Systems",
    https://arxiv.org/abs/2007.08432; FedML's label flipping attack); local test
    labels are left as they are. No settings.
    """

    name = "label_flip"

    def poison(self, data: ClientData, n_classes: int) -> ClientData:
        from fedpipe.federation.attacks.flipped import FlippedLabels

        return FlippedLabels(data, n_classes)
