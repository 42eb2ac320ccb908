"""Google Cloud Vision LABEL_DETECTION adapter (``vision+https://vision.googleapis.com/v1``).

Up to :data:`MAX_IMAGES` queries go in one ``POST {base}/images:annotate`` request, each a PNG of the query at its
own size. Cloud Vision answers free-form labels (``{"mid": "/m/0bt9lr", "description": "Dog", "score": 0.97}``);
a label map turns them into the task's classes (:func:`read_label_map`): per class, Knowledge Graph ``mid``s, and
description synonyms as a fallback. The highest-scoring label that maps to a class names the query's class; an
answer where no label maps, or an image's own ``error`` inside the batch answer (a content-policy rejection, bad
image data), is that query's abstention (:data:`~ldpclient.teachers.result.ABSTAINED`), never the batch's failure.

Money: Cloud Vision bills per image (``--price``, e.g. 0.0015); its answer reports no bill, so every image sent is
counted as paid, an image answered with an error included. Key: ``token=`` (sent as ``X-Goog-Api-Key``), else
``LDPCLIENT_TOKEN``, else ``GOOGLE_API_KEY``; ``auth="bearer"`` sends an OAuth access token as
``Authorization: Bearer`` instead.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import requests
import torch

from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .encoding import to_png, to_wire
from .errors import MalformedResponse
from .http import HttpTransport, TransportOptions, transport_from_options
from .identity import adapter_scope
from .registry import register_adapter
from .result import ABSTAINED, InferResult, name_key

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Most images one ``images:annotate`` request may carry (the API's limit).
MAX_IMAGES = 16
#: Labels asked for per image.
MAX_RESULTS = 10


def read_label_map(source: str | os.PathLike[str] | Mapping[str, Sequence[str]], class_names: Sequence[str]
                   ) -> tuple[dict[str, int], dict[str, int]]:
    """``(mid -> class, description -> class)`` from a label map: a JSON object (or a file of one) of class
    name -> list of Knowledge Graph ``mid``s (``"/m/..."``, ``"/g/..."``) and description synonyms. Every key must
    be one of ``class_names``; a mid or a synonym may name one class only. ValueError otherwise."""
    if isinstance(source, Mapping):
        doc: object = source
        where = "label map"
    else:
        where = f"label map {str(source)!r}"
        try:
            doc = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{where}: not a readable JSON object ({exc})") from None
    if not isinstance(doc, Mapping) or not doc:
        raise ValueError(f"{where}: must be a JSON object of class name -> list of mids and descriptions")
    index = {str(n): k for k, n in enumerate(class_names)}
    mids: dict[str, int] = {}
    words: dict[str, int] = {}
    for name, entries in doc.items():
        if str(name) not in index:
            raise ValueError(f"{where}: {str(name)[:60]!r} is not one of the class names")
        if isinstance(entries, str) or not isinstance(entries, Sequence) or not entries:
            raise ValueError(f"{where}: class {str(name)[:60]!r} needs a non-empty list of mids and descriptions")
        for entry in entries:
            text = str(entry).strip()
            table, key = (mids, text) if text.startswith(("/m/", "/g/")) else (words, name_key(text))
            if table.get(key, index[str(name)]) != index[str(name)]:
                raise ValueError(f"{where}: {text[:60]!r} is listed under two classes")
            table[key] = index[str(name)]
    return mids, words


class VisionTeacher(Teacher):
    """Cloud Vision's label detection as a teacher of ``class_names``, through a label map (see the module doc).

    ``base_url``: ``https://vision.googleapis.com/v1`` or a server speaking the same API. ``label_map``: a path
    or a mapping (:func:`read_label_map`). ``input_shape``: the queries' ``(C, H, W)``. ``auth``: ``"api-key"``
    or ``"bearer"``. Connection options as in :class:`~ldpclient.teachers.huggingface.HFTeacher`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        class_names: Sequence[str] | None = None,
        label_map: str | os.PathLike[str] | Mapping[str, Sequence[str]] | None = None,
        input_shape: Sequence[int] | None = None,
        value_range: tuple[float, float] = (0.0, 1.0),
        auth: str = "api-key",
        transport: HttpTransport | None = None,
        **transport_options: Unpack[TransportOptions],
    ) -> None:
        if auth not in ("api-key", "bearer"):
            raise ValueError(f"auth must be 'api-key' or 'bearer', got {auth!r}")
        defaults: TransportOptions = {"token_env": ("LDPCLIENT_TOKEN", "GOOGLE_API_KEY")}
        if auth == "api-key" and transport is None:
            defaults.update({"auth_header": "X-Goog-Api-Key", "auth_scheme": ""})
        self.http = transport_from_options(transport, transport_options, adapter="VisionTeacher", name="vision",
                                           url=base_url, **defaults)
        base = base_url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"Cloud Vision is addressed vision+https://vision.googleapis.com/v1, got {base_url!r}")
        if not class_names or len(class_names) < 2:
            raise ValueError("a vision teacher needs the task's classes: --class-names FILE (API: class_names=)")
        if label_map is None:
            raise ValueError("a vision teacher needs a label map of class -> mids and descriptions: --label-map FILE "
                             "(API: label_map=)")
        if not input_shape:
            raise ValueError("a vision teacher needs the queries' shape: --input-shape C,H,W (API: input_shape=)")
        names = tuple(str(c) for c in class_names)
        self._mids, self._words = read_label_map(label_map, names)
        self.url = f"{base}/images:annotate"
        self._meta = TeacherMetadata(
            name="cloud-vision", input_shape=tuple(int(s) for s in input_shape), datatype="UINT8",
            num_classes=len(names), class_names=names, max_batch_size=MAX_IMAGES,
            value_range=(float(value_range[0]), float(value_range[1])), abstains=True,
        )
        self.journal_scope = adapter_scope("vision", self.url)

    def metadata(self) -> TeacherMetadata:
        return self._meta

    def requests_for(self, n: int) -> int:
        return -(-n // MAX_IMAGES)

    def classify(self, queries: Queries) -> torch.Tensor:
        """Labels int64 ``(Q,)``; :data:`~ldpclient.teachers.result.ABSTAINED` where no label maps to a class."""
        return self.infer(queries).labels

    def answer_of(self, response: object) -> tuple[int, str | None]:
        """One image's entry in an ``images:annotate`` answer: its class, or ABSTAINED and why (a key of
        :data:`ldpclient.names.DECLINE_KINDS`: the image's own error entry, or no label that maps)."""
        if not isinstance(response, dict) or "error" in response:
            return ABSTAINED, "image_error"
        k = self.class_of(response.get("labelAnnotations"))
        return (k, None) if k != ABSTAINED else (ABSTAINED, "unmapped")

    def class_of(self, annotations: object) -> int:
        """The class of the highest-scoring label that maps to one (by mid, else by description), else ABSTAINED."""
        best, best_score = ABSTAINED, float("-inf")
        for a in annotations if isinstance(annotations, list) else []:
            if not isinstance(a, dict):
                continue
            k = self._mids.get(str(a.get("mid", "")))
            if k is None:
                k = self._words.get(name_key(str(a.get("description", ""))))
            score = a.get("score")
            if k is not None and isinstance(score, (int, float)) and score > best_score:
                best, best_score = k, float(score)
        return best

    def _parse(self, n: int) -> Callable[[requests.Response], list[tuple[int, str | None]]]:
        def parse(resp: requests.Response) -> list[tuple[int, str | None]]:
            try:
                doc = resp.json()
            except ValueError:
                raise MalformedResponse(f"response is not JSON: {resp.text[:80]!r}", transient=False) from None
            answers = doc.get("responses") if isinstance(doc, dict) else None
            if not isinstance(answers, list) or len(answers) != n:
                got = len(answers) if isinstance(answers, list) else "no"
                # not asked again: the images were sent (and may be billed) and no answer says which is which
                raise MalformedResponse(f"expected {n} responses, one per image sent, got {got}", transient=False)
            return [self.answer_of(a) for a in answers]

        return parse

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        m = self._meta
        wire = to_wire(queries, m)
        res = InferResult(labels=torch.zeros(0, dtype=torch.int64), requests=0, billed=None, attempts=0)
        labels: list[int] = []
        for start in range(0, len(wire), MAX_IMAGES):
            rows = wire[start:start + MAX_IMAGES]
            body = {"requests": [
                {"image": {"content": base64.b64encode(to_png(r, m.datatype, m.value_range)).decode("ascii")},
                 "features": [{"type": "LABEL_DETECTION", "maxResults": MAX_RESULTS}]} for r in rows]}
            got, info = self.http.call(
                "POST", self.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                parse=self._parse(len(rows)), what="annotate with Cloud Vision", units=len(rows), billing=billing,
            )
            for label, why in got:
                labels.append(label)
                if why is not None:
                    res.decline(why)
            res.count_call(info)
        res.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        return res

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"VisionTeacher({self.url!r}, token={'***' if self.http.has_token else None})"


@register_adapter("vision", takes=VisionTeacher)
def connect_vision(target: str, **opts: Any) -> VisionTeacher:
    """``vision+https://vision.googleapis.com/v1`` (see :class:`VisionTeacher`)."""
    return VisionTeacher(target, **opts)
