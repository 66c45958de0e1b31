"""Targeted label flipping (data poisoning): the client trains on its
``source_class`` samples labelled ``target_class``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedpipe.core.component import Setting
from fedpipe.core.errors import SettingError
from fedpipe.federation.attacks.base import Attack

if TYPE_CHECKING:
    from fedpipe.data.splits import ClientData

SOURCE_CLASS = Setting(
    "source_class",
    int,
    default=5,
    ge=0,
    help="class index whose training labels are flipped",
)
TARGET_CLASS = Setting(
    "target_class", int, default=3, ge=0, help="the label they get instead"
)


class TargetedLabelFlip(Attack):
    """Malicious clients train honestly with every ``source_class`` training
    label set to ``target_class`` and send the result; other labels and the
    local test labels are kept.

    The attack of Tolpegin, Truex, Gursoy and Liu (ESORICS 2020), "Data
    Poisoning Attacks Against Federated Learning Systems",
    https://arxiv.org/abs/2007.08432, which flips one source class to one target
    class (their CIFAR-10 pair is dog -> cat, 5 -> 3: the defaults); FedML's
    label flipping attack maps an ``original_class_list`` to a
    ``target_class_list`` the same way (one pair here).

    Parameters
    ----------
    source_class, target_class : int, default 5 and 3
        ``attack.source_class`` and ``attack.target_class``: class indices,
        different, below the data's class count.
    """

    name = "label_flip_targeted"
    settings = (SOURCE_CLASS, TARGET_CLASS)

    def __init__(self, *, source_class: int = 5, target_class: int = 3) -> None:
        source_class = self.checked(SOURCE_CLASS, source_class)
        target_class = self.checked(TARGET_CLASS, target_class)
        if source_class == target_class:
            raise SettingError(
                f"attack.source_class and attack.target_class are both {source_class};"
                " allowed: two different class indices"
            )
        self.source_class, self.target_class = source_class, target_class

    @classmethod
    def check_section(cls, values: dict[str, Any]) -> None:
        if values.get("name") != cls.name:
            return
        source = values.get("source_class", SOURCE_CLASS.default)
        target = values.get("target_class", TARGET_CLASS.default)
        source = SOURCE_CLASS.default if source is None else source
        target = TARGET_CLASS.default if target is None else target
        if source == target:
            raise SettingError(
                f"attack.source_class and attack.target_class are both {source}; "
                "allowed: two different class indices"
            )

    def poison(self, data: ClientData, n_classes: int) -> ClientData:
        from fedpipe.federation.attacks.flipped import FlippedLabels

        for key, value in (("source_class", self.source_class),
                           ("target_class", self.target_class)):  # fmt: skip
            if value >= n_classes:
                raise SettingError(
                    f"attack.{key}: {value} is not a class of the data; allowed: "
                    f"0..{n_classes - 1}"
                )
        return FlippedLabels(data, n_classes, (self.source_class, self.target_class))
