"""Sections of ``params.yaml``, and the schema of the ones components read.

A component's section (``strategy``, ``partition``, ``attack``) is one flat set
of keys for every component of its kind: ``strategy.server_lr`` is FedAvgM's,
FedAdam's, ... The keys, their types, ranges and defaults are not listed here:
each component declares them on its class
(:class:`~fedpipe.core.component.Setting`), and :class:`ComponentSection` builds
the schema of its section from the registry's components when a section is
validated, so a new component's settings are keys of its section as soon as its
registry line exists. Errors read as every other section's do (pydantic's, with
the dotted key).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    create_model,
)
from pydantic import model_validator as _model_validator
from pydantic_core import InitErrorDetails

from fedpipe.core import registry
from fedpipe.core.component import Setting

T = TypeVar("T")


class Section(BaseModel):
    """A section of ``params.yaml``: unknown keys refused, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def settings(self) -> dict[str, Any]:
        """The section's values other than ``name`` that are set (not null): what
        a model builder or strategy receives as keyword arguments. A section's
        ``options`` (settings of a user's own code) are merged in."""
        values = self.model_dump(exclude={"name", "options"})
        out = {k: v for k, v in values.items() if v is not None}
        out.update(getattr(self, "options", None) or {})
        return out

    def into(self, cls: type[T], **extra: Any) -> T:
        """``cls`` (a dataclass the library takes) from this section's keys of the
        same names, and ``extra`` for the fields the section does not hold: the
        section's values are passed on as they are, not copied field by field."""
        names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        own = {k: getattr(self, k) for k in names & set(type(self).model_fields)}
        return cls(**{**own, **extra})

    @classmethod
    def allowed_keys(cls) -> list[str]:
        """The keys this section takes, sorted (for the unknown-key message)."""
        return sorted(cls.model_fields)


class ComponentSection(Section):
    """A section whose keys beyond its own fields are the settings its kind's
    registered components declare.

    Subclasses set :attr:`kind` (a registry kind) and declare as fields only the
    keys that belong to the section itself (``strategy.name``,
    ``partition.local_test_fraction``, ...). Every other key is a declared
    setting of some registered component: validated against its type and range
    and stored, as the others, as an attribute (``params.strategy.server_lr``).
    A key left out takes its ``params_default`` (null: the chosen component's
    own default).
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: ClassVar[str]

    @_model_validator(mode="wrap")
    @classmethod
    def _declared_settings(cls, raw: Any, handler: ModelWrapValidatorHandler) -> Any:
        if not isinstance(raw, Mapping):
            return handler(raw)  # pydantic reports what the section should be
        own = {k: v for k, v in raw.items() if k in cls.model_fields}
        rest = {k: v for k, v in raw.items() if k not in cls.model_fields}
        errors: list[Any] = []
        try:
            declared = settings_model(cls.kind, tuple(cls.model_fields))
            own.update(declared.model_validate(rest).model_dump())
        except ValidationError as exc:
            errors += exc.errors()
        try:
            section = handler(own)
        except ValidationError as exc:
            errors += exc.errors()
        if errors:  # every problem of the section, each on its own line
            raise ValidationError.from_exception_data(
                cls.__name__, [_line_error(e) for e in errors]
            )
        return section

    def __hash__(self) -> int:
        # pydantic's frozen hash covers the fields only; the settings are extras
        extra = tuple((self.__pydantic_extra__ or {}).items())
        return hash((super().__hash__(), extra))

    @classmethod
    def allowed_keys(cls) -> list[str]:
        keys = declared_keys(cls.kind, tuple(cls.model_fields))
        return sorted(set(cls.model_fields) | set(keys))

    @classmethod
    def components(cls) -> dict[str, Any]:
        """The registered components of this section's kind, by name."""
        return registry.classes(cls.kind)


def _line_error(error: Any) -> InitErrorDetails:
    """A reported error as pydantic takes it back, to raise several at once."""
    detail: dict[str, Any] = {
        "type": error["type"],
        "loc": error["loc"],
        "input": error["input"],
    }
    if "ctx" in error:
        detail["ctx"] = error["ctx"]
    return detail  # type: ignore[return-value]


def declared_keys(kind: str, own: tuple[str, ...] = ()) -> dict[str, Setting]:
    """Each key the ``kind``'s components declare, with the first declaration
    of it in registry order; keys in ``own`` (the section's fields) and settings
    that come from elsewhere (``source``) are left out."""
    out: dict[str, Setting] = {}
    for cls in registry.classes(kind).values():
        for setting in cls.declared():
            if setting.source is None and setting not in own:
                out.setdefault(str(setting), setting)
    return out


def settings_model(kind: str, own: tuple[str, ...] = ()) -> type[BaseModel]:
    """The pydantic model of the settings ``kind``'s components declare (for
    the registry as it is now)."""
    table = tuple(registry.kind_of(kind).table.items())
    return _settings_model(kind, own, table)


@functools.lru_cache(maxsize=32)
def _settings_model(
    kind: str, own: tuple[str, ...], table: tuple[tuple[str, str], ...]
) -> type[BaseModel]:
    fields: dict[str, Any] = {
        key: _field(kind, setting) for key, setting in declared_keys(kind, own).items()
    }
    return create_model(  # type: ignore[call-overload, no-any-return]
        f"{kind.capitalize()}Settings",
        __config__=ConfigDict(extra="forbid", frozen=True),
        **fields,
    )


def _field(kind: str, setting: Setting) -> tuple[Any, Any]:
    """``(annotation, FieldInfo)`` of a declared setting as a params key."""
    annotation: Any = setting.kind
    default = setting.params_default
    if default is None:
        annotation = annotation | None
    if setting.note is None:
        return annotation, Field(default, **setting.bounds())
    section = registry.kind_of(kind).key.split(".")[0]
    check = AfterValidator(functools.partial(_in_range, setting, section))
    return Annotated[annotation, check], Field(default)


def _in_range(setting: Setting, section: str, value: Any) -> Any:
    """``value`` if the setting admits it (null aside); else the ValueError of
    :meth:`Setting.check`, naming the key, the range and the setting's note."""
    if value is not None:
        setting.check(value, section)
    return value
