"""The one registry of LDP mechanisms: the CLI's choices, ``make_mechanism``, the config check and
the audit all read it.

A mechanism module registers its factory under the name ``--mechanism`` takes::

    @register_mechanism("laplace")
    class LaplaceMechanism(Elementwise): ...

The factory is any callable returning a :class:`~ldpclient.privacy.Mechanism` (a class or a
function). Whether a mechanism takes ``--delta`` is read from the factory's signature (a
``delta`` parameter), never declared twice. Every module of the
:mod:`ldpclient.privacy.mechanisms` package is imported with the package, so a new mechanism
is one new file there (plus its test).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Mapping, TypeVar

from ..base import Mechanism

F = TypeVar("F", bound=Callable[..., Mechanism])


@dataclass(frozen=True)
class MechanismEntry:
    """One registered mechanism: its CLI name and the factory that builds it from keywords."""

    name: str
    factory: Callable[..., Mechanism]
    rank: int = 100

    @property
    def takes_delta(self) -> bool:
        """Whether the factory has a ``delta`` parameter (``--delta`` and ``--allow-large-delta`` apply)."""
        return "delta" in inspect.signature(self.factory).parameters

    @property
    def takes_basis(self) -> bool:
        """Whether the factory has a ``basis`` parameter (``--basis dct``, ``--coefficients``, ``--clip-norm``
        apply)."""
        return "basis" in inspect.signature(self.factory).parameters

    @property
    def releases_pixels(self) -> bool:
        """Whether it can release pooled pixels (``--basis pool``): no ``basis`` parameter, or one defaulting to
        ``pool``. A mechanism whose basis defaults to ``dct`` (``quantised-rr``) releases coefficients only."""
        return not self.takes_basis or self.default("basis") == "pool"

    def accepts(self, keyword: str) -> bool:
        """Whether the factory takes ``keyword``: a parameter of that name, or ``**options``."""
        params = inspect.signature(self.factory).parameters
        return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def requires(self, keyword: str) -> bool:
        """Whether ``keyword`` is a parameter of the factory without a default."""
        param = inspect.signature(self.factory).parameters.get(keyword)
        return param is not None and param.default is inspect.Parameter.empty

    def default(self, keyword: str) -> object:
        """The factory's default for ``keyword`` (None when it has none)."""
        param = inspect.signature(self.factory).parameters.get(keyword)
        return None if param is None or param.default is inspect.Parameter.empty else param.default


_ENTRIES: dict[str, MechanismEntry] = {}


def register_mechanism(name: str, *, rank: int = 100) -> Callable[[F], F]:
    """Decorator: register a mechanism factory under ``name`` (lower case, dashes); returns it unchanged.

    ``rank`` orders the choice lists (help texts, errors): lower first, then by name; the
    built-ins take 10-60. A name registered twice raises ``ValueError`` (two modules claiming
    one CLI name).
    """
    if not name or name != name.strip().lower() or "_" in name or " " in name:
        raise ValueError(f"a mechanism name is lower case with dashes, got {name!r}")

    def register(factory: F) -> F:
        known = _ENTRIES.get(name)
        if known is not None and known.factory is not factory:
            raise ValueError(f"mechanism {name!r} is registered twice ({known.factory!r} and {factory!r})")
        _ENTRIES[name] = MechanismEntry(name, factory, rank)
        return factory

    return register


def _ordered() -> list[MechanismEntry]:
    return sorted(_ENTRIES.values(), key=lambda entry: (entry.rank, entry.name))


def mechanism_names() -> tuple[str, ...]:
    """Every registered name, by rank (the built-ins first: laplace, gaussian, tldp-*, discrete-tldp)."""
    return tuple(entry.name for entry in _ordered())


def delta_mechanism_names() -> tuple[str, ...]:
    """The registered mechanisms with a delta (they take ``--delta``), by rank."""
    return tuple(entry.name for entry in _ordered() if entry.takes_delta)


def basis_mechanism_names() -> tuple[str, ...]:
    """The registered mechanisms with a release basis (they take ``--basis dct``), by rank."""
    return tuple(entry.name for entry in _ordered() if entry.takes_basis)


def factories() -> Mapping[str, Callable[..., Mechanism]]:
    """Name -> factory, by rank (``ldpclient.privacy.MECHANISMS``)."""
    return {entry.name: entry.factory for entry in _ordered()}


def mechanism_entry(name: str) -> MechanismEntry:
    """The registered entry of ``name`` (underscores accepted for dashes); ``ValueError`` names the choices."""
    key = str(name).strip().lower().replace("_", "-")
    entry = _ENTRIES.get(key)
    if entry is None:
        raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(mechanism_names())}")
    return entry


def make_mechanism(name: str, **kwargs: object) -> Mechanism:
    """Build a mechanism from its registered name (``laplace``, ``gaussian``, ``tldp-laplace``, ...).

    Underscores are accepted for dashes. Keyword arguments go to the factory; an unknown
    name or argument raises ``ValueError``.
    """
    entry = mechanism_entry(name)
    try:
        return entry.factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments for mechanism {entry.name!r}: {exc}") from None


__all__ = [
    "MechanismEntry",
    "basis_mechanism_names",
    "delta_mechanism_names",
    "factories",
    "make_mechanism",
    "mechanism_entry",
    "mechanism_names",
    "register_mechanism",
]
