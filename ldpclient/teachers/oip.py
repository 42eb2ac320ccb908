"""Open Inference Protocol v2 adapter (KServe, Triton, MLServer, the bundled mock teacher).

Endpoints used: ``GET /v2/health/ready``, ``GET /v2`` (server extensions),
``GET /v2/models/{m}[/versions/{v}]`` (metadata), optionally
``GET .../config`` (Triton's ``max_batch_size``), ``POST .../infer``.

Requests carry the queries as one input tensor ``[N, *input_shape]`` in the model's
datatype (FP32 values clipped to ``value_range``; UINT8 = the range scaled to
0..255). With the binary tensor extension (``wire="binary"``) the body is a
compact JSON header followed by the raw little-endian tensor bytes
(``Inference-Header-Content-Length`` gives the header length), so a batch of
28x28 FP32 queries costs about 3,136 bytes per query plus one small header.
``wire="auto"`` (default) tries binary and falls back to JSON once when the server
fails a binary request but answers the same request as JSON (stock MLServer has
no binary extension); the choice is remembered per teacher in the state
directory (:mod:`ldpclient.teachers.wire`).

What the model is comes from its metadata and the user's facts (:mod:`.oip_metadata`: real
servers publish less than the mock teacher, so ``num_classes=``, ``value_range=``,
``input_shape=`` ... may have to come from the user); the bodies are encoded and every answer
checked by :mod:`.oip_codec`. A response id that differs from the request's is accepted
(KServe's examples answer with a fresh id) and logged once.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import quote, urlsplit

import numpy as np
import requests
import torch

from ..state import default_state_dir
from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .encoding import INPUT_DATATYPES, to_wire
from .errors import MalformedResponse, TeacherRequestError, TransientTeacherError
from .http import HttpTransport, TransportOptions, redact_url, transport_from_options
from .identity import adapter_scope
from .limits import TeacherLimits
from .oip_codec import HEADER_LENGTH, OIPCodec
from .oip_metadata import DEFAULT_VALUE_RANGE, FactConflict, MetadataReader, ModelDescription, ModelFacts, check_facts
from .registry import register_adapter
from .result import InferResult
from .wire import WIRE_FORMATS, WireMemory

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger("ldpclient.teachers.oip")


def _check_options(base_url: str, model: str, classification: bool | str, datatype: str | None, wire: str) -> None:
    """ValueError naming the option for an OIP teacher's address, model, classification, datatype or wire that
    cannot work."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"OIP base URL must be http(s)://host[:port][/prefix], got {base_url!r}")
    if not model:
        raise ValueError("OIP teacher needs a model name")
    if classification not in ("auto", True, False):
        raise ValueError(f"classification must be 'auto', True or False, got {classification!r}")
    if datatype is not None and datatype not in INPUT_DATATYPES:
        raise ValueError(f"datatype must be one of {INPUT_DATATYPES}, got {datatype!r}")
    if wire not in WIRE_FORMATS:
        raise ValueError(f"wire must be one of {', '.join(WIRE_FORMATS)}, got {wire!r}")


class OIPTeacher(Teacher):
    """A model served over the Open Inference Protocol v2 (REST).

    ``base_url``: server root, e.g. ``http://127.0.0.1:8000``; ``model``: model name;
    ``version``: optional model version. ``wire``: ``"auto"`` (binary tensor
    extension, falling back to JSON once if the server cannot take it),
    ``"binary"`` or ``"json"``; ``state_dir``: where the ``auto`` choice is
    remembered (default :func:`ldpclient.state.default_state_dir`). Facts the
    server may not publish: ``input_name``, ``output_name``, ``num_classes``,
    ``class_names``, ``datatype`` (``"FP32"`` or ``"UINT8"``...), ``value_range``
    (units the model's inputs are in), ``input_shape`` (per record, e.g.
    ``(1, 28, 28)``), ``max_batch_size``; a supplied fact that contradicts the
    server's metadata raises ValueError.
    ``classification``: ``"auto"``, True or False (Triton classification extension).
    ``check_ready``: call ``/v2/health/ready`` before reading metadata.
    ``transport``: the :class:`~ldpclient.teachers.http.HttpTransport` carrying the
    connection options (auth, timeouts, retries, TLS, size and time limits); without
    one, its options may be given here as keywords (``token=``, ``timeout=``, ...).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        version: str | None = None,
        wire: str = "auto",
        state_dir: str | Path | None = None,
        input_name: str | None = None,
        output_name: str | None = None,
        num_classes: int | None = None,
        class_names: Sequence[str] | None = None,
        datatype: str | None = None,
        value_range: tuple[float, float] | None = None,
        input_shape: Sequence[int] | None = None,
        max_batch_size: int | None = None,
        classification: bool | str = "auto",
        limits: TeacherLimits | None = None,
        check_ready: bool = True,
        transport: HttpTransport | None = None,
        **transport_options: Unpack[TransportOptions],
    ) -> None:
        # first, so that an unknown keyword is a TypeError whatever else is wrong
        self.http = transport_from_options(transport, transport_options, adapter="OIPTeacher", name=f"oip:{model}",
                                           url=base_url)
        _check_options(base_url, model, classification, datatype, wire)
        check_facts(num_classes, class_names, value_range, input_shape, max_batch_size)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.version = version
        self._facts = ModelFacts(
            input_name=input_name, output_name=output_name, num_classes=num_classes,
            class_names=tuple(class_names) if class_names is not None else None, datatype=datatype,
            value_range=tuple(float(v) for v in value_range) if value_range is not None else None,
            input_shape=tuple(int(v) for v in input_shape) if input_shape is not None else None,
            max_batch_size=max_batch_size,
        )
        self._classification_opt = classification
        self.limits = limits or TeacherLimits()
        self.check_ready = check_ready
        self.model_url = _model_url(self.base_url, model, version)
        self.address = redact_url(self.model_url)
        self.journal_scope = adapter_scope("oip", self.model_url)  # one identity however the URL was spelled
        self.wire = wire
        self._start_wire(wire, state_dir)
        self._model: ModelDescription | None = None
        self._codec: OIPCodec | None = None
        self._meta_lock = threading.Lock()

    def _start_wire(self, wire: str, state_dir: str | Path | None) -> None:
        """The request bodies to start with: ``wire``, or for ``auto`` what the state directory remembers of this
        model (binary until a server fails one that JSON then answers)."""
        self._wire_memory = WireMemory(state_dir if state_dir is not None else default_state_dir())
        remembered = self._wire_memory.get(self.model_url) if wire == "auto" else None
        #: binary bodies now? (``auto``: until the server fails one that JSON then answers)
        self.binary = wire == "binary" or (wire == "auto" and remembered != "json")
        self._wire_decided = wire != "auto" or remembered is not None
        self._wire_lock = threading.Lock()

    # -- construction from an address -------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **opts: Any) -> "OIPTeacher":
        """``http://host:port/model``, ``http://host:port/v2/models/model[/versions/v]``,
        or ``http://host:port`` with ``model=`` given as an option."""
        base, model, version = parse_oip_url(url, opts.pop("model", None), opts.pop("version", None))
        return cls(base, model, version=version, **opts)

    # -- health and metadata ----------------------------------------------------------------
    def _healthy(self, which: str) -> bool:
        """Any 2xx from ``/v2/health/{which}`` means yes, whatever the body (the spec advises an
        empty one); a server without health endpoints (404) counts as healthy. Anything else raises
        the transport's error, which says what happened (an error answer after the retries a 5xx
        gets, a redirect that is not followed, an unreachable server): never a bare "not ready"."""
        url = f"{self.base_url}/v2/health/{which}"
        try:
            self.http.call("GET", url, parse=lambda resp: None, what=f"health check of {self.address}",
                           first_contact=True)
        except TeacherRequestError as exc:
            if exc.status == 404:
                return True
            raise
        return True

    def live(self) -> bool:
        return self._healthy("live")

    def ready(self) -> bool:
        """True when the server answers its readiness check with a 2xx (or has no such endpoint)."""
        return self._healthy("ready")

    def metadata(self) -> TeacherMetadata:
        return self.description().meta

    def description(self) -> ModelDescription:
        """The model as this client talks to it (read once: readiness, metadata, maybe config)."""
        with self._meta_lock:
            if self._model is None:
                if self.check_ready:
                    self.ready()  # True, or raises with the reason
                self._model = self._read_description()
                self._codec = OIPCodec(self._model, self.address)
            return self._model

    @property
    def codec(self) -> OIPCodec:
        """The request/response codec of this model (reads the metadata first if needed)."""
        self.description()
        assert self._codec is not None
        return self._codec

    # the tensors and options a request names (read from the description)
    @property
    def input_name(self) -> str:
        return self.description().input_name

    @property
    def output_name(self) -> str:
        return self.description().output_name

    @property
    def output_datatype(self) -> str:
        return self.description().output_datatype

    @property
    def use_classification(self) -> bool:
        return self.description().use_classification

    def _read_description(self) -> ModelDescription:
        reader = MetadataReader(
            self._facts, model=self.model, where=self.address, limits=self.limits,
            classification=self._classification_opt, config_max_batch=self._config_max_batch,
            server_extensions=lambda: self.http.get_json(f"{self.base_url}/v2", what="server metadata", optional=True),
        )
        try:
            return reader.read(self.http.get_json(self.model_url, what=f"metadata of {self.address}"))
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            if isinstance(exc, FactConflict):
                raise ValueError(str(exc)) from None
            raise MalformedResponse(
                f"teacher {self.address} published unusable metadata: {type(exc).__name__}: {str(exc)[:200]}",
                transient=False,
            ) from None

    def _config_max_batch(self) -> int | None:
        """Batch limit from Triton's ``GET .../config`` (``max_batch_size`` > 0), when the metadata gave none."""
        cfg = self.http.get_json(f"{self.model_url}/config", what="model config", optional=True)
        if isinstance(cfg, dict) and int(cfg.get("max_batch_size", 0) or 0) > 0:
            return int(cfg["max_batch_size"])
        return None

    # -- inference --------------------------------------------------------------------------
    def requests_for(self, n: int) -> int:
        mb = self.metadata().max_batch_size
        return max(1, math.ceil(n / mb)) if mb else 1

    def classify(self, queries: Queries) -> torch.Tensor:
        """Hard labels int64 ``(Q,)`` for Release/Derived queries (raw tensors: TypeError)."""
        return self.infer(queries).labels

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        meta = self.metadata()
        wire = to_wire(queries, meta)
        n = wire.shape[0]
        step = meta.max_batch_size or max(n, 1)
        labels: list[torch.Tensor] = []
        total = InferResult(labels=torch.zeros(0, dtype=torch.int64), requests=0, billed=0, attempts=0)
        for k, start in enumerate(range(0, n, step)):
            chunk = wire[start : start + step]
            rid = request_id if (request_id is None or step >= n) else f"{request_id}.{k}"
            part = self._infer_chunk(chunk, rid, billing)
            labels.append(part.labels)
            total.requests += 1
            total.attempts += part.attempts
            total.bytes_sent += part.bytes_sent
            total.bytes_received += part.bytes_received
            total.waits.add(part.waits)
            total.billed = None if (total.billed is None or part.billed is None) else total.billed + part.billed
        if labels:
            total.labels = torch.cat(labels)
        return total

    def encode_request(
        self, chunk: np.ndarray, request_id: str | None, *, binary: bool | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """Request body and headers for one chunk ``(N, *input_shape)`` already in the wire datatype
        (``binary``: use the binary tensor extension; default: the teacher's current wire format)."""
        return self.codec.encode_request(chunk, request_id, binary=self.binary if binary is None else binary)

    def decode_response(
        self, resp: requests.Response, n: int, request_id: str | None
    ) -> tuple[torch.Tensor, int | None]:
        """Labels ``(n,)`` and billed units from an infer response (raises MalformedResponse)."""
        return self.codec.decode_response(resp, n, request_id)

    def _infer_chunk(self, chunk: np.ndarray, request_id: str | None, billing: BillingGuard | None) -> InferResult:
        if not self._wire_decided:
            with self._wire_lock:  # one probe at a time; the others wait for its outcome
                if not self._wire_decided:
                    return self._probe_wire(chunk, request_id, billing)
        return self._send(chunk, request_id, billing, binary=self.binary)

    def _probe_wire(self, chunk: np.ndarray, request_id: str | None, billing: BillingGuard | None) -> InferResult:
        """``wire="auto"``: one binary attempt; on an HTTP error or an unparsable answer, the same
        request as JSON, and JSON from then on if that succeeds. Only the answered attempt is billed."""
        try:
            result = self._send(chunk, request_id, billing, binary=True, retry=False)
        except (TeacherRequestError, MalformedResponse, TransientTeacherError) as exc:
            if isinstance(exc, TransientTeacherError) and exc.status is None:
                result = self._send(chunk, request_id, billing, binary=True)  # no answer at all: nothing learnt yet
                self._decide(binary=True)
                return result
            self.http.close()  # servers may drop the connection after a body they could not read
            result = self._send(chunk, request_id, billing, binary=False)
            brief = " ".join(str(exc).split())
            log.warning(
                "teacher %s failed a binary-extension request (%s) but answered it as JSON: using JSON bodies "
                "from now on (remembered in %s)", self.address, brief[:160] + ("..." if len(brief) > 160 else ""),
                self._wire_memory.path,
            )
            self._decide(binary=False)
            return result
        self._decide(binary=True)
        return result

    def _decide(self, *, binary: bool) -> None:
        self.binary = binary
        self._wire_decided = True
        self._wire_memory.set(self.model_url, "binary" if binary else "json")

    def _send(
        self, chunk: np.ndarray, request_id: str | None, billing: BillingGuard | None, *, binary: bool,
        retry: bool = True,
    ) -> InferResult:
        body, headers = self.encode_request(chunk, request_id, binary=binary)
        n = chunk.shape[0]
        (labels, billed), info = self.http.call(
            "POST", f"{self.model_url}/infer", data=body, headers=headers,
            parse=lambda resp: self.decode_response(resp, n, request_id), what=f"infer {self.address}", retry=retry,
            units=n, billing=billing,
        )
        if info.billed_header is not None:  # counts units billed for failed/malformed attempts too
            billed = info.billed_header
        return InferResult(labels, 1, billed, info.bytes_sent, info.bytes_received, info.attempts, waits=info.waits)

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"OIPTeacher({self.address!r}, wire={self.wire!r}, token={'***' if self.http.has_token else None})"


def parse_oip_url(url: str, model: str | None = None, version: str | None = None) -> tuple[str, str, str | None]:
    """``(base URL, model, version)`` of an OIP teacher address (see :meth:`OIPTeacher.from_url`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"OIP teacher URL must start with http:// or https://, got {url!r}")
    path = [p for p in parts.path.split("/") if p]
    root = f"{parts.scheme}://{parts.netloc}"
    if "models" in path and path.index("models") > 0 and path[path.index("models") - 1] == "v2":
        i = path.index("models")
        prefix, rest = path[: i - 1], path[i + 1 :]
        if rest:
            model = rest[0]
        if len(rest) >= 3 and rest[1] == "versions":
            version = rest[2]
    elif path:
        prefix, model = path[:-1], model or path[-1]
    else:
        prefix = []
    if not model:
        raise ValueError(f"no model name in teacher URL {url!r}: give the model's address, {root}/v2/models/<model>")
    return root + ("/" + "/".join(prefix) if prefix else ""), model, version


def _model_url(base_url: str, model: str, version: str | None) -> str:
    return f"{base_url.rstrip('/')}/v2/models/{quote(model, safe='')}" + (
        f"/versions/{quote(str(version), safe='')}" if version else ""
    )


def oip_model_url(url: str) -> str:
    """The model endpoint an OIP teacher address names (what its identity is made of)."""
    return _model_url(*parse_oip_url(url))


@register_adapter("oip", identity=oip_model_url, takes=OIPTeacher)
def connect_oip(target: str, **opts: Any) -> OIPTeacher:
    """``oip+http(s)://...`` or a plain ``http(s)://`` address (see :meth:`OIPTeacher.from_url`)."""
    return OIPTeacher.from_url(target, **opts)


__all__ = ["DEFAULT_VALUE_RANGE", "HEADER_LENGTH", "OIPTeacher", "connect_oip", "oip_model_url", "parse_oip_url"]
