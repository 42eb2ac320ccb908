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

Real servers publish less than the mock teacher: a health check answers 200 with
an empty body (any 2xx means ready), KServe's metadata has no ``parameters``, so
the number of classes, value range, class names and batch limit may have to come
from the user (``num_classes=``, ``value_range=``, ``input_shape=`` ...). Facts
neither published nor supplied are listed in ``TeacherMetadata.assumed``; facts
the user supplied that contradict the server's are an error.

Outputs understood:
* class indices: an integer output ``[N]`` or ``[N, 1]`` (the mock teacher's ``label``);
* scores/logits: a float output ``[N, K]`` -> argmax taken here;
* Triton's classification extension (``"parameters": {"classification": 1}`` on
  the requested output, answered as BYTES ``"score:index[:label]"`` strings),
  used when the output is scores and the server lists the ``classification``
  extension, or when forced with ``classification=True``.

Every answer is checked: the requested output, its declared datatype, one label
per query, labels in ``[0, num_classes)``; anything else is a
:class:`MalformedResponse`. A response id that differs from the request's is
accepted (KServe's examples answer with a fresh id) and logged once. Billed units come from ``X-Billed-Images`` or the
response's ``parameters.billed_images``.
"""

from __future__ import annotations

import json
import logging
import math
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote, urlsplit

import numpy as np
import requests
import torch

from ..state import default_state_dir
from ..text import printable
from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .encoding import FLOAT_DATATYPES, INPUT_DATATYPES, INTEGER_DATATYPES, NUMPY_DTYPES, to_wire
from .errors import MalformedResponse, TeacherError, TeacherRequestError, TransientTeacherError
from .http import HttpTransport, redact_url, transport_from_options
from .identity import adapter_scope
from .limits import TeacherLimits
from .result import InferResult, validate_labels
from .wire import WIRE_FORMATS, WireMemory

HEADER_LENGTH = "Inference-Header-Content-Length"
DEFAULT_VALUE_RANGE = (0.0, 1.0)

log = logging.getLogger("ldpclient.teachers.oip")


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
        **transport_options: Any,
    ) -> None:
        # first, so that an unknown keyword is a TypeError whatever else is wrong
        self.http = transport_from_options(transport, transport_options, adapter="OIPTeacher", name=f"oip:{model}")
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
        _check_facts(num_classes, class_names, value_range, input_shape, max_batch_size)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.version = version
        self._overrides: dict[str, Any] = dict(
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
        self._wire_memory = WireMemory(state_dir if state_dir is not None else default_state_dir())
        remembered = self._wire_memory.get(self.model_url) if wire == "auto" else None
        #: binary bodies now? (``auto``: until the server fails one that JSON then answers)
        self.binary = wire == "binary" or (wire == "auto" and remembered != "json")
        self._wire_decided = wire != "auto" or remembered is not None
        self._wire_lock = threading.Lock()
        self._id_mismatch_logged = False
        self._meta: TeacherMetadata | None = None
        self._meta_lock = threading.Lock()
        self.input_name = ""
        self.output_name = ""
        self.output_datatype = ""
        self.use_classification = False

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
            self.http.call("GET", url, parse=lambda resp: None, what=f"health check of {self.address}")
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
        with self._meta_lock:
            if self._meta is None:
                if self.check_ready:
                    self.ready()  # True, or raises with the reason
                self._meta = self._read_metadata()
            return self._meta

    def _read_metadata(self) -> TeacherMetadata:
        try:
            return self._parse_metadata(
                self.http.get_json(self.model_url, what=f"metadata of {self.address}")
            )
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            if isinstance(exc, _FactConflict):
                raise ValueError(str(exc)) from None
            raise MalformedResponse(
                f"teacher {self.address} published unusable metadata: {type(exc).__name__}: {str(exc)[:200]}",
                transient=False,
            ) from None

    def _parse_metadata(self, md: Any) -> TeacherMetadata:
        """TeacherMetadata from the metadata document ``md`` and the user's facts (see the class doc)."""
        where = self.address
        if not isinstance(md, dict):
            raise MalformedResponse(f"model metadata from {where} is not a JSON object: {str(md)[:200]}", transient=False)
        params: dict[str, Any] = md["parameters"] if isinstance(md.get("parameters"), dict) else {}
        inputs: list[Any] = md["inputs"] if isinstance(md.get("inputs"), list) else []
        outputs: list[Any] = md["outputs"] if isinstance(md.get("outputs"), list) else []
        inp = self._metadata_input(inputs, where)
        out = self._metadata_output(outputs, where)
        self.input_name, self.output_name = str(inp["name"]), str(out["name"])
        self.output_datatype = str(out.get("datatype", "")).upper()
        datatype = self._input_datatype(inp, where)
        input_shape, max_batch = self._input_shape(inp, params, where)
        if max_batch is None:
            max_batch = self._config_max_batch()
        classes = self._classes(params, out, where)
        if max_batch is not None:
            max_batch = min(int(max_batch), self.limits.max_batch_size)
        self._check_label_output(classes, where)
        self.use_classification = self._wants_classification(classes.scores)
        value_range, assumed = self._value_range(params, where)
        return TeacherMetadata(
            name=str(md.get("name") or self.model),
            input_shape=input_shape,
            datatype=datatype,
            num_classes=int(classes.num_classes),
            class_names=classes.names,
            max_batch_size=int(max_batch) if max_batch else None,
            value_range=(float(value_range[0]), float(value_range[1])),
            assumed=tuple(assumed),
        )

    def _metadata_input(self, inputs: list[Any], where: str) -> dict[str, Any]:
        """The input tensor entry from metadata ``inputs`` (by ``input_name`` if given), else from the user's facts."""
        ov = self._overrides
        if inputs:
            return _pick(inputs, ov["input_name"], "input", where)
        if ov["input_name"] and ov["input_shape"] and ov["datatype"]:
            return {"name": ov["input_name"], "datatype": ov["datatype"], "shape": [-1, *ov["input_shape"]]}
        raise TeacherError(
            f"model metadata from {where} declares no inputs; pass input_name=, input_shape= and datatype= "
            "(CLI: --input-name, --input-shape, --datatype)"
        )

    def _metadata_output(self, outputs: list[Any], where: str) -> dict[str, Any]:
        """The output tensor entry: from metadata ``outputs`` (by ``output_name`` if given), else the user's name."""
        ov = self._overrides
        if outputs:
            return _pick(outputs, ov["output_name"], "output", where)
        if ov["output_name"]:
            return {"name": ov["output_name"], "shape": [-1]}  # datatype: whatever the answers carry
        raise TeacherError(f"model metadata from {where} lists no outputs; pass output_name= (CLI: --output-name)")

    def _input_datatype(self, inp: dict[str, Any], where: str) -> str:
        """The wire datatype: the user's ``datatype`` or the input entry's ``datatype``; must be one we can send."""
        datatype = self._overrides["datatype"] or str(inp.get("datatype", "")).upper()
        if datatype not in INPUT_DATATYPES:
            raise TeacherError(
                f"model at {where} takes {datatype or 'an undeclared datatype'}; supported: {INPUT_DATATYPES}"
                + ("" if datatype else " (pass datatype=, CLI --datatype)")
            )
        return datatype

    def _input_shape(self, inp: dict[str, Any], params: dict[str, Any], where: str) -> tuple[tuple[int, ...], int | None]:
        """Per-record shape from the input's ``shape`` (batch axis dropped) and ``parameters.max_batch_size``."""
        ov = self._overrides
        shape = [int(s) for s in inp.get("shape", [])]
        published_batch = params.get("max_batch_size")
        max_batch = ov["max_batch_size"] or (int(published_batch) if published_batch is not None else None)
        if shape and shape[0] == -1:
            input_shape = tuple(shape[1:])
        elif len(shape) >= 2 and shape[0] == 1:  # fixed batch of one
            input_shape, max_batch = tuple(shape[1:]), 1
        else:
            input_shape = tuple(shape)
        if ov["input_shape"] is not None:
            if input_shape and all(s > 0 for s in input_shape) and input_shape != ov["input_shape"]:
                raise _FactConflict(f"teacher {where} declares input shape {input_shape}, but {ov['input_shape']} was given")
            input_shape = ov["input_shape"]
        if not input_shape or any(s < 1 for s in input_shape):
            raise TeacherError(
                f"model at {where} has a variable input shape {shape}; pass input_shape= (CLI: --input-shape C,H,W)"
            )
        self.limits.check_input_shape(input_shape, where)
        if max_batch is not None and max_batch < 1:
            raise MalformedResponse(f"teacher {where} publishes max_batch_size {max_batch} (must be >= 1)", transient=False)
        return input_shape, max_batch

    def _config_max_batch(self) -> int | None:
        """Batch limit from Triton's ``GET .../config`` (``max_batch_size`` > 0), when the metadata gave none."""
        cfg = self.http.get_json(f"{self.model_url}/config", what="model config", optional=True)
        if isinstance(cfg, dict) and int(cfg.get("max_batch_size", 0) or 0) > 0:
            return int(cfg["max_batch_size"])
        return None

    def _classes(self, params: dict[str, Any], out: dict[str, Any], where: str) -> _Classes:
        """Classes from ``parameters.num_classes``/``class_names``, else a float output's last ``shape`` axis."""
        ov = self._overrides
        published_names = tuple(str(c) for c in params["class_names"]) if params.get("class_names") else None
        class_names = ov["class_names"] or published_names
        published_k = params.get("num_classes")
        out_shape = [int(s) for s in out.get("shape", [])]
        scores = self.output_datatype in FLOAT_DATATYPES
        if published_k is None and scores and out_shape and out_shape[-1] > 0:
            published_k = out_shape[-1]
        if published_k is not None:
            published_k = int(published_k)
        num_classes = ov["num_classes"] or published_k or (len(class_names) if class_names else None)
        for label, given, published in (("num_classes", ov["num_classes"], published_k),
                                        ("class_names", ov["class_names"], published_names)):
            if given is not None and published is not None and given != published:
                if isinstance(given, tuple) and isinstance(published, tuple):  # class names: never echoed
                    raise _FactConflict(  # (names given from a file: the file could be anything)
                        f"teacher {where} publishes {len(published)} class names that differ from the "
                        f"{len(given)} given (--class-names)"
                    )
                raise _FactConflict(f"teacher {where} publishes {label} {published!r}, but {given!r} was given")
        if num_classes is None:
            raise TeacherError(
                f"teacher {where} does not publish its number of classes; pass num_classes= (CLI: --num-classes)"
            )
        if num_classes < 2:
            raise MalformedResponse(f"teacher {where} publishes {num_classes} classes (need >= 2)", transient=False)
        self.limits.check_classes(int(num_classes), where)
        return _Classes(num_classes, class_names, scores)

    def _check_label_output(self, classes: _Classes, where: str) -> None:
        """One name per class, and an output ``datatype`` (if declared) that holds labels or scores."""
        class_names, num_classes = classes.names, classes.num_classes
        if class_names is not None and len(class_names) != num_classes:
            raise _FactConflict(f"{len(class_names)} class names for the {num_classes} classes of teacher {where}")
        if self.output_datatype and self.output_datatype not in INTEGER_DATATYPES + FLOAT_DATATYPES:
            raise TeacherError(f"model at {where}: output {self.output_name!r} is {self.output_datatype}, not labels or scores")

    def _wants_classification(self, scores: bool) -> bool:
        """Use Triton's classification extension? ``auto``: for a scores output when ``GET /v2`` lists it."""
        if self._classification_opt != "auto":
            return bool(self._classification_opt)
        if not scores:
            return False
        server = self.http.get_json(f"{self.base_url}/v2", what="server metadata", optional=True)
        return isinstance(server, dict) and "classification" in (server.get("extensions") or [])

    def _value_range(self, params: dict[str, Any], where: str) -> tuple[tuple[float, ...], list[str]]:
        """Input units from the user's ``value_range`` or ``parameters.value_range`` (else [0, 1], noted as assumed)."""
        ov = self._overrides
        published_range = params.get("value_range")
        assumed: list[str] = []
        if ov["value_range"] is not None:
            value_range = ov["value_range"]
            if published_range is not None and tuple(float(v) for v in published_range) != value_range:
                raise _FactConflict(f"teacher {where} publishes value_range {list(published_range)}, but {list(value_range)} was given")
        elif published_range is not None:
            value_range = tuple(float(v) for v in published_range)
        else:
            value_range = DEFAULT_VALUE_RANGE
            assumed.append(f"value_range [{value_range[0]:g}, {value_range[1]:g}] (pass --value-range LO,HI if the model expects other units)")
        if len(value_range) != 2 or not value_range[0] < value_range[1]:
            raise MalformedResponse(f"teacher {where} publishes value_range {list(value_range)} (need [low, high])", transient=False)
        return value_range, assumed

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
            total.billed = None if (total.billed is None or part.billed is None) else total.billed + part.billed
        if labels:
            total.labels = torch.cat(labels)
        return total

    def encode_request(
        self, chunk: np.ndarray, request_id: str | None, *, binary: bool | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """Request body and headers for one chunk ``(N, *input_shape)`` already in the wire datatype
        (``binary``: use the binary tensor extension; default: the teacher's current wire format)."""
        meta = self.metadata()
        binary = self.binary if binary is None else binary
        inp: dict[str, Any] = {"name": self.input_name, "shape": list(chunk.shape), "datatype": meta.datatype}
        out: dict[str, Any] = {"name": self.output_name}
        if self.use_classification:
            out["parameters"] = {"classification": 1}
        elif binary:
            out["parameters"] = {"binary_data": True}
        header: dict[str, Any] = {}
        if request_id is not None:
            header["id"] = request_id
        header["inputs"] = [inp]
        header["outputs"] = [out]
        if binary:
            raw = chunk.tobytes()
            inp["parameters"] = {"binary_data_size": len(raw)}
            head = json.dumps(header, separators=(",", ":")).encode()
            return head + raw, {HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"}
        inp["data"] = chunk.reshape(-1).tolist()
        return json.dumps(header, separators=(",", ":")).encode(), {"Content-Type": "application/json"}

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
        return InferResult(labels, 1, billed, info.bytes_sent, info.bytes_received, info.attempts)

    def decode_response(self, resp: requests.Response, n: int, request_id: str | None) -> tuple[torch.Tensor, int | None]:
        """Labels ``(n,)`` and billed units from an infer response (raises MalformedResponse)."""
        meta = self.metadata()
        content = resp.content
        hlen = resp.headers.get(HEADER_LENGTH)
        try:
            if hlen is not None:
                cut = int(hlen)
                if not 0 < cut <= len(content):
                    raise ValueError(f"{HEADER_LENGTH} {cut} does not fit a {len(content)}-byte body")
                header, binary = json.loads(content[:cut]), content[cut:]
            else:
                header, binary = json.loads(content), b""
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedResponse(f"unparseable infer response ({exc}); body starts {content[:80]!r}") from None
        if not isinstance(header, dict) or not isinstance(header.get("outputs"), list):
            raise MalformedResponse(f"infer response has no outputs list: {str(header)[:200]}")
        if request_id is not None and header.get("id") not in (None, request_id) and not self._id_mismatch_logged:
            self._id_mismatch_logged = True  # KServe answers with a fresh id; the answer is checked on its content
            log.info("teacher %s answers with its own response ids (e.g. %r for %r); accepted",
                     self.address, str(header.get("id"))[:60], request_id)
        offset, found = 0, None
        for o in header["outputs"]:
            if not isinstance(o, dict):
                raise MalformedResponse("infer response output is not an object")
            size = (o.get("parameters") or {}).get("binary_data_size")
            piece = None
            if size is not None:
                size = int(size)
                if offset + size > len(binary):
                    raise MalformedResponse(f"binary output {o.get('name')!r} truncated ({len(binary) - offset} of {size} bytes)")
                piece = binary[offset : offset + size]
                offset += size
            if o.get("name") == self.output_name:
                found = (o, piece)
        if found is None:
            names = [o.get("name") for o in header["outputs"]]
            raise MalformedResponse(f"infer response lacks output {self.output_name!r} (got {names})")
        o, piece = found
        labels = self._labels_from_output(o, piece, n, meta)
        billed = _billed(resp, header)
        return labels, billed

    def _labels_from_output(self, o: dict[str, Any], piece: bytes | None, n: int, meta: TeacherMetadata) -> torch.Tensor:
        dt = str(o.get("datatype", "")).upper()
        shape = [int(s) for s in o.get("shape", [])]
        if self.use_classification:
            if dt != "BYTES":
                raise MalformedResponse(f"classification output should be BYTES, got {dt}")
            strings = _bytes_elements(piece) if piece is not None else [str(s) for s in _flat(o.get("data"))]
            return validate_labels(_class_indices(strings), n, meta.num_classes, meta.name)
        declared = self.output_datatype
        if declared and dt != declared:
            raise MalformedResponse(f"output {self.output_name!r} came as {dt}, metadata declares {declared}", transient=False)
        if dt not in NUMPY_DTYPES:
            raise MalformedResponse(f"output {self.output_name!r} has unusable datatype {dt!r}")
        if piece is not None:
            if len(piece) % NUMPY_DTYPES[dt].itemsize:
                raise MalformedResponse(f"binary output of {len(piece)} bytes is not a whole number of {dt}")
            arr = np.frombuffer(piece, dtype=NUMPY_DTYPES[dt])
        else:
            data = o.get("data")
            if not isinstance(data, list):
                raise MalformedResponse(f"output {self.output_name!r} has no data")
            values = _flat(data)
            if dt in INTEGER_DATATYPES and not all(type(v) is int for v in values):
                odd = next(v for v in values if type(v) is not int)
                raise MalformedResponse(
                    f"output {self.output_name!r} is {dt} but holds {odd!r} ({type(odd).__name__}); labels must be "
                    "JSON integers", transient=False,
                )
            if dt in FLOAT_DATATYPES and not all(type(v) in (int, float) for v in values):
                odd = next(v for v in values if type(v) not in (int, float))
                raise MalformedResponse(
                    f"output {self.output_name!r} is {dt} but holds {printable(repr(odd), max_chars=40)} "
                    f"({type(odd).__name__}); scores must be JSON numbers", transient=False,
                )
            try:
                arr = np.asarray(values, dtype=np.float64 if dt in FLOAT_DATATYPES else np.int64)
            except (TypeError, ValueError, OverflowError) as exc:
                raise MalformedResponse(f"output {self.output_name!r} data is not usable: {exc}", transient=False) from None
        if shape and int(np.prod(shape)) != arr.size:
            raise MalformedResponse(f"output shape {shape} does not match its {arr.size} values")
        if dt in FLOAT_DATATYPES:
            k = meta.num_classes
            if arr.size != n * k:
                raise MalformedResponse(f"score output has {arr.size} values for {n} queries x {k} classes")
            scores = arr.reshape(n, k)
            if not np.all(np.isfinite(scores)):
                raise MalformedResponse("score output contains NaN or inf")
            return validate_labels(scores.argmax(axis=1), n, k, meta.name)
        return validate_labels(arr.astype(np.int64), n, meta.num_classes, meta.name)

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"OIPTeacher({self.address!r}, wire={self.wire!r}, token={'***' if self.http.has_token else None})"


@dataclass(frozen=True)
class _Classes:
    """The classes :meth:`OIPTeacher._classes` settled on, passed on to the later metadata checks."""

    num_classes: int | float  # as given or published (a user's 4.0 stays 4.0 until TeacherMetadata)
    names: tuple[str, ...] | None
    scores: bool  # the output is a float (scores/logits) tensor


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
        raise ValueError(f"no model name in teacher URL {url!r}; use {root}/<model> or pass model=")
    return root + ("/" + "/".join(prefix) if prefix else ""), model, version


def _model_url(base_url: str, model: str, version: str | None) -> str:
    return f"{base_url.rstrip('/')}/v2/models/{quote(model, safe='')}" + (
        f"/versions/{quote(str(version), safe='')}" if version else ""
    )


def oip_model_url(url: str) -> str:
    """The model endpoint an OIP teacher address names (what its identity is made of)."""
    return _model_url(*parse_oip_url(url))


class _FactConflict(ValueError):
    """A fact the user supplied contradicts what the server publishes (bad input, not a teacher fault)."""


def _check_facts(
    num_classes: int | None,
    class_names: Sequence[str] | None,
    value_range: Sequence[float] | None,
    input_shape: Sequence[int] | None,
    max_batch_size: int | None,
) -> None:
    """ValueError naming the fact for any supplied model fact that cannot be right."""
    if num_classes is not None and (isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 2):
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if class_names is not None and (len(class_names) < 2 or len(set(class_names)) != len(class_names)):
        raise ValueError("class_names must hold at least 2 distinct names")
    if value_range is not None:
        if len(value_range) != 2 or not all(math.isfinite(float(v)) for v in value_range) or not value_range[0] < value_range[1]:
            raise ValueError(f"value_range must be (low, high) with low < high, got {tuple(value_range)!r}")
    if input_shape is not None and (len(input_shape) < 1 or any(int(v) < 1 for v in input_shape)):
        raise ValueError(f"input_shape must be positive sizes, e.g. (1, 28, 28), got {tuple(input_shape)!r}")
    if max_batch_size is not None and max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")


def _pick(items: list[Any], name: str | None, kind: str, where: str) -> dict[str, Any]:
    if name is not None:
        for it in items:
            if isinstance(it, dict) and it.get("name") == name:
                return it
        names = [i.get("name") if isinstance(i, dict) else i for i in items]
        raise TeacherError(f"model at {where} has no {kind} named {name!r} (has {str(names)[:200]})")
    if not isinstance(items[0], dict) or "name" not in items[0]:
        raise TeacherError(f"model metadata at {where}: malformed {kind} entry {str(items[0])[:100]}")
    return items[0]


def _flat(data: Any) -> list[Any]:
    if isinstance(data, list) and data and isinstance(data[0], list):
        return [x for row in data for x in _flat(row)]
    return data if isinstance(data, list) else []


def _bytes_elements(raw: bytes) -> list[str]:
    """Decode the binary BYTES layout: each element is a 4-byte little-endian length + bytes."""
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            raise MalformedResponse("truncated BYTES element length")
        (ln,) = struct.unpack_from("<I", raw, i)
        i += 4
        if i + ln > len(raw):
            raise MalformedResponse("truncated BYTES element")
        out.append(raw[i : i + ln].decode("utf-8", "replace"))
        i += ln
    return out


def _class_indices(strings: list[str]) -> list[int]:
    """Triton classification strings ``"score:index[:label]"`` -> indices."""
    out = []
    for s in strings:
        parts = s.split(":")
        try:
            float(parts[0])
            out.append(int(parts[1]))
        except (ValueError, IndexError, OverflowError):
            raise MalformedResponse(f"classification entry {s!r} is not 'score:index[:label]'") from None
    return out


def _billed(resp: requests.Response, header: dict[str, Any]) -> int | None:
    h = resp.headers.get("X-Billed-Images")
    p = (header.get("parameters") or {}).get("billed_images")
    try:
        if h is not None:
            return int(h)
        if p is not None:
            return int(p)
    except (TypeError, ValueError):
        raise MalformedResponse(f"unreadable billed units {h if h is not None else p!r}") from None
    return None
