"""Personal data: fields encrypted per data subject, and what is left once one is forgotten.

Mark an event field with ``Personal``: its value is encrypted (AES-GCM) with the key of
its data subject before it reaches the store, a broker or a Parquet segment, and
decrypted on read. ``subject=`` names the event field that holds the subject's id
(``None``: the aggregate id). Once the subject's key is destroyed (``App.forget``),
the field reads as ``ERASED``, an ``Erased`` placeholder, everywhere.

The placeholder is typed: a field's annotation must admit it. ``str`` fields do
(``Erased`` is a ``str``); any other type says so with ``| rv.Erased``.

Example::

    class Registered(rv.Event):
        customer_id: str
        name: Annotated[str, rv.Personal(subject="customer_id")]
        born: Annotated[date | rv.Erased, rv.Personal(subject="customer_id")]

    e = ...  # after app.forget("c-1"): e.name is rv.ERASED, isinstance(e.born, rv.Erased)
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Union

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import core_schema

from .errors import SpecError

__all__ = ["ERASED", "Erased", "Personal", "admits_erased", "personal_fields"]


@dataclass(frozen=True, slots=True)
class Personal:
    """Marks an event field as personal data of a data subject: ``subject`` names the field
    holding the subject's id (``None``: the event's aggregate id).

    Example::

        email: Annotated[str, rv.Personal(subject="customer_id")]
    """

    subject: str | None = None

    def __post_init__(self) -> None:
        s = self.subject
        if s is not None and (not isinstance(s, str) or not s.isidentifier()):
            raise SpecError(f"Personal(subject=...) must name a field, got {s!r}")


class Erased(str):
    """The value of a personal field whose subject was forgotten (``rv.ERASED``).

    A ``str`` (``"[erased]"``), so ``str`` fields hold it as they are; other field types
    admit it with ``| rv.Erased``. Serialises as that string.
    """

    __slots__ = ()

    def __new__(cls) -> Erased:
        return super().__new__(cls, "[erased]")

    def __repr__(self) -> str:
        return "rv.ERASED"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Erased, ())

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.is_instance_schema(
            cls, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )


#: The placeholder a forgotten subject's personal fields read as.
ERASED = Erased()


def admits_erased(annotation: Any) -> bool:
    """Whether a field annotated ``annotation`` may hold ``ERASED``: ``str``, ``Any``, or a
    union with ``str`` or ``Erased``."""
    if annotation is Any or annotation in (str, Erased):
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return admits_erased(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return any(admits_erased(a) for a in typing.get_args(annotation))
    return False


@cache
def personal_fields(model: type[BaseModel]) -> tuple[tuple[str, str | None], ...]:
    """``(field name, subject field or None)`` of each ``Personal`` field of ``model``;
    ``SpecError`` for a field that cannot hold ``ERASED`` or a subject that is no field.

    Example::

        assert personal_fields(Registered) == (("name", "customer_id"), ...)
    """
    out = []
    fields = model.model_fields
    for name, info in fields.items():
        marks = [m for m in info.metadata if isinstance(m, Personal)]
        if not marks:
            continue
        where = f"{model.__name__}.{name}"
        if not admits_erased(info.annotation):
            raise SpecError(
                f"{where} is personal data, so it must be able to hold the placeholder "
                f"rv.ERASED: declare it `str` or `{_text(info.annotation)} | rv.Erased`"
            )
        subject = marks[0].subject
        if subject is not None and subject not in fields:
            raise SpecError(f"{where}: Personal(subject={subject!r}) names no field")
        if subject is not None and any(isinstance(m, Personal) for m in fields[subject].metadata):
            raise SpecError(f"{where}: the subject field {subject!r} cannot be personal itself")
        out.append((name, subject))
    return tuple(out)


def _text(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation)
