"""The Teacher base class: what every adapter (remote or in-process) provides.

An adapter subclasses :class:`Teacher` and implements :meth:`~Teacher.metadata` and
:meth:`~Teacher.classify`; the other methods are optional hooks with working defaults
(override them when the adapter knows better). Objects that only have ``metadata()``
and ``classify()`` without subclassing are still accepted: :func:`as_teacher` wraps
them, and is the one place that decides what counts as a teacher.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import torch

from ..privacy.release import Releasable
from .billing import BillingGuard, takes_billing
from .limits import check_class_names
from .result import InferResult

#: What a teacher accepts: LDP output only (the privacy layer's ``Releasable``).
Queries = Releasable


@dataclass(frozen=True)
class TeacherMetadata:
    """What a teacher expects and returns.

    ``input_shape``: per-record shape without the batch axis, e.g. ``(1, 28, 28)``.
    ``datatype``: wire datatype of inputs, ``"FP32"`` (values in ``value_range``)
    or ``"UINT8"`` (0..255, meaning ``value_range`` scaled to bytes).
    ``num_classes``: labels are ints in ``[0, num_classes)``.
    ``class_names``: names by label index when the teacher publishes them.
    ``max_batch_size``: largest batch one request may carry (None = unknown).
    ``assumed``: one short phrase per fact that neither the server published nor
    the user supplied, e.g. ``"value_range [0, 1]"`` (runs print them).
    ``abstains``: the teacher may answer :data:`~ldpclient.teachers.result.ABSTAINED` (-1) for a query it
    declines to label (chat and vision APIs); a classifier always names a class. ``batch_api``: the teacher
    answers a batch of queries later, as one job (a batch API): a plan's batches are then as large as
    ``max_batch_size`` allows, not the few hundred queries a request carries.

    Class names are data a peer controls: each must be at most
    :data:`~ldpclient.teachers.limits.MAX_CLASS_NAME_CHARS` characters (a longer one is a
    :class:`MalformedResponse`), and they are escaped wherever they are shown or written.
    """

    name: str
    input_shape: tuple[int, ...]
    datatype: str
    num_classes: int
    class_names: tuple[str, ...] | None = None
    max_batch_size: int | None = None
    value_range: tuple[float, float] = (0.0, 1.0)
    assumed: tuple[str, ...] = ()
    abstains: bool = False
    batch_api: bool = False

    def __post_init__(self) -> None:
        if self.class_names is not None:
            check_class_names(self.class_names, self.name)


class Teacher(abc.ABC):
    """A classifier that returns hard labels for LDP-derived queries only.

    Required: :meth:`metadata` and :meth:`classify`. Optional hooks (defaults below):
    :attr:`journal_scope`, :meth:`requests_for`, :meth:`infer`, :meth:`close`.
    A teacher is a context manager (``with`` closes it).
    """

    _journal_scope: str | None = None

    @abc.abstractmethod
    def metadata(self) -> TeacherMetadata:
        """Input shape, datatype, number of classes (may contact the server once)."""

    @abc.abstractmethod
    def classify(self, queries: Queries) -> torch.Tensor:
        """Hard labels, int64 ``(Q,)``, one per query row. Raw tensors raise TypeError."""

    @property
    def journal_scope(self) -> str:
        """Optional hook: the key the journal and ledger file this teacher's answers under.

        Set it (``self.journal_scope = "acme:https://..."``) or override the property;
        default: ``metadata().name``. Two teachers with one scope share journaled labels.
        """
        return self._journal_scope or self.metadata().name

    @journal_scope.setter
    def journal_scope(self, value: str) -> None:
        self._journal_scope = value

    def requests_for(self, n: int) -> int:
        """Optional hook: HTTP requests one :meth:`infer` call on ``n`` queries takes.

        The client prices per-request fees with it before sending (it calls it once per
        chunk of at most its batch size). Default: 1.
        """
        return 1

    def most_per_query(self) -> float | None:
        """Optional hook: the most money one query can cost, for a teacher that prices its own answers (tokens
        at the prices it was given); the client books every attempt at it and settles from the answer's
        :attr:`~ldpclient.teachers.result.InferResult.cost`. Default None: priced per query by the caller."""
        return None

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        """Optional hook: labels plus accounting (requests, attempts, bytes, billed units).

        ``request_id``: a stable id for the request (servers may echo or log it).
        ``billing``: the batch's billing hook; an HTTP adapter passes it, with the queries a
        request carries as ``units``, to ``HttpTransport.call`` so that every attempt is counted.
        Default: :meth:`classify`, counted as one request with nothing billed reported.
        """
        return InferResult(labels=torch.as_tensor(self.classify(queries)), requests=1, billed=None)

    def close(self) -> None:  # noqa: B027 (a hook whose default is to do nothing, not abstract)
        """Optional hook: release connections and other resources. Default: nothing to do."""

    def __enter__(self) -> "Teacher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Delegating(Teacher):
    """A :class:`Teacher` around an object that has ``metadata()`` and ``classify()`` but
    does not subclass it: each hook calls the object's method of that name when it has
    one, else the default. Other attributes are read from the object."""

    def __init__(self, obj: Any) -> None:
        self.wrapped = obj

    def metadata(self) -> TeacherMetadata:
        meta: TeacherMetadata = self.wrapped.metadata()
        return meta

    def classify(self, queries: Queries) -> torch.Tensor:
        labels: torch.Tensor = self.wrapped.classify(queries)
        return labels

    @property
    def journal_scope(self) -> str:
        return self._journal_scope or getattr(self.wrapped, "journal_scope", None) or self.metadata().name

    @journal_scope.setter
    def journal_scope(self, value: str) -> None:
        self._journal_scope = value

    def requests_for(self, n: int) -> int:
        hook = getattr(self.wrapped, "requests_for", None)
        return int(hook(n)) if hook is not None else super().requests_for(n)

    def most_per_query(self) -> float | None:
        hook = getattr(self.wrapped, "most_per_query", None)
        return hook() if callable(hook) else None

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        hook = getattr(self.wrapped, "infer", None)
        if hook is None:
            return super().infer(queries)
        if billing is not None and takes_billing(hook):
            result: InferResult = hook(queries, request_id=request_id, billing=billing)
        else:
            result = hook(queries, request_id=request_id)
        return result

    def close(self) -> None:
        hook = getattr(self.wrapped, "close", None)
        if callable(hook):
            hook()

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not yet set (e.g. during unpickling)
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return repr(self.wrapped)


def as_teacher(obj: object) -> Teacher:
    """``obj`` as a :class:`Teacher`: a Teacher instance unchanged, an object with callable
    ``metadata()`` and ``classify()`` wrapped (its ``journal_scope``, ``requests_for``,
    ``infer`` and ``close`` are used when present). Anything else raises TypeError."""
    if isinstance(obj, Teacher):
        return obj
    if isinstance(obj, type):
        raise TypeError(f"{obj.__name__} is a class, not a teacher: pass an instance")
    missing = [f"{m}()" for m in ("metadata", "classify") if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(
            f"{type(obj).__name__} is not a teacher: it has no {' or '.join(missing)} "
            "(a teacher needs metadata() and classify(queries))"
        )
    return _Delegating(obj)
