"""Option groups: options declared once, as the fields of a frozen dataclass, shared by the commands that take them.

A command names a group as one parameter (``privacy: PrivacyGroup``); :func:`with_groups` shows typer the
group's fields as the command's own options, in the group's order, and hands the command the group filled with
their values. :func:`options_from` then builds a run's options object (``LabelOptions``, ``NoiseOptions``) from
the groups by field name, so no value is copied by hand.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from enum import Enum
from typing import Any, Callable, ClassVar, TypeVar, get_type_hints

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class OptionGroup:
    """A group of options; a subclass's fields are typer options (their defaults the ``typer.Option`` objects).
    ``APART``: fields that are not the run options' own (they build another object, or steer the terminal)."""

    APART: ClassVar[frozenset[str]] = frozenset()

    def values(self) -> dict[str, object]:
        """The fields' values by name, a choice as its string (``Mechanism.laplace`` -> ``"laplace"``)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value: object) -> object:
    return value.value if isinstance(value, Enum) else value


def with_groups(command: Callable[..., T]) -> Callable[..., T]:
    """``command`` as typer is to see it: each parameter annotated with an :class:`OptionGroup` replaced by the
    group's fields; called with their values, it calls ``command`` with the groups filled. TypeError at import
    where two parameters would share a name."""
    hints = get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, type[OptionGroup]] = {}
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints[parameter.name]
        if isinstance(annotation, type) and issubclass(annotation, OptionGroup):
            groups[parameter.name] = annotation
            group_hints = get_type_hints(annotation, include_extras=True)
            parameters += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                             annotation=group_hints[f.name]) for f in dataclasses.fields(annotation)]
        else:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=annotation))
    names = [p.name for p in parameters]
    repeated = sorted({name for name in names if names.count(name) > 1} | (set(groups) & set(names)))
    if repeated:
        raise TypeError(f"{command.__name__}: parameters named twice: {', '.join(repeated)}")

    @functools.wraps(command)
    def filled(**values: Any) -> T:
        for name, group in groups.items():
            values[name] = group(**{f.name: values.pop(f.name) for f in dataclasses.fields(group)})
        return command(**values)

    del filled.__wrapped__  # typer reads the signature below, not the command's
    filled.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    filled.__annotations__ = {p.name: p.annotation for p in parameters}
    return filled


def options_from(target: type[T], *groups: OptionGroup, **given: Any) -> T:
    """A ``target`` dataclass (a run's options) from the groups' values (but their ``APART`` fields) and ``given``,
    by field name. TypeError where a group's field is neither one of ``target``'s nor in its ``APART``."""
    wanted = {f.name for f in dataclasses.fields(target)}  # type: ignore[arg-type]
    values: dict[str, object] = {}
    for group in groups:
        for name, value in group.values().items():
            if name in group.APART:
                continue
            if name not in wanted:
                raise TypeError(f"{type(group).__name__}.{name} is not an option of {target.__name__}")
            values[name] = value
    return target(**values, **given)


__all__ = ["OptionGroup", "options_from", "with_groups"]
