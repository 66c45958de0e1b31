"""Label flipping (data poisoning): the client trains on ``y -> C - 1 - y``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedpipe.federation.attacks.base import Attack

if TYPE_CHECKING:
    from fedpipe.data.splits import ClientData


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
