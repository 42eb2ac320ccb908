"""How to write and register a third-party teacher adapter for ldpclient.

A teacher adapter subclasses ``ldpclient.teachers.Teacher`` and implements two
methods:

* ``metadata() -> TeacherMetadata``: input shape (C, H, W), wire datatype
  ("FP32" or "UINT8"), number of classes, optional class names, max batch size,
  and the value range the model's inputs are in;
* ``classify(queries) -> torch.LongTensor``: one hard label per query row.

Everything an HTTP adapter needs is public in ``ldpclient.teachers.http``:

* encoding: ``queries`` is always a ``Release`` or ``Derived`` (LDP output). Start with
  ``to_wire(queries, metadata)``: it rejects raw tensors (TypeError), checks the
  shape, and quantises into the datatype (post-processing, no privacy cost);
* transport: take ``transport: HttpTransport | None`` and let
  ``transport_from_options`` build one from keyword options when none is given, so
  that your adapter does not re-declare the connection options (token, timeouts,
  retries with backoff and Retry-After, TLS verification, size and time limits; a
  token never shows up in logs or errors). ``transport.call(...)`` sends a request;
* result validation: your ``parse`` raises ``MalformedResponse`` for an unusable
  answer, and ``validate_labels`` checks one label per query in range.

Optional hooks, each with a default in ``Teacher``:
``infer(queries, *, request_id=None) -> InferResult`` (request count, bytes,
billed units: the QueryClient uses them for the cost meter and reconciliation;
default: ``classify`` counted as one request), ``requests_for(n)`` (HTTP requests
n queries need: the cost meter prices per-request fees before sending; default 1),
``journal_scope`` (journal key; default ``metadata().name``) and ``close()``
(default: nothing). An object with ``metadata()`` and ``classify()`` that does not
subclass ``Teacher`` is still accepted (``ldpclient.teachers.as_teacher`` wraps it).

Registering: expose a factory ``connect(target: str, **opts) -> Teacher`` (``opts``
may hold ``token=``, ``transport=`` and your adapter's own options) and declare it in your package's
``pyproject.toml``::

    [project.entry-points."ldpclient.teachers"]
    acme = "acme_ldp.teacher:connect"

After ``pip install`` of your package, ``ldpclient.teachers.connect("acme+https://api.acme.example/v1/digits")``
(or ``"acme:digits"``) finds it: the text after ``acme+`` (or ``acme:``) is
passed as ``target``. ``ldpclient.teachers.available_adapters()`` lists what is
installed.

This file's adapter talks to a made-up "ACME vision" JSON API:
``POST {base}/classify`` with ``{"images": [[...uint8 row-major...], ...],
"shape": [C, H, W]}`` answering ``{"predictions": [{"class_id": 3}, ...]}``.
Run it (no network needed; it serves the ACME API itself on 127.0.0.1)::

    .venv/bin/python examples/custom_teacher.py
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import requests
import torch

from ldpclient.teachers import InferResult, QueryClient, Teacher, TeacherMetadata
from ldpclient.teachers.http import (
    BillingGuard,
    HttpTransport,
    MalformedResponse,
    to_wire,
    transport_from_options,
    validate_labels,
)


class AcmeTeacher(Teacher):
    """Adapter for the ACME vision API (28x28 greyscale digits, 10 classes, bytes in).

    ``transport``: the connection (``HttpTransport(token=..., timeout=..., retry=...)``);
    without one, the same options as keywords (the token then defaults to ``ACME_TOKEN``).
    """

    def __init__(self, base_url: str, *, transport: HttpTransport | None = None, **transport_options: Any):
        self.base_url = base_url.rstrip("/")
        # no token given -> read from ACME_TOKEN; it is only ever placed in the header, and never
        # sent over plain http:// to another host (url=: refused here, before anything is sent)
        self.http = transport_from_options(
            transport, transport_options, adapter="AcmeTeacher", name="acme", url=self.base_url,
            token_env="ACME_TOKEN",
        )
        self.journal_scope = f"acme:{self.base_url}"  # journal key: which teacher answered
        self._meta = TeacherMetadata(
            name="acme-digits", input_shape=(1, 28, 28), datatype="UINT8", num_classes=10,
            class_names=tuple(str(i) for i in range(10)), max_batch_size=64, value_range=(0.0, 1.0),
        )

    def metadata(self) -> TeacherMetadata:
        return self._meta

    def requests_for(self, n: int) -> int:
        return -(-n // self._meta.max_batch_size)

    def classify(self, queries) -> torch.Tensor:
        return self.infer(queries).labels

    def infer(self, queries, *, request_id: str | None = None, billing: BillingGuard | None = None) -> InferResult:
        wire = to_wire(queries, self._meta)  # TypeError for raw tensors; uint8 0..255
        out = InferResult(labels=torch.zeros(0, dtype=torch.int64), requests=0, billed=None, attempts=0)
        parts = []
        step = self._meta.max_batch_size
        for start in range(0, wire.shape[0], step):
            chunk = wire[start : start + step]
            body = json.dumps(
                {"shape": list(chunk.shape[1:]), "images": chunk.reshape(len(chunk), -1).tolist()}
            ).encode()

            def parse(resp: requests.Response, k: int = len(chunk)) -> torch.Tensor:
                try:
                    preds = resp.json()["predictions"]
                    ids = [int(p["class_id"]) for p in preds]
                except (ValueError, KeyError, TypeError):
                    raise MalformedResponse("ACME answer is not {'predictions': [...]}: "
                                            f"{resp.text[:80]!r}") from None
                return validate_labels(np.asarray(ids), k, self._meta.num_classes, self._meta.name)

            labels, info = self.http.call(
                "POST", f"{self.base_url}/classify", data=body, headers={"Content-Type": "application/json"},
                parse=parse, what="ACME classify",
                units=len(chunk), billing=billing,  # every attempt of this billable request is counted
            )
            parts.append(labels)
            out.count_call(info)  # requests, attempts, bytes, and the waits for a busy server
        out.labels = torch.cat(parts) if parts else out.labels
        return out


def connect(target: str, **opts: Any) -> AcmeTeacher:
    """Entry-point factory: ``acme+https://host/path`` -> ``target = "https://host/path"``."""
    if not target.startswith(("http://", "https://")):
        raise ValueError(f"acme teachers are addressed as acme+https://host/path, got {target!r}")
    return AcmeTeacher(target, **opts)


# --- a tiny stand-in ACME server so the example runs offline --------------------------------
class _AcmeHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        means = [np.mean(img) / 255 for img in doc["images"]]
        body = json.dumps({"predictions": [{"class_id": min(9, int(m * 10))} for m in means]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    from ldpclient.privacy import laplace

    server = ThreadingHTTPServer(("127.0.0.1", 0), _AcmeHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # Installed as a plugin this would be ldpclient.teachers.connect("acme+http://127.0.0.1:PORT").
        # The connection options live in one HttpTransport (keywords such as timeout= work too).
        transport = HttpTransport(token_env="ACME_TOKEN", timeout=(2.0, 10.0))
        teacher = connect(f"http://127.0.0.1:{server.server_address[1]}", transport=transport)
        vals = torch.linspace(0, 1, 100).view(100, 1, 1, 1).expand(100, 1, 28, 28).contiguous()
        # releases only ever come from a mechanism; these ramp images are made up, hence public=True
        release = laplace(50.0, per="element").release(vals, public=True)
        client = QueryClient(teacher, workers=2)
        labels = client.label(release, prefix="acme-demo")
        print("labels:", labels.tolist()[:12], "...", f"({client.stats.requests} requests)")
        try:
            teacher.classify(vals)
        except TypeError as exc:
            print("raw tensor refused:", exc)
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
