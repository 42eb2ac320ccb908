"""Hugging Face image-classification inference API adapter (``hf://org/model``).

Each query is sent as one PNG (quantised to 8 bits over ``value_range``) in the
body of ``POST {endpoint}/{org}/{model}``; the answer is ``[{"label": ..., "score":
...}, ...]`` and the best-scoring label is mapped to an index through the model's
``id2label`` (fetched from ``{hub_url}/{model}/resolve/main/config.json`` unless
given) or a ``class_names`` list you pass. A 503 ``{"error": "... is currently
loading", "estimated_time": s}`` is waited out (``estimated_time`` is honoured as
the retry wait, within the retry policy's ``max_total``).

``endpoint`` defaults to :data:`DEFAULT_ENDPOINT` (the public serverless API) or
the ``LDPCLIENT_HF_ENDPOINT`` environment variable; point it at a dedicated
Inference Endpoint or a local server. Token: ``token=`` or ``HF_TOKEN``.
The API resizes images itself, but pass ``input_shape`` = the shape your queries
have (C, H, W), so the pipeline knows what to produce.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import requests
import torch

from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .encoding import to_png, to_wire
from .errors import MalformedResponse, TeacherError
from .http import HttpTransport, TransportOptions, transport_from_options
from .identity import adapter_scope
from .registry import register_adapter
from .result import InferResult, best_of_scores, label_to_index, validate_labels

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEFAULT_ENDPOINT = "https://router.huggingface.co/hf-inference/models"
DEFAULT_HUB = "https://huggingface.co"


class HFTeacher(Teacher):
    """A Hugging Face image classifier behind the inference API.

    ``transport``: the :class:`~ldpclient.teachers.http.HttpTransport` carrying the
    connection options (auth, timeouts, retries, TLS, size and time limits), used for
    the hub's ``config.json`` too; without one, its options may be given here as
    keywords (``token=``, ``timeout=``, ...), the token then defaulting to ``HF_TOKEN``.
    A transport you build reads its own ``token_env`` (``HttpTransport(token_env="HF_TOKEN")``).
    """

    def __init__(
        self,
        model_id: str,
        *,
        input_shape: Sequence[int] | None = None,
        class_names: Sequence[str] | None = None,
        id2label: Mapping[int | str, str] | None = None,
        endpoint: str | None = None,
        hub_url: str = DEFAULT_HUB,
        value_range: tuple[float, float] = (0.0, 1.0),
        transport: HttpTransport | None = None,
        **transport_options: Unpack[TransportOptions],
    ) -> None:
        model_id = model_id.strip("/")
        # first, so that an unknown keyword is a TypeError whatever else is wrong
        self.http = transport_from_options(
            transport, transport_options, adapter="HFTeacher", name=f"hf:{model_id}", token_env="HF_TOKEN"
        )
        if not model_id or model_id.count("/") > 1:
            raise ValueError(f"Hugging Face model ids look like org/model, got {model_id!r}")
        if not input_shape:
            raise ValueError(
                "hf teacher needs input_shape=(C, H, W): the shape your queries have (the API resizes images itself)"
            )
        self.model_id = model_id
        self.endpoint = (endpoint or os.environ.get("LDPCLIENT_HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.hub_url = hub_url.rstrip("/")
        self.url = f"{self.endpoint}/{model_id}"
        self.http.refuse_clear_token(self.url)
        self._input_shape = tuple(int(s) for s in input_shape)
        self._value_range = (float(value_range[0]), float(value_range[1]))
        self._class_names = tuple(str(c) for c in class_names) if class_names is not None else None
        self._id2label = dict(id2label) if id2label is not None else None
        self._meta: TeacherMetadata | None = None
        self._names: dict[str, int] | None = None
        self._lock = threading.Lock()
        self.journal_scope = adapter_scope("hf", self.url)

    def _labels(self) -> tuple[str, ...]:
        if self._class_names is not None:
            return self._class_names
        id2label = self._id2label
        if id2label is None:
            cfg = self.http.get_json(
                f"{self.hub_url}/{self.model_id}/resolve/main/config.json", what=f"config of {self.model_id}"
            )
            id2label = cfg.get("id2label") if isinstance(cfg, dict) else None
            if not id2label:
                raise TeacherError(f"model {self.model_id} publishes no id2label; pass class_names=")
        try:
            pairs = sorted((int(k), str(v)) for k, v in id2label.items())
        except (TypeError, ValueError):
            raise TeacherError(f"id2label of {self.model_id} has non-integer keys") from None
        if [k for k, _ in pairs] != list(range(len(pairs))):
            raise TeacherError(f"id2label of {self.model_id} is not indexed 0..{len(pairs) - 1}")
        return tuple(v for _, v in pairs)

    def metadata(self) -> TeacherMetadata:
        with self._lock:
            if self._meta is None:
                names = self._labels()
                self._names = {n: i for i, n in enumerate(names)}
                self._meta = TeacherMetadata(
                    name=self.model_id, input_shape=self._input_shape, datatype="UINT8",
                    num_classes=len(names), class_names=names, max_batch_size=None, value_range=self._value_range,
                )
            return self._meta

    def requests_for(self, n: int) -> int:
        return n

    def classify(self, queries: Queries) -> torch.Tensor:
        """Hard labels int64 ``(Q,)`` for Release/Derived queries (raw tensors: TypeError)."""
        return self.infer(queries).labels

    def _parse(self, resp: requests.Response) -> tuple[int, int | None]:
        m = self._meta
        assert m is not None
        try:
            doc = resp.json()
        except ValueError:
            raise MalformedResponse(f"response is not JSON: {resp.text[:80]!r}") from None
        if isinstance(doc, list) and len(doc) == 1 and isinstance(doc[0], list):
            doc = doc[0]
        if not isinstance(doc, list) or not doc:
            raise MalformedResponse(f"expected [{{label, score}}, ...], got {str(doc)[:100]}")
        label = best_of_scores(doc, m.name)
        billed = resp.headers.get("X-Billed-Images")
        return label_to_index(label, self._names, m.num_classes, m.name), int(billed) if billed is not None else None

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        m = self.metadata()
        wire = to_wire(queries, m)
        res = InferResult(labels=torch.zeros(0, dtype=torch.int64), requests=0, billed=0, attempts=0)
        labels = []
        for row in wire:
            (idx, billed), info = self.http.call(
                "POST", self.url, data=to_png(row, m.datatype, m.value_range),
                headers={"Content-Type": "image/png"}, parse=self._parse, what=f"classify with {self.model_id}",
                units=1, billing=billing, retry_hint=estimated_time,
            )
            labels.append(idx)
            res.count_call(info)
            if info.billed_header is not None:
                billed = info.billed_header
            res.billed = None if (res.billed is None or billed is None) else res.billed + billed
        res.labels = validate_labels(np.asarray(labels, dtype=np.int64), wire.shape[0], m.num_classes, m.name)
        return res

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return (
            f"HFTeacher({self.model_id!r}, endpoint={self.endpoint!r}, token={'***' if self.http.has_token else None})"
        )


def estimated_time(resp: requests.Response) -> float | None:
    """The wait Hugging Face asks for while a model loads: ``{"error": "... is currently loading",
    "estimated_time": s}`` (seconds), else None (the transport's ``retry_hint``)."""
    try:
        body = resp.json()
    except (ValueError, RecursionError):
        return None
    if isinstance(body, dict) and isinstance(body.get("estimated_time"), (int, float)):
        return max(0.0, float(body["estimated_time"]))
    return None


@register_adapter("hf", takes=HFTeacher)
def connect_hf(target: str, **opts: Any) -> HFTeacher:
    """``hf://org/model`` (see :class:`HFTeacher`)."""
    return HFTeacher(target, **opts)
