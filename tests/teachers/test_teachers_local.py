"""LocalTeacher, encoding and connect('local:...')."""

import numpy as np
import pytest
import torch

from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Derived, Release
from ldpclient.teachers import LocalTeacher, MalformedResponse, Teacher, connect
from ldpclient.teachers.encoding import quantise, to_png


def make_release(values: torch.Tensor) -> Release:
    n_el = int(np.prod(values.shape[1:]))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, tuple(values.shape[1:]), _token=_RELEASE_TOKEN)


class MeanThreshold(torch.nn.Module):
    """Class = bucket of the image mean in [0, 1] (10 classes)."""

    def forward(self, x):
        m = x.flatten(1).mean(1)
        logits = -((m.unsqueeze(1) - (torch.arange(10) + 0.5) / 10) ** 2)
        return logits


def test_local_teacher_labels_releases_and_rejects_raw_tensors():
    t = LocalTeacher(MeanThreshold(), (1, 4, 4), 10)
    assert isinstance(t, Teacher)
    x = torch.stack([torch.full((1, 4, 4), v) for v in (0.05, 0.55, 0.95)])
    labels = t.classify(make_release(x))
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 5, 9]
    d = Derived.from_release(make_release(x)).map(lambda v: 1 - v, "invert")
    assert t.classify(d).tolist() == [9, 4, 0]
    with pytest.raises(TypeError, match="Release or Derived"):
        t.classify(x)


def test_local_teacher_uint8_quantisation_and_chunking():
    seen = []

    def model(x):
        seen.append(x.clone())
        return (x.flatten(1).mean(1) * 9.999).long()

    t = LocalTeacher(model, (1, 2, 2), 10, datatype="UINT8", max_batch_size=2)
    x = torch.tensor([0.0, 0.31, 1.7, -2.0]).view(4, 1, 1, 1).expand(4, 1, 2, 2).contiguous()
    res = t.infer(make_release(x))
    assert res.requests == 2 and [s.shape[0] for s in seen] == [2, 2]
    vals = torch.cat(seen)[:, 0, 0, 0]
    # clipped to [0, 1], quantised to bytes, de-quantised: 0.31 -> round(79.05)=79 -> 79/255
    assert torch.allclose(vals, torch.tensor([0.0, 79 / 255, 1.0, 0.0]))
    assert res.labels.tolist() == [0, 3, 9, 0]


def test_local_teacher_wrong_shape_and_bad_outputs():
    t = LocalTeacher(MeanThreshold(), (1, 4, 4), 10)
    with pytest.raises(ValueError, match=r"expects \(1, 4, 4\)"):
        t.classify(make_release(torch.zeros(2, 1, 3, 3)))
    bad = LocalTeacher(lambda x: torch.full((x.shape[0],), 12), (1, 2, 2), 10)
    with pytest.raises(MalformedResponse, match=r"outside \[0, 10\)"):
        bad.classify(make_release(torch.zeros(2, 1, 2, 2)))
    short = LocalTeacher(lambda x: torch.zeros(x.shape[0] - 1, dtype=torch.long), (1, 2, 2), 10)
    with pytest.raises(MalformedResponse, match="1 label"):
        short.classify(make_release(torch.zeros(2, 1, 2, 2)))
    wide = LocalTeacher(lambda x: torch.zeros(x.shape[0], 3), (1, 2, 2), 10)
    with pytest.raises(MalformedResponse, match="3 scores"):
        wide.classify(make_release(torch.zeros(2, 1, 2, 2)))
    with pytest.raises(ValueError, match="datatype"):
        LocalTeacher(MeanThreshold(), (1, 2, 2), 10, datatype="INT4")


def test_quantise_formula_and_png():
    v = torch.tensor([[-1.0, 0.0, 0.5, 0.502, 1.0, 3.0]])
    q = quantise(v, "UINT8", (0.0, 1.0))
    assert q.dtype == np.uint8 and q.tolist() == [[0, 0, 128, 128, 255, 255]]
    q2 = quantise(torch.tensor([[-1.0, 0.0, 1.0]]), "UINT8", (-1.0, 1.0))
    assert q2.tolist() == [[0, 128, 255]]
    f = quantise(v, "FP32", (0.0, 1.0))
    assert f.dtype == np.dtype("<f4") and f.tolist()[0][0] == 0.0 and f.tolist()[0][-1] == 1.0
    with pytest.raises(ValueError, match="NaN"):
        quantise(torch.tensor([[float("nan")]]), "FP32", (0.0, 1.0))
    png = to_png(quantise(torch.rand(1, 1, 5, 7), "UINT8", (0, 1))[0], "UINT8", (0, 1))
    from io import BytesIO

    from PIL import Image

    img = Image.open(BytesIO(png))
    assert img.size == (7, 5) and img.mode == "L"


# module-level objects for connect("local:...")
digits_module = MeanThreshold()
ready_teacher = LocalTeacher(MeanThreshold(), (1, 4, 4), 10, name="ready")


def make_teacher(num_classes=10):
    return LocalTeacher(MeanThreshold(), (1, 4, 4), num_classes, name="factory")


def test_connect_local_forms():
    t = connect(f"local:{__name__}:ready_teacher")
    assert t is ready_teacher
    t2 = connect(f"local:{__name__}:digits_module", input_shape=(1, 4, 4), num_classes=10)
    assert t2.metadata().name == "digits_module"
    t3 = connect(f"local:{__name__}:make_teacher", num_classes=10)
    assert t3.metadata().name == "factory"
    with pytest.raises(ValueError, match="pass input_shape, num_classes"):
        connect(f"local:{__name__}:digits_module")
    with pytest.raises(ValueError, match="cannot import"):
        connect("local:no_such_module_xyz:thing")
    with pytest.raises(ValueError, match="no teacher adapter named 'nosuch'"):
        connect("nosuch+http://127.0.0.1:1/x")
