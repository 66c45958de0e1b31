"""What every pluggable component shares: a name, declared settings, ``from_params``.

Strategies, client algorithms, partitioners and attacks are small, stateless
objects built from the keys of one ``params.yaml`` section. Each class says, on
itself and in its own file, what it reads: its :attr:`Component.settings`, each a
:class:`Setting` with its type, default, range and meaning (as pfl-research's
``SCAFFOLDParams`` sits beside its algorithm). The params schema
(:mod:`fedpipe.config.sections`), the registry's conformance test and the
commented ``params.yaml`` read them from the class; there is no second list.

A :class:`Setting` *is* its key (a ``str``), so ``settings`` stays a tuple of key
names for every caller, and a user's class may list plain names
(``settings = ("alpha",)``) as before.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from fedpipe.core.errors import SettingError


class _Required:
    """The default of a setting the component cannot do without."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The :attr:`Setting.default` of a setting that has none (the constructor
requires it; ``params.yaml`` then gives one, see :attr:`Setting.params_default`)."""

_FIELDS = (
    "kind",
    "default",
    "ge",
    "gt",
    "le",
    "lt",
    "help",
    "params_default",
    "source",
    "note",
)


class Setting(str):
    """One setting of a component: its key, with its type, default and range.

    Parameters
    ----------
    name : str
        The key, in the component's section (``server_lr`` is
        ``strategy.server_lr``) and as the constructor's keyword argument.
    kind : type, default float
        ``float``, ``int``, ``bool`` or ``str``; a ``float`` takes integers too.
    default : object, default None
        The component's own default (its constructor's); :data:`REQUIRED` when it
        has none. None may mean "computed" (Multi-Krum's ``num_selected``).
    ge, gt, le, lt : float or None
        The allowed range (``gt=0.0``: > 0).
    help : str
        What it means, in a few words (for the commented ``params.yaml``).
    params_default : object, default None
        What ``params.yaml`` holds when the key is left out: None means null, i.e.
        the chosen component's own default; a value (``partition.alpha: 0.5``)
        makes the key non-null in the file.
    source : str or None
        The param key the value comes from when it is not a key of the section
        (Scaffold's ``total_clients`` is ``federation.clients``).
    note : str or None
        Said after the range when a value is refused (``params.yaml`` then checks
        the range with this message instead of pydantic's).
    """

    kind: type
    default: Any
    ge: float | None
    gt: float | None
    le: float | None
    lt: float | None
    help: str
    params_default: Any
    source: str | None
    note: str | None

    def __new__(
        cls,
        name: str,
        kind: type = float,
        *,
        default: Any = None,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        lt: float | None = None,
        help: str = "",
        params_default: Any = None,
        source: str | None = None,
        note: str | None = None,
    ) -> Self:
        self = super().__new__(cls, name)
        values = dict(
            kind=kind,
            default=default,
            ge=ge,
            gt=gt,
            le=le,
            lt=lt,
            help=help,
            params_default=params_default,
            source=source,
            note=note,
        )
        for key, value in values.items():
            object.__setattr__(self, key, value)
        return self

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Setting {str(self)!r} is read-only")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_setting, (str(self), self.declaration()))

    @property
    def name(self) -> str:
        """The key as a plain ``str``."""
        return str(self)

    def declaration(self) -> dict[str, Any]:
        """Everything declared besides the name (type, default, range, ...)."""
        return {key: getattr(self, key) for key in _FIELDS}

    def but(self, **changes: Any) -> Setting:
        """The same setting with some declarations changed (a strategy's own
        default of a key it shares: ``SERVER_LR.but(default=0.1)``)."""
        return Setting(str(self), **{**self.declaration(), **changes})

    def bounds(self) -> dict[str, float]:
        """The range as pydantic's ``Field`` takes it: ``{"gt": 0.0}``."""
        named = {"ge": self.ge, "gt": self.gt, "le": self.le, "lt": self.lt}
        return {k: v for k, v in named.items() if v is not None}

    def check(self, value: Any, section: str = "") -> Any:
        """``value`` as this setting's kind (a float, an int, ...) when it admits
        it; None stays None for a setting whose default is None.

        The one check of a component's setting: constructors call it through
        :meth:`Component.checked`, ``params.yaml`` through its section's schema.

        Raises
        ------
        ValueError
            Naming ``<section>.<key>``, the value and what is allowed.
        """
        if value is None and self.default is None:
            return None
        if self.admits(value):
            return self.kind(value) if self.kind in (float, int) else value
        key = f"{section}.{self}" if section else str(self)
        words = {
            float: "a number",
            int: "an integer",
            bool: "true or false",
            str: "a string",
        }
        kind = words.get(self.kind, f"a {getattr(self.kind, '__name__', self.kind)}")
        signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        bounds = [f"{self} {signs[k]} {v:g}" for k, v in self.bounds().items()]
        allowed = " and ".join(bounds)
        if self.kind is int:
            allowed = f"an integer {allowed}".strip()
        allowed = allowed or ("a finite number" if self.kind is float else kind)
        if self.note:
            allowed = f"{allowed} ({self.note})"
        wrong = "is out of range" if self._has_kind(value) else f"is not {kind}"
        raise SettingError(f"{key}: {value!r} {wrong}; allowed: {allowed}")

    def _has_kind(self, value: Any) -> bool:
        """Whether ``value`` is of this setting's kind (range aside)."""
        if self.kind is float:
            return isinstance(value, numbers.Real) and not isinstance(value, bool)
        if self.kind is int:
            return isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return isinstance(value, self.kind)

    def admits(self, value: Any) -> bool:
        """Whether ``value`` has this setting's type and lies in its range."""
        ok = self._has_kind(value)
        if ok and self.kind is float:
            ok = math.isfinite(float(value))
        if not ok or self.kind not in (float, int):
            return ok
        x = float(value)
        return (
            (self.ge is None or x >= self.ge)
            and (self.gt is None or x > self.gt)
            and (self.le is None or x <= self.le)
            and (self.lt is None or x < self.lt)
        )


def _setting(name: str, declaration: dict[str, Any]) -> Setting:
    """Unpickle a :class:`Setting`."""
    return Setting(name, **declaration)


class Component:
    """Base of strategies, client algorithms, partitioners and attacks.

    Subclasses set :attr:`name` (the value that picks them in ``params.yaml``)
    and list the settings their keyword-only constructor takes in
    :attr:`settings`; each becomes an attribute of the same name.

    Attributes
    ----------
    name : str
        The registered name (``strategy.name``, ``partition.method``, ...).
    section : str
        The ``params.yaml`` section its settings are keys of (for messages).
    settings : tuple of str
        The keys it reads: :class:`Setting` declarations, or plain names (a
        user's class may list ``("alpha",)``).
    error : type
        The ValueError a refused setting raises (a partitioner's PartitionError).
    """

    name: ClassVar[str]
    section: ClassVar[str] = ""
    settings: ClassVar[tuple[str, ...]] = ()
    error: ClassVar[type[ValueError]] = ValueError

    @classmethod
    def checked(cls, setting: Setting, value: Any) -> Any:
        """``value`` of a declared setting, checked (:meth:`Setting.check`): the
        one place every constructor's settings are checked. Raises :attr:`error`
        naming ``<section>.<key>``."""
        try:
            return setting.check(value, cls.section)
        except ValueError as exc:
            raise cls.error(str(exc)) from None

    @classmethod
    def declared(cls) -> tuple[Setting, ...]:
        """:attr:`settings` as :class:`Setting` s (a plain name: untyped, no range)."""
        return tuple(
            key if isinstance(key, Setting) else Setting(key, object)
            for key in cls.settings
        )

    @classmethod
    def from_params(cls, **settings: Any) -> Self:
        """Build from a section's values: the keys in :attr:`settings` that are
        not None (None means the default); the rest are ignored, so one flat
        section serves every component of its kind."""
        chosen = {k: settings[k] for k in cls.settings if settings.get(k) is not None}
        return cls(**chosen)

    @classmethod
    def check_section(cls, values: Mapping[str, Any]) -> None:
        """Refuse settings of this component that contradict each other (a
        ValueError naming the keys). Called for every registered component of
        the kind whichever is chosen: the section is one for all. Default:
        nothing to check."""

    @classmethod
    def check_federation(
        cls, values: Mapping[str, Any], *, clients: int, per_round: int
    ) -> None:
        """Refuse settings that do not fit the federation (``clients`` in it,
        ``per_round`` sampled each round), as a ValueError naming the keys.
        Called for the chosen component only. Default: nothing to check."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.settings)
        return f"{type(self).__name__}({args})"
