"""TorchServe and Hugging Face adapters against `responses` mocks (no network)."""

import io
import json
import logging

import numpy as np
import pytest
import responses
import torch
from PIL import Image

from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.teachers import MalformedResponse, RetriesExhausted, TeacherRequestError, connect
from ldpclient.teachers.http import RetryPolicy
from ldpclient.teachers.huggingface import DEFAULT_ENDPOINT, HFTeacher
from ldpclient.teachers.torchserve import TorchServeTeacher

TS = "https://ts.test:8080"
HF_EP = "https://hf.test/models"
HUB = "https://hub.test"
TOKEN = "hf_SECRETtoken0123456789"


def make_release(values):
    n_el = int(np.prod(values.shape[1:]))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, tuple(values.shape[1:]), _token=_RELEASE_TOKEN)


class Recorder:
    def __init__(self):
        self.waits = []

    def __call__(self, s):
        self.waits.append(s)


def fast(**kw):
    kw.setdefault("sleep", Recorder())
    return RetryPolicy(initial_wait=0.001, max_wait=0.002, jitter=0.0, **kw)


def levels(n):
    """Queries whose label is encoded as the grey level: i/9."""
    return make_release(torch.arange(n).float().div(9).view(n, 1, 1, 1).expand(n, 1, 6, 5).contiguous())


def png_level(body):
    img = Image.open(io.BytesIO(body))
    arr = np.asarray(img)
    assert img.mode == "L" and arr.shape == (6, 5)
    return int(round(arr.mean() / 255 * 9))


NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@responses.activate
def test_torchserve_image_mode_with_stock_handler_dicts():
    responses.add(responses.GET, f"{TS}/ping", json={"status": "Healthy"})

    def cb(req):
        k = png_level(req.body)
        assert req.headers["Content-Type"] == "image/png"
        return 200, {}, json.dumps({NAMES[k]: 0.7, NAMES[(k + 1) % 10]: 0.2})

    responses.add_callback(responses.POST, f"{TS}/predictions/digits", callback=cb)
    t = connect(f"torchserve+{TS}/digits", class_names=NAMES, input_shape=(1, 6, 5), retry=fast())
    res = t.infer(levels(4))
    assert res.labels.tolist() == [0, 1, 2, 3] and res.requests == 4 and res.billed is None
    assert t.requests_for(4) == 4 and t.metadata().datatype == "UINT8"


@responses.activate
def test_torchserve_tensor_mode_and_index_lists():
    def cb(req):
        doc = json.loads(req.body)
        assert doc["datatype"] == "FP32" and doc["shape"][1:] == [1, 6, 5]
        vals = np.asarray(doc["data"]).reshape(doc["shape"])
        out = [[int(round(v * 9))] for v in vals[:, 0, 0, 0]]
        return 200, {"X-Billed-Images": str(len(out))}, json.dumps(out)

    responses.add(responses.GET, f"{TS}/ping", json={"status": "Healthy"})
    responses.add_callback(responses.POST, f"{TS}/predictions/digits/2.0", callback=cb)
    t = TorchServeTeacher.from_url(f"{TS}/predictions/digits/2.0", mode="tensor", num_classes=10,
                                   input_shape=(1, 6, 5), max_batch_size=3, retry=fast())
    res = t.infer(levels(7))
    assert res.labels.tolist() == list(range(7)) and res.requests == 3 and res.billed == 7


@responses.activate
def test_torchserve_bad_answers():
    responses.add(responses.GET, f"{TS}/ping", json={"status": "Healthy"})
    responses.add(responses.POST, f"{TS}/predictions/digits", json={"tabby cat": 0.9})
    t = TorchServeTeacher(TS, "digits", num_classes=10, input_shape=(1, 6, 5), retry=fast())
    with pytest.raises(MalformedResponse, match="unknown label 'tabby cat'.*class_names"):
        t.classify(levels(1))
    responses.replace(responses.POST, f"{TS}/predictions/digits", json={"error": "handler crashed"}, status=507)
    with pytest.raises(RetriesExhausted, match="handler crashed"):
        t.classify(levels(1))
    with pytest.raises(ValueError, match="num_classes= or class_names="):
        TorchServeTeacher(TS, "digits", input_shape=(1, 6, 5))


def hf_reply(req):
    k = png_level(req.body)
    return 200, {}, json.dumps([{"label": NAMES[(k + 1) % 10], "score": 0.1}, {"label": NAMES[k], "score": 0.8}])


@responses.activate
def test_hf_adapter_id2label_from_hub_and_loading_wait(caplog):
    caplog.set_level(logging.DEBUG)
    cfg = {"id2label": {str(i): n for i, n in enumerate(NAMES)}}
    responses.add(responses.GET, f"{HUB}/acme/digits-vit/resolve/main/config.json", json=cfg)
    url = f"{HF_EP}/acme/digits-vit"
    responses.add(responses.POST, url, json={"error": "Model acme/digits-vit is currently "
                                                      "loading", "estimated_time": 12.5}, status=503)
    responses.add_callback(responses.POST, url, callback=hf_reply)
    sleep = Recorder()
    t = connect("hf://acme/digits-vit", endpoint=HF_EP, hub_url=HUB, token=TOKEN, input_shape=(1, 6, 5),
                retry=fast(sleep=sleep))
    assert isinstance(t, HFTeacher) and t.metadata().class_names == tuple(NAMES)
    res = t.infer(levels(3))
    assert res.labels.tolist() == [0, 1, 2] and res.requests == 3 and res.attempts == 4
    assert sleep.waits == [12.5]
    posts = [c for c in responses.calls if c.request.method == "POST"]
    assert all(c.request.headers["Authorization"] == f"Bearer {TOKEN}" for c in posts)
    assert TOKEN not in caplog.text and TOKEN not in repr(t)


@responses.activate
def test_hf_user_class_list_env_token_and_errors(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    url = f"{HF_EP}/acme/digits-vit"
    responses.add_callback(responses.POST, url, callback=hf_reply)
    t = HFTeacher("acme/digits-vit", endpoint=HF_EP, class_names=NAMES, input_shape=(1, 6, 5), retry=fast())
    assert t.classify(levels(2)).tolist() == [0, 1]
    assert responses.calls[0].request.headers["Authorization"] == f"Bearer {TOKEN}"
    responses.replace(responses.POST, url, json={"error": f"Authorization header is invalid: {TOKEN}"}, status=401)
    with pytest.raises(TeacherRequestError, match="HTTP 401") as info:
        t.classify(levels(1))
    assert TOKEN not in str(info.value)
    responses.replace(responses.POST, url, json=[{"label": "eleven", "score": 1.0}])
    with pytest.raises(MalformedResponse, match="unknown label 'eleven'"):
        t.classify(levels(1))
    with pytest.raises(ValueError, match="input_shape"):
        HFTeacher("acme/digits-vit", class_names=NAMES)
    # the public endpoint is the default, never contacted here
    assert HFTeacher("acme/x", class_names=NAMES, input_shape=(3, 8, 8)).url == f"{DEFAULT_ENDPOINT}/acme/x"
