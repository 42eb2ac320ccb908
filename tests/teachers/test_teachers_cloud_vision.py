"""The Cloud Vision adapter against the mock's /v1/images:annotate and against a recorded answer of the real API
(its shape from the public reference): the label map, 16 images a request, one image's error as its abstention."""

from __future__ import annotations

import json

import pytest
import requests
import responses
import torch

mock_server = pytest.importorskip("mock_server")

from ldpclient.privacy import Domain, Guarantee  # noqa: E402
from ldpclient.privacy.release import _RELEASE_TOKEN, Release  # noqa: E402
from ldpclient.teachers import CostMeter, QueryClient, connect  # noqa: E402
from ldpclient.teachers.cloud_vision import VisionTeacher, read_label_map  # noqa: E402
from ldpclient.teachers.result import ABSTAINED  # noqa: E402

KEY = "AIza-mock-SECRET-key-9"
NAMES = ["0", "1", "2", "3"]
#: the mock names class k's label "/m/mock_k" with description k; class 3 by its description only
LABEL_MAP = {"0": ["/m/mock_0"], "1": ["/m/mock_1"], "2": ["/m/mock_2", "two"], "3": ["3"]}

#: An images:annotate answer as the API reference shows one: a dog photo's labels, then an image's own error.
RECORDED = {
    "responses": [
        {"labelAnnotations": [
            {"mid": "/m/0bt9lr", "description": "Dog", "score": 0.9723, "topicality": 0.9723},
            {"mid": "/m/0kpmf", "description": "Dog breed", "score": 0.9030, "topicality": 0.9030},
            {"mid": "/m/01z5f", "description": "Canidae", "score": 0.8871, "topicality": 0.8871},
            {"mid": "/m/01yrx", "description": "Cat", "score": 0.5121, "topicality": 0.5121},
        ]},
        {"labelAnnotations": [{"mid": "/m/02wbm", "description": "Food", "score": 0.95, "topicality": 0.95}]},
        {"error": {"code": 3, "message": "Bad image data."}},
    ]
}


def _queries(n: int) -> Release:
    values = torch.linspace(0.02, 0.98, n).view(-1, 1, 1, 1).expand(n, 1, 8, 8).contiguous()
    g = Guarantee("laplace", 1.0, 0.0, 64.0, 0.0, 64, Domain())
    return Release(values, g, (1, 8, 8), _token=_RELEASE_TOKEN)


def _serve(**options):
    return mock_server.serve(model="trivial", image_size=8, num_classes=4, tokens=[KEY], **options)


def _usage(srv) -> dict:
    return requests.get(f"{srv.url}/usage", headers={"Authorization": f"Bearer {KEY}"}, timeout=5).json()["total"]


def test_labels_through_the_label_map_sixteen_images_a_request() -> None:
    with _serve() as srv, connect(f"vision+{srv.url}/v1", class_names=NAMES, label_map=LABEL_MAP,
                                  input_shape=(1, 8, 8), token=KEY) as teacher:
        client = QueryClient(teacher, cost=CostMeter(price_per_query=0.0015))
        labels = client.label(_queries(40))
        want = torch.div(torch.arange(40) * 4, 40, rounding_mode="floor")
        assert labels.tolist() == want.tolist()  # the generic label ("Pattern", scored highest) maps to nothing
        assert client.stats.requests == 3 and _usage(srv)["images"] == 40  # 16 + 16 + 8
        assert client.cost.spent_run == pytest.approx(_usage(srv)["images"] * 0.0015)


def test_one_images_error_is_its_abstention_and_the_rest_are_answered() -> None:
    with _serve(chat_policy_rate=0.3, fault_seed=1) as srv, connect(
            f"vision+{srv.url}/v1", class_names=NAMES, label_map=LABEL_MAP, input_shape=(1, 8, 8),
            token=KEY) as teacher:
        client = QueryClient(teacher)
        labels = client.label(_queries(16))
        declined = int((labels == ABSTAINED).sum())
        assert 0 < declined < 16 and client.stats.requests == 1 and client.stats.abstained == declined
        assert _usage(srv)["images"] == 16 - declined


def test_no_mapped_label_is_an_abstention_and_the_mock_needs_the_key() -> None:
    with _serve() as srv:
        unmapped = connect(f"vision+{srv.url}/v1", class_names=NAMES, label_map={"0": ["/m/mock_0"], "1": ["one"]},
                           input_shape=(1, 8, 8), token=KEY)
        assert QueryClient(unmapped).label(_queries(8)).tolist() == [0, 0, ABSTAINED, ABSTAINED] + [ABSTAINED] * 4
        wrong = connect(f"vision+{srv.url}/v1", class_names=NAMES, label_map=LABEL_MAP, input_shape=(1, 8, 8),
                        token="AIza-wrong-key")
        with pytest.raises(Exception, match="401"):
            QueryClient(wrong).label(_queries(2))


@responses.activate
def test_a_recorded_answer_of_the_real_api() -> None:
    responses.add(responses.POST, "https://vision.googleapis.com/v1/images:annotate", json=RECORDED)
    teacher = VisionTeacher("https://vision.googleapis.com/v1", class_names=["dog", "cat", "food"],
                            label_map={"dog": ["/m/0bt9lr"], "cat": ["/m/01yrx"], "food": ["Food"]},
                            input_shape=(1, 8, 8), token=KEY)
    assert teacher.classify(_queries(3)).tolist() == [0, 2, ABSTAINED]
    sent = responses.calls[0].request
    assert sent.headers["X-Goog-Api-Key"] == KEY and "key=" not in sent.url
    body = json.loads(sent.body)
    assert body["requests"][0]["features"] == [{"type": "LABEL_DETECTION", "maxResults": 10}]


def test_label_map_refusals(tmp_path) -> None:
    with pytest.raises(ValueError, match="not one of the class names"):
        read_label_map({"dog": ["/m/0bt9lr"]}, ["cat", "food"])
    with pytest.raises(ValueError, match="two classes"):
        read_label_map({"cat": ["Pet"], "food": ["pet"]}, ["cat", "food"])
    path = tmp_path / "map.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        read_label_map(path, ["cat", "food"])
    with pytest.raises(ValueError, match="--label-map"):
        VisionTeacher("https://h/v1", class_names=["a", "b"], input_shape=(1, 8, 8), token=KEY)
