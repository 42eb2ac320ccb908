"""Choosing a teacher adapter by name or URL scheme; third-party adapters via entry points.

``connect(target, *, token=None, **opts)`` understands:

=====================================  =============================================
``oip+http://host:port/model``         Open Inference Protocol v2 (KServe, Triton,
``oip+https://host/v2/models/model``   MLServer, the bundled mock teacher)
``http(s)://host:port/model``          same (plain HTTP(S) defaults to OIP)
``torchserve+http://host:8080/model``  TorchServe predictions API
``hf://org/model``                     Hugging Face image-classification API
``local:package.module:attr``          in-process model (see :func:`_connect_local`)
``name+<url>`` / ``name:<rest>``       a third-party adapter registered as ``name``
=====================================  =============================================

Built-in adapters register themselves from their own module of this package
(``@register_adapter("oip", identity=oip_model_url)``; every module is imported on the first
lookup), so a new built-in adapter is one new file. Third-party adapters register a factory in
the ``ldpclient.teachers`` entry-point group (see ``examples/custom_teacher.py``)::

    [project.entry-points."ldpclient.teachers"]
    myapi = "my_package.teacher:connect"

The factory is called as ``factory(target, **opts)`` (with ``token=`` among ``opts`` when
one was given, and ``transport=`` when the caller built an
:class:`~ldpclient.teachers.http.HttpTransport`), where ``target`` is the text after ``myapi+`` (or after
``myapi:``) and must return a
:class:`~ldpclient.teachers.base.Teacher` (or an object with ``metadata()`` and
``classify()``, see :func:`~ldpclient.teachers.base.as_teacher`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, Iterable, TypeVar

from .base import Teacher, as_teacher

ENTRY_POINT_GROUP = "ldpclient.teachers"

Factory = Callable[..., Teacher]
F = TypeVar("F", bound=Callable[..., Teacher])


@dataclass(frozen=True)
class AdapterEntry:
    """A built-in adapter: its name (the ``name+`` or ``name:`` of an address), the factory
    ``connect(target, **opts)``, ``identity(target)``: the normalised address the teacher's
    identity is made of, known without contacting it (None: the opened teacher's
    ``journal_scope`` is its identity), and ``takes``: the callable whose keyword parameters are the options
    the factory passes on (:func:`declared_options`; None: the adapter checks its options itself)."""

    name: str
    connect: Factory
    identity: Callable[[str], str] | None = None
    takes: Callable[..., object] | None = None

    def options(self) -> frozenset[str] | None:
        """The options this adapter takes (None: any; it refuses those it does not know itself)."""
        return declared_options(self.takes) if self.takes is not None else None


def declared_options(takes: Callable[..., object]) -> frozenset[str] | None:
    """The keyword options ``takes`` (a teacher class, or a factory) accepts: its parameters after the first (the
    address), with the transport's (:data:`~ldpclient.teachers.transport.TRANSPORT_OPTIONS`) where it passes
    ``**transport_options`` on to one; None where it takes any other ``**`` keywords."""
    from .transport import TRANSPORT_OPTIONS

    params = list(inspect.signature(takes).parameters.values())[1:]
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    rest = [p.name for p in params if p.kind == p.VAR_KEYWORD]
    if not rest:
        return frozenset(named)
    return frozenset(named | TRANSPORT_OPTIONS) if rest == ["transport_options"] else None


def unknown_options(target: str, options: Iterable[str]) -> list[str]:
    """Of ``options`` (by name, in order), those the adapter for ``target`` does not take (none where it takes
    any, or where no adapter has that name: :func:`connect` says so)."""
    name = resolve(target)[0]
    entry = builtin_adapters().get(name)
    takes = entry.options() if entry is not None else _plugin_options(name)
    return [] if takes is None else [o for o in options if o not in takes]


_BUILTIN: dict[str, AdapterEntry] = {}
_LOADED = False


def register_adapter(
    name: str, *, identity: Callable[[str], str] | None = None, takes: Callable[..., object] | None = None
) -> Callable[[F], F]:
    """Decorator for a built-in adapter's factory, in its own module of ``ldpclient.teachers``:
    ``@register_adapter("oip", identity=oip_model_url, takes=OIPTeacher)``; ``takes`` declares the adapter's
    options (:class:`AdapterEntry`). Every module of the package is imported when the adapters are first looked
    up, so a new adapter is one new file (plus its test). Third-party adapters use the entry-point group instead."""

    def register(factory: F) -> F:
        known = _BUILTIN.get(name)
        if known is not None and known.connect is not factory:
            raise ValueError(f"teacher adapter {name!r} is registered twice")
        _BUILTIN[name] = AdapterEntry(name, factory, identity, takes)
        return factory

    return register


def builtin_adapters() -> dict[str, AdapterEntry]:
    """The built-in adapters by name (their modules imported once, on first use)."""
    global _LOADED
    if not _LOADED:
        package = importlib.import_module(__package__ or "ldpclient.teachers")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
        _LOADED = True
    return dict(_BUILTIN)


@register_adapter("local")
def _connect_local(target: str, token: str | None = None, **opts: Any) -> Teacher:
    """``local:package.module:attr``. ``attr`` may be a Teacher instance (used as is), a
    ``torch.nn.Module`` instance (wrapped in LocalTeacher; pass ``input_shape`` and
    ``num_classes`` as options), or a factory callable returning a Teacher (called with
    the options). Objects that are teachers without subclassing Teacher are accepted
    through :func:`~ldpclient.teachers.base.as_teacher`."""
    import torch

    from .local import LocalTeacher

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"local teachers are named local:package.module:attr, got 'local:{target}'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"local teacher: cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"local teacher: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, torch.nn.Module):
        missing = [k for k in ("input_shape", "num_classes") if k not in opts]
        if missing:
            raise ValueError(f"local teacher {target!r} is a torch module: pass {', '.join(missing)}")
        opts.setdefault("name", attr)
        return LocalTeacher(obj, **opts)
    try:
        ready: Teacher | None = as_teacher(obj)
    except TypeError:
        ready = None  # a factory (or nothing usable)
    if ready is not None:
        if opts:
            raise ValueError(f"local teacher {target!r} is a ready Teacher instance; options {sorted(opts)} unused")
        return ready
    if callable(obj):
        made = obj(**opts)
        try:
            return as_teacher(made)
        except TypeError as exc:
            raise ValueError(f"local teacher factory {target!r} returned {type(made).__name__}, not a Teacher "
                             f"({exc})") from None
    raise ValueError(f"local teacher {target!r} is a {type(obj).__name__}, not a Teacher, module or factory")


def available_adapters() -> dict[str, str]:
    """Adapter names -> where they come from ("builtin" or the entry point's value)."""
    out = {name: "builtin" for name in builtin_adapters()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        out.setdefault(ep.name, ep.value)
    return out


def _plugin_options(name: str) -> frozenset[str] | None:
    """A third-party adapter's options: its factory's keyword parameters (None: it takes any, or none is
    installed by that name)."""
    factory = _plugin(name)
    return declared_options(factory) if factory is not None else None


def _plugin(name: str) -> Factory | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            factory = ep.load()
            if not callable(factory):
                raise TypeError(f"entry point {name!r} ({ep.value}) is not callable")
            checked: Factory = factory  # an entry point's object: checked callable above
            return checked
    return None


def resolve(target: str) -> tuple[str, str]:
    """Split a teacher address into (adapter name, adapter target)."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError("teacher address must be a non-empty string, e.g. oip+http://127.0.0.1:8000/digits")
    target = target.strip()
    scheme, sep, rest = target.partition("://")
    if sep:
        if "+" in scheme:
            name, _, inner = scheme.partition("+")
            return name.lower(), f"{inner}://{rest}"
        if scheme.lower() in ("http", "https"):
            return "oip", target
        return scheme.lower(), rest  # hf://org/model -> ("hf", "org/model"); plugin://x -> ("plugin", "x")
    name, sep, rest = target.partition(":")
    if sep:
        return name.lower(), rest
    return target.lower(), ""


def connect(target: str, *, token: str | None = None, **opts: Any) -> Teacher:
    """Open a teacher by address (see the module docstring for the forms).

    Options go to the adapter: its own (model facts such as ``num_classes=``), and for the
    HTTP adapters the connection, either as one ``transport=HttpTransport(...)``
    (:mod:`ldpclient.teachers.http`, where its options are documented) or as that
    transport's keyword options (``token=``, ``timeout=``, ``retry=``, ``verify=``, ...),
    from which the adapter builds its transport; both at once is a ValueError, an option no
    one takes a TypeError. ``token``: bearer token / API key (else the adapter's environment
    variable: ``LDPCLIENT_TOKEN``, or ``HF_TOKEN`` for Hugging Face).
    """
    name, inner = resolve(target)
    entry = builtin_adapters().get(name)
    factory = entry.connect if entry is not None else _plugin(name)
    if factory is None:
        known = ", ".join(sorted(available_adapters()))
        raise ValueError(f"no teacher adapter named {name!r} (known: {known}); install a plugin that registers it")
    if token is not None:
        opts["token"] = token
    return factory(inner, **opts)
