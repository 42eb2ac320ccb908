"""Adapters take one HttpTransport (connection options live there); the old keywords still build one."""

import numpy as np
import pytest
import responses
import torch

import ldpclient.teachers.http as http
from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.run.connect import open_teacher
from ldpclient.teachers import HttpTransport, RetryPolicy, connect
from ldpclient.teachers.huggingface import HFTeacher
from ldpclient.teachers.oip import OIPTeacher
from ldpclient.teachers.torchserve import TorchServeTeacher

OIP = "https://oip.test:8000"
TS = "https://ts.test:8080"
HF_EP = "https://hf.test/models"
NAMES = ["zero", "one", "two"]
KEY = "key-SECRET-0123456789"


def release(n=2, shape=(1, 2, 2)):
    values = torch.full((n, *shape), 0.5)
    n_el = int(np.prod(shape))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, shape, _token=_RELEASE_TOKEN)


def no_sleep(_):
    pass


def api_key_transport(**kw):
    return HttpTransport(
        token=KEY, auth_header="X-API-Key", auth_scheme="", timeout=(2.0, 9.0),
        retry=RetryPolicy(max_attempts=1, sleep=no_sleep), **kw,
    )


def mock_oip(rsps):
    rsps.add(responses.GET, f"{OIP}/v2/health/ready")
    rsps.add(responses.GET, f"{OIP}/v2/models/m", json={
        "name": "m",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 2, 2]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
        "parameters": {"num_classes": 3, "value_range": [0.0, 1.0]},
    })
    rsps.add(responses.GET, f"{OIP}/v2/models/m/config", status=404)
    rsps.add(responses.GET, f"{OIP}/v2", json={"extensions": []})
    rsps.add(responses.POST, f"{OIP}/v2/models/m/infer",
             json={"outputs": [{"name": "label", "datatype": "INT64", "shape": [2], "data": [1, 2]}]})


def oip(tmp_path, **kw):
    return OIPTeacher(f"{OIP}/", "m", wire="json", state_dir=tmp_path, **kw)


def torchserve(tmp_path, **kw):
    return TorchServeTeacher(TS, "m", num_classes=3, input_shape=(1, 2, 2), check_ready=False, **kw)


def hf(tmp_path, **kw):
    return HFTeacher("org/m", endpoint=HF_EP, class_names=NAMES, input_shape=(1, 2, 2), **kw)


def mock(kind, rsps):
    if kind is oip:
        mock_oip(rsps)
    elif kind is torchserve:
        rsps.add(responses.POST, f"{TS}/predictions/m", json={"2": 0.9, "0": 0.1})
    else:
        rsps.add(responses.POST, f"{HF_EP}/org/m", json=[{"label": "two", "score": 0.8}])


ADAPTERS = pytest.mark.parametrize("make", [oip, torchserve, hf], ids=["oip", "torchserve", "hf"])


@ADAPTERS
@responses.activate
def test_an_adapter_uses_its_transports_auth_and_timeout(make, tmp_path):
    mock(make, responses)
    transport = api_key_transport()
    teacher = make(tmp_path, transport=transport)
    assert teacher.http is transport
    labels = teacher.classify(release())
    assert labels.shape == (2,) and int(labels.max()) <= 2
    assert responses.calls
    for call in responses.calls:
        assert call.request.headers["X-API-Key"] == KEY and "Authorization" not in call.request.headers
        assert call.request.req_kwargs["timeout"] == (2.0, 9.0)
    assert KEY not in repr(teacher) and KEY not in repr(transport)


@ADAPTERS
@responses.activate
def test_the_keyword_options_still_build_a_transport(make, tmp_path):
    mock(make, responses)
    teacher = make(tmp_path, token=KEY, timeout=4, retry=RetryPolicy(max_attempts=1), max_response_bytes=10_000)
    assert isinstance(teacher.http, HttpTransport) and teacher.http.max_response_bytes == 10_000
    teacher.classify(release())
    for call in responses.calls:
        assert call.request.headers["Authorization"] == f"Bearer {KEY}"
        assert call.request.req_kwargs["timeout"] == (4.0, 4.0)


@ADAPTERS
def test_a_transport_and_transport_options_together_are_refused(make, tmp_path):
    with pytest.raises(ValueError, match="either transport= or the transport options timeout, token, not both"):
        make(tmp_path, transport=HttpTransport(), token=KEY, timeout=3)


@ADAPTERS
def test_an_unknown_option_is_a_type_error_naming_it(make, tmp_path):
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'tiemout'$"):
        make(tmp_path, tiemout=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tiemout'"):
        make(tmp_path, transport=HttpTransport(), tiemout=3)  # a typo is named before the conflict
    with pytest.raises(TypeError, match="transport must be an HttpTransport, got dict"):
        make(tmp_path, transport={"timeout": 3})


def test_connect_passes_the_transport_on_and_refuses_it_with_a_token():
    transport = HttpTransport(timeout=3)
    assert connect("oip+https://h.test:1/m", transport=transport).http is transport
    assert connect(f"torchserve+{TS}/m", num_classes=3, input_shape=(1, 2, 2), transport=transport).http is transport
    with pytest.raises(ValueError, match="not both"):
        connect("oip+https://h.test:1/m", token=KEY, transport=transport)


def test_the_cli_still_names_an_option_an_adapter_does_not_take(tmp_path):
    with pytest.raises(ValueError, match="does not take --datatype"):
        open_teacher("hf://org/m", None, {"datatype": "FP32", "class_names": NAMES, "input_shape": (1, 2, 2)})
    t = open_teacher(f"torchserve+{TS}/m", None, {"num_classes": 3, "input_shape": (1, 2, 2), "timeout": (1.0, 5.0)})
    assert t.http.timeout == (1.0, 5.0)


def test_token_environment_defaults(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-env-token")
    monkeypatch.setenv("LDPCLIENT_TOKEN", "ldp-env-token")
    kw = dict(endpoint=HF_EP, class_names=NAMES, input_shape=(1, 2, 2))
    assert HFTeacher("org/m", **kw).http.session().headers["Authorization"] == "Bearer hf-env-token"
    built = HFTeacher("org/m", transport=HttpTransport(token_env="HF_TOKEN"), **kw)
    assert built.http.session().headers["Authorization"] == "Bearer hf-env-token"
    assert HFTeacher("org/m", token_env=None, **kw).http.has_token is False
    assert torchserve(None).http.session().headers["Authorization"] == "Bearer ldp-env-token"


def test_one_transport_shared_by_two_teachers_survives_either_closing(tmp_path):
    transport = HttpTransport()
    a, b = torchserve(tmp_path, transport=transport), hf(tmp_path, transport=transport)
    first = transport.session()
    a.close()
    assert transport.session() is not first and b.http is transport


def test_the_public_module_names_what_plugin_authors_use():
    assert set(http.__all__) >= {
        "HttpTransport", "RetryPolicy", "transport_from_options", "TRANSPORT_OPTIONS",
        "to_wire", "to_png", "validate_labels", "label_to_index", "best_of_scores", "MalformedResponse",
    }
    assert all(hasattr(http, name) for name in http.__all__)
    assert http.TRANSPORT_OPTIONS >= {"token", "token_env", "auth_header", "auth_scheme", "timeout", "verify",
                                      "retry", "headers", "max_response_bytes", "deadline"}
    assert "name" not in http.TRANSPORT_OPTIONS


def test_the_transport_options_are_exactly_what_the_transport_takes():
    """TransportOptions (what every HTTP adapter's ``**transport_options`` are typed as) names each keyword of
    HttpTransport but ``name``, with the same annotation."""
    import inspect
    import typing

    params = inspect.signature(HttpTransport.__init__).parameters
    taken = {name: p.annotation for name, p in params.items() if name not in ("self", "name")}
    assert http.TRANSPORT_OPTIONS == set(taken)
    declared = typing.get_type_hints(http.TransportOptions)
    hinted = typing.get_type_hints(HttpTransport.__init__)
    assert {name: declared[name] for name in taken} == {name: hinted[name] for name in taken}
