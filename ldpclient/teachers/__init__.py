"""Teacher adapters: the remote (or in-process) classifier that labels LDP queries.

* :func:`connect` opens a teacher by address (``oip+http://...``, ``hf://...``,
  ``torchserve+http://...``, ``local:...`` or a third-party adapter's name).
* :class:`Teacher` is the base class of adapters (:func:`as_teacher` accepts plain
  objects with ``metadata()`` and ``classify()`` too).
* :class:`QueryClient` labels query batches with batching, bounded concurrency,
  a money cap and a resumable :class:`Journal`.
* :class:`HttpTransport` and :class:`RetryPolicy` carry an HTTP teacher's connection
  options (``connect(address, transport=HttpTransport(...))``); adapter authors find
  them, with the encoding and result checks, in :mod:`ldpclient.teachers.http`.
"""

from .base import Queries, Teacher, TeacherMetadata, as_teacher
from .client import QueryClient
from .client_stats import ClientStats
from .cost import CostMeter, Reconciliation
from .errors import (
    CostCapReached,
    JournalError,
    JournalMismatch,
    MalformedResponse,
    RetriesExhausted,
    TeacherError,
    TeacherRequestError,
    TransientTeacherError,
)
from .http import HttpTransport, RetryPolicy
from .journal import Journal, default_journal_path
from .local import LocalTeacher
from .registry import ENTRY_POINT_GROUP, available_adapters, connect
from .result import InferResult

__all__ = [
    "Queries",
    "Teacher",
    "as_teacher",
    "TeacherMetadata",
    "ClientStats",
    "QueryClient",
    "CostMeter",
    "Reconciliation",
    "CostCapReached",
    "JournalError",
    "JournalMismatch",
    "MalformedResponse",
    "RetriesExhausted",
    "TeacherError",
    "TeacherRequestError",
    "TransientTeacherError",
    "HttpTransport",
    "RetryPolicy",
    "Journal",
    "default_journal_path",
    "LocalTeacher",
    "ENTRY_POINT_GROUP",
    "available_adapters",
    "connect",
    "InferResult",
]
