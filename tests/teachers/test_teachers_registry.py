"""Adapter selection by URL scheme and third-party adapters through the entry-point group."""

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from ldpclient.teachers import registry
from ldpclient.teachers.huggingface import HFTeacher
from ldpclient.teachers.oip import OIPTeacher
from ldpclient.teachers.torchserve import TorchServeTeacher

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_resolve_schemes():
    assert registry.resolve("oip+http://h:1/m") == ("oip", "http://h:1/m")
    assert registry.resolve("oip+https://h/m") == ("oip", "https://h/m")
    assert registry.resolve("http://h:1/m") == ("oip", "http://h:1/m")
    assert registry.resolve("torchserve+http://h:8080/m") == ("torchserve", "http://h:8080/m")
    assert registry.resolve("hf://org/model") == ("hf", "org/model")
    assert registry.resolve("local:pkg.mod:attr") == ("local", "pkg.mod:attr")
    assert registry.resolve("acme:digits") == ("acme", "digits")
    with pytest.raises(ValueError, match="non-empty"):
        registry.resolve("  ")


def test_builtin_adapters_by_address():
    assert isinstance(registry.connect("https://h.example/digits"), OIPTeacher)
    ts = registry.connect("torchserve+http://h:8080/digits", num_classes=10, input_shape=(1, 28, 28))
    assert isinstance(ts, TorchServeTeacher) and ts.url == "http://h:8080/predictions/digits"
    hf = registry.connect(
        "hf://org/model", endpoint="http://hf.local/models", class_names=["a", "b"], input_shape=(3, 8, 8)
    )
    assert isinstance(hf, HFTeacher) and hf.url == "http://hf.local/models/org/model"


def test_third_party_adapter_via_entry_point(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    ep = EntryPoint(name="acme", value="custom_teacher:connect", group=registry.ENTRY_POINT_GROUP)

    def fake_entry_points(*, group):
        return [ep] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    assert registry.available_adapters()["acme"] == "custom_teacher:connect"
    t = registry.connect("acme+http://127.0.0.1:9/v1", token="tok-XYZ")
    assert type(t).__name__ == "AcmeTeacher" and t.base_url == "http://127.0.0.1:9/v1"
    assert "tok-XYZ" not in repr(t.http)
    with pytest.raises(ValueError, match="acme\\+https://host/path"):
        registry.connect("acme:digits")
    sys.modules.pop("custom_teacher", None)


TOY_ADAPTER = '''"""A toy built-in adapter, registered from its own file."""

import torch

from .base import Teacher, TeacherMetadata
from .registry import register_adapter


class ToyTeacher(Teacher):
    def __init__(self, target):
        self.target = target

    def metadata(self):
        return TeacherMetadata(name="toy", input_shape=(1, 2, 2), datatype="FP32", num_classes=2)

    def classify(self, queries):
        return torch.zeros(len(queries), dtype=torch.int64)


@register_adapter("toy", identity=lambda target: "http://toy.test/" + target.strip("/"))
def connect_toy(target, **opts):
    return ToyTeacher(target)
'''

TOY_PROBE = """
import json
from ldpclient.teachers import connect
from ldpclient.teachers.identity import teacher_identity
from ldpclient.teachers.registry import available_adapters
t = connect("toy:abc")
print(json.dumps({"type": type(t).__name__, "target": t.target, "adapters": sorted(available_adapters()),
                  "identity": [teacher_identity("toy:abc/"), teacher_identity("toy:abc")]}))
"""


def test_a_builtin_adapter_in_a_new_file_is_found_with_its_identity(tmp_path):
    from support.package_copy import probe_with_added_file

    seen = probe_with_added_file(tmp_path, "teachers/toy.py", TOY_ADAPTER, TOY_PROBE)
    assert seen["type"] == "ToyTeacher" and seen["target"] == "abc"
    assert {"oip", "torchserve", "hf", "local", "toy"} <= set(seen["adapters"])
    assert seen["identity"] == ["toy:http://toy.test/abc", "toy:http://toy.test/abc"]  # one identity per teacher


def test_each_built_in_adapter_declares_its_options_and_an_unknown_one_is_named_before_connecting() -> None:
    from ldpclient.teachers.registry import builtin_adapters, declared_options, unknown_options

    adapters = builtin_adapters()
    assert {name for name, entry in adapters.items() if entry.options() is None} == {"local"}  # it passes any on
    openai = adapters["openai"].options()
    assert openai is not None and {"model", "class_names", "timeout", "token", "transport"} <= openai
    assert unknown_options("hf://org/m", ["class_names", "datatype", "timeout", "wire"]) == ["datatype", "wire"]
    assert unknown_options("local:pkg.mod:attr", ["anything"]) == []

    def named(target: str, *, num_classes: int = 2, token: str | None = None) -> None: ...
    def any_keywords(target: str, **kwargs: object) -> None: ...
    assert declared_options(named) == {"num_classes", "token"}
    assert declared_options(any_keywords) is None
