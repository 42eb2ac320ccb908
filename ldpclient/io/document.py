"""Typed reading of JSON documents: a run's report, a guarantee's parameters, a teacher's metadata.

A document is what ``json.loads`` gives for an object: its values are only ``object`` to the type checker. A
reader asks for a key as the type it needs (:func:`number`, :func:`integer`, :func:`text`, :func:`section`,
:func:`rows`) and gets that type, or a one-line ``ValueError`` naming the key and what it holds instead. The
``*_or_none`` forms read a key that may be missing or null.
"""

from __future__ import annotations

import types
import typing
from collections import abc
from dataclasses import fields
from typing import Callable, Mapping, Sequence, Union

#: A JSON object as read: keys are strings, values anything JSON holds.
Document = Mapping[str, object]
#: A JSON object as written (reports, configs): built up key by key.
JSONDict = dict[str, object]


def _wrong(key: str, what: str, value: object) -> ValueError:
    return ValueError(f"{key!r} must be {what}, got {type(value).__name__} {str(value)[:40]!r}")


def as_number(value: object, key: str = "value") -> float:
    """``value`` as a float (a JSON int or float; not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(key, "a number", value)
    return float(value)


def number(doc: Document, key: str) -> float:
    """The number at ``key`` as a float."""
    return as_number(doc.get(key), key)


def number_or_none(doc: Document, key: str) -> float | None:
    """The number at ``key``, or None where the key is missing or null."""
    value = doc.get(key)
    return None if value is None else as_number(value, key)


def integer(doc: Document, key: str) -> int:
    """The integer at ``key`` (a JSON number with no fraction)."""
    value = doc.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _wrong(key, "an integer", value)


def integer_or_none(doc: Document, key: str) -> int | None:
    """The integer at ``key``, or None where the key is missing or null."""
    return None if doc.get(key) is None else integer(doc, key)


def text(doc: Document, key: str, default: str | None = None) -> str:
    """The string at ``key``; ``default`` where the key is missing or null (an error without one)."""
    value = doc.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise _wrong(key, "a string", value)
    return value


def as_section(value: object, key: str = "value") -> Document:
    """``value`` as a JSON object."""
    if not isinstance(value, Mapping):
        raise _wrong(key, "an object", value)
    return value


def section(doc: Document, key: str) -> Document:
    """The JSON object at ``key``."""
    return as_section(doc.get(key), key)


def section_or_none(doc: Document, key: str) -> Document | None:
    """The JSON object at ``key``, or None where the key is missing, null or empty."""
    value = doc.get(key)
    return as_section(value, key) or None if value is not None else None


def items(doc: Document, key: str) -> Sequence[object]:
    """The JSON array at ``key`` (empty where the key is missing or null)."""
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _wrong(key, "an array", value)
    return value


def rows(doc: Document, key: str) -> list[Document]:
    """The JSON array of objects at ``key`` (empty where the key is missing or null)."""
    return [as_section(row, key) for row in items(doc, key)]


def _fits(value: object, hint: object) -> bool:
    """Whether a JSON value has a report field's type (``int``, ``float`` (an int too), ``str``, ``bool``, ``None``,
    ``list[X]``, ``dict[str, X]``, ``object``, and unions of them)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if origin in (dict, Mapping, abc.Mapping):
        return isinstance(value, dict) and all(isinstance(k, str) and _fits(v, args[1]) for k, v in value.items())
    if hint is object:
        return True
    if hint is type(None):
        return value is None
    if hint in (int, float):
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def typed_fields(cls: type, d: Document, where: str,
                 sections: Mapping[str, Callable[[object, str, str], object]] | None = None) -> JSONDict:
    """``d``'s values for the dataclass ``cls``'s fields, each checked against the field's type; ``sections``: the
    fields whose value ``sections[name](d[name], name, where)`` builds instead (a nested dataclass). ValueError naming
    ``where`` and the key on a value of another type."""
    hints = typing.get_type_hints(cls)
    out: JSONDict = {}
    for name in (f.name for f in fields(cls)):
        if name not in d:
            continue
        if sections and name in sections:
            out[name] = sections[name](d[name], name, where)
        elif _fits(d[name], hints[name]):
            out[name] = d[name]
        else:
            shown = getattr(hints[name], "__name__", str(hints[name]))
            raise ValueError(f"{where}: key {name!r} must be {shown}, got {type(d[name]).__name__}")
    return out
