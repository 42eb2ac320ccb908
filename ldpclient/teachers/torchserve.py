"""TorchServe predictions API adapter (``POST /predictions/{model}[/{version}]``).

Two request styles, chosen with ``mode``:

* ``"image"`` (default; works with TorchServe's stock ``image_classifier``
  handler): one HTTP request per query whose body is the query as a PNG
  (quantised to 8 bits over ``value_range``; 1 channel = greyscale, 3 = RGB). The
  stock handler answers ``{"label": score, ...}`` (top-k); the best-scoring label
  is mapped to an index through ``class_names`` (the handler's
  ``index_to_name.json``), or read as an index when it is a number.
* ``"tensor"``: one request per chunk of up to ``max_batch_size`` queries with a
  JSON body ``{"shape": [N, C, H, W], "datatype": "FP32", "data": [flat values]}``.
  This needs a custom handler whose ``preprocess`` reads that body and whose
  ``postprocess`` returns one entry per query: a class index, ``[index]`` or a
  ``{label: score}`` dict. (Returning a list of N items, as a TorchServe handler
  must, the response body is the JSON list.)

Health: ``GET /ping`` (``{"status": "Healthy"}``). TorchServe does not publish
input shapes or class counts over the inference API, so pass ``input_shape`` and
``num_classes`` (or ``class_names``). Billed units, when the deployment reports
them, are read from ``X-Billed-Images``.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar
from urllib.parse import quote, urlsplit

import numpy as np
import requests
import torch

from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .encoding import INPUT_DATATYPES, to_png, to_wire
from .errors import MalformedResponse, TeacherError
from .http import CallInfo, HttpTransport, TransportOptions, transport_from_options
from .identity import adapter_scope
from .registry import register_adapter
from .result import InferResult, best_of_scores, label_to_index, validate_labels

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")


class TorchServeTeacher(Teacher):
    """A model behind TorchServe's inference API (default port 8080).

    ``transport``: the :class:`~ldpclient.teachers.http.HttpTransport` carrying the
    connection options (auth, timeouts, retries, TLS, size and time limits); without
    one, its options may be given here as keywords (``token=``, ``timeout=``, ...).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        input_shape: Sequence[int],
        num_classes: int | None = None,
        class_names: Sequence[str] | None = None,
        version: str | None = None,
        mode: str = "image",
        datatype: str = "FP32",
        value_range: tuple[float, float] = (0.0, 1.0),
        max_batch_size: int | None = None,
        check_ready: bool = True,
        transport: HttpTransport | None = None,
        **transport_options: Unpack[TransportOptions],
    ) -> None:
        # first, so that an unknown keyword is a TypeError whatever else is wrong
        self.http = transport_from_options(
            transport, transport_options, adapter="TorchServeTeacher", name=f"torchserve:{model}", url=base_url
        )
        if mode not in ("image", "tensor"):
            raise ValueError(f"TorchServe mode must be 'image' or 'tensor', got {mode!r}")
        if num_classes is None and class_names is None:
            raise ValueError("TorchServe does not publish its classes: pass num_classes= or class_names=")
        if class_names is not None and num_classes is not None and len(class_names) != num_classes:
            raise ValueError(f"{len(class_names)} class_names for num_classes={num_classes}")
        if datatype not in INPUT_DATATYPES:
            raise ValueError(f"datatype must be one of {INPUT_DATATYPES}, got {datatype!r}")
        if not input_shape:
            raise ValueError("TorchServe teacher needs input_shape=(C, H, W)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.mode = mode
        self.check_ready = check_ready
        self.url = _predictions_url(self.base_url, model, version)
        names = tuple(str(c) for c in class_names) if class_names is not None else None
        self._names = {n: i for i, n in enumerate(names)} if names else None
        self._meta = TeacherMetadata(
            name=model,
            input_shape=tuple(int(s) for s in input_shape),
            datatype="UINT8" if mode == "image" else datatype,
            num_classes=int(num_classes if num_classes is not None else len(names)),  # type: ignore[arg-type]
            class_names=names,
            max_batch_size=int(max_batch_size) if (max_batch_size and mode == "tensor") else None,
            value_range=(float(value_range[0]), float(value_range[1])),
        )
        self.journal_scope = adapter_scope("torchserve", self.url)
        self._ready_checked = False
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **opts: Any) -> "TorchServeTeacher":
        """``http://host:8080/model[/version]`` or ``http://host:8080/predictions/model[/version]``."""
        base, model, version = _parse_url(url, opts.pop("model", None))
        if version is not None:
            opts.setdefault("version", version)
        return cls(base, model, **opts)

    def ping(self) -> bool:
        body = self.http.get_json(f"{self.base_url}/ping", what="TorchServe health check", allow_404=True)
        return body is None or not isinstance(body, dict) or body.get("status", "Healthy") == "Healthy"

    def metadata(self) -> TeacherMetadata:
        with self._lock:
            if self.check_ready and not self._ready_checked:
                if not self.ping():
                    raise TeacherError(f"TorchServe at {self.base_url} is not healthy")
                self._ready_checked = True
        return self._meta

    def requests_for(self, n: int) -> int:
        if self.mode == "image":
            return n
        mb = self._meta.max_batch_size
        return max(1, math.ceil(n / mb)) if mb else 1

    def classify(self, queries: Queries) -> torch.Tensor:
        """Hard labels int64 ``(Q,)`` for Release/Derived queries (raw tensors: TypeError)."""
        return self.infer(queries).labels

    def _post(
        self, body: bytes, content_type: str, parse: Callable[[requests.Response], T], what: str, units: int,
        billing: BillingGuard | None,
    ) -> tuple[T, CallInfo]:
        return self.http.call(
            "POST", self.url, data=body, headers={"Content-Type": content_type}, parse=parse, what=what, units=units,
            billing=billing,
        )

    def _parse_batch(self, r: requests.Response, k: int) -> tuple[list[int], int | None]:
        """The labels of a tensor-mode answer for ``k`` queries, and the billed header."""
        doc = _json(r)
        preds = doc if isinstance(doc, list) else [doc]
        if len(preds) != k:
            raise MalformedResponse(f"TorchServe returned {len(preds)} predictions for {k} queries")
        return [self._index(p) for p in preds], _billed(r)

    def _index(self, pred: object) -> int:
        m = self._meta
        if isinstance(pred, list) and len(pred) == 1 and not isinstance(pred[0], dict):
            pred = pred[0]
        if isinstance(pred, (dict, list)):
            pred = best_of_scores(pred, m.name)
        return label_to_index(pred, self._names, m.num_classes, m.name)

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        m = self.metadata()
        wire = to_wire(queries, m)
        n = wire.shape[0]
        res = InferResult(labels=torch.zeros(0, dtype=torch.int64), requests=0, billed=0, attempts=0)
        labels: list[int] = []

        def add(info: CallInfo, billed: int | None) -> None:
            res.count_call(info)
            if info.billed_header is not None:
                billed = info.billed_header
            res.billed = None if (res.billed is None or billed is None) else res.billed + billed

        if self.mode == "image":
            for row in wire:
                (idx, billed), info = self._post(
                    to_png(row, m.datatype, m.value_range), "image/png",
                    lambda r: (self._index(_json(r)), _billed(r)), f"predict {self.model!r}", 1, billing,
                )
                labels.append(idx)
                add(info, billed)
        else:
            step = m.max_batch_size or max(n, 1)
            for start in range(0, n, step):
                chunk = wire[start : start + step]
                body = json.dumps(
                    {"shape": list(chunk.shape), "datatype": m.datatype, "data": chunk.reshape(-1).tolist()}
                ).encode()
                k = chunk.shape[0]

                (indices, billed_chunk), info = self._post(
                    body, "application/json", functools.partial(self._parse_batch, k=k), f"predict {self.model!r}", k,
                    billing,
                )
                labels.extend(indices)
                add(info, billed_chunk)
        res.labels = validate_labels(np.asarray(labels, dtype=np.int64), n, m.num_classes, m.name)
        return res

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"TorchServeTeacher({self.url!r}, mode={self.mode!r}, token={'***' if self.http.has_token else None})"


def _json(resp: requests.Response) -> object:
    try:
        return resp.json()
    except ValueError:
        raise MalformedResponse(f"response is not JSON: {resp.text[:80]!r}") from None


def _billed(resp: requests.Response) -> int | None:
    h = resp.headers.get("X-Billed-Images")
    if h is None:
        return None
    try:
        return int(h)
    except ValueError:
        raise MalformedResponse(f"unreadable X-Billed-Images {h!r}") from None


def _parse_url(url: str, model: str | None = None) -> tuple[str, str, str | None]:
    """``(base URL, model, version)`` of a TorchServe address (see :meth:`TorchServeTeacher.from_url`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"TorchServe URL must be torchserve+http(s)://host:port/model, got {url!r}")
    path = [p for p in parts.path.split("/") if p]
    if path and path[0] == "predictions":
        path = path[1:]
    if not path and not model:
        raise ValueError(f"no model name in TorchServe URL {url!r}")
    return f"{parts.scheme}://{parts.netloc}", model or path[0], path[1] if len(path) > 1 else None


def _predictions_url(base_url: str, model: str, version: str | None) -> str:
    return f"{base_url.rstrip('/')}/predictions/{quote(model, safe='')}" + (
        f"/{quote(version, safe='')}" if version else ""
    )


def torchserve_url(url: str) -> str:
    """The predictions endpoint a TorchServe address names (what its identity is made of)."""
    return _predictions_url(*_parse_url(url))


@register_adapter("torchserve", identity=torchserve_url, takes=TorchServeTeacher)
def connect_torchserve(target: str, **opts: Any) -> TorchServeTeacher:
    """``torchserve+http(s)://host:8080/model`` (see :meth:`TorchServeTeacher.from_url`)."""
    return TorchServeTeacher.from_url(target, **opts)
