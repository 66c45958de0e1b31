"""Label flipping of every class (data poisoning): the client trains on
``y -> C - 1 - y``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedpipe.federation.attacks.base import Attack

if TYPE_CHECKING:
    from fedpipe.data.splits import ClientData


class LabelFlipAll(Attack):
    """Malicious clients train honestly on every label flipped and send the result.

    Every training label ``y`` becomes ``C - 1 - y`` (class 0 becomes C - 1 and
    so on); local test labels are left as they are. No settings. This is a
    stronger, untargeted variant: the attack of Tolpegin et al. (2020) flips one
    source class to one target class
    (:class:`~fedpipe.federation.attacks.label_flip_targeted.TargetedLabelFlip`).
    """

    name = "label_flip_all"

    def poison(self, data: ClientData, n_classes: int) -> ClientData:
        from fedpipe.federation.attacks.flipped import FlippedLabels

        return FlippedLabels(data, n_classes)
