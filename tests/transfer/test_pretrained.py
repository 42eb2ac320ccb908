"""A student that starts from a weights file on disk: the files it takes, the one-line refusals of those it cannot,
the frozen extractor under a trained head, and the file named in the result. Every file is made here."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn
from torchvision.models import mobilenet_v2, resnet18

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import pretrained
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.pretrained import PretrainedStudent, WeightsError, weights_info
from ldpclient.transfer.settings import PlanSettings, TrainingSettings
from ldpclient.transfer.student import build_student, load_checkpoint, save_checkpoint
from support.weights_files import FixedSize, script_file


@pytest.fixture(scope="module")
def resnet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torchvision resnet18 state dict (random weights, 1,000 classes) as torchvision's own files are."""
    path = tmp_path_factory.mktemp("weights") / "resnet18-random.pth"
    torch.manual_seed(0)
    torch.save(resnet18().state_dict(), path)
    return path


def _grey_teacher() -> LocalTeacher:
    """Two classes of 8x8 grey images by mean brightness."""
    return LocalTeacher(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 8, 8), 2, name="bright")


def _grey_images(n: int = 24) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    level = torch.tensor([0.25, 0.75]).repeat(n // 2)
    return (level.view(-1, 1, 1, 1) + 0.05 * torch.randn(n, 1, 8, 8, generator=g)).clamp(0, 1)


def test_a_torchscript_extractor_starts_a_student_whose_head_alone_learns(tmp_path: Path) -> None:
    path = script_file(tmp_path / "extractor.ts")
    frozen = {k: v.clone() for k, v in torch.jit.load(str(path)).state_dict().items()}
    kt = KnowledgeTransfer(_grey_teacher(), laplace(200, per="record"), seed=1,
                           release_generator=torch.Generator().manual_seed(2), plan=PlanSettings(num_queries=96),
                           training=TrainingSettings(student_weights=path, epochs=3))
    result = kt.run(_grey_images())
    student = result.student
    assert isinstance(student, PretrainedStudent)
    assert result.training.student == "torchscript"
    weights = result.training.weights
    assert weights is not None and weights["name"] == "extractor.ts"
    assert weights["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (weights["input_size"], weights["features"]) == (16, 6)
    after = student.backbone.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())  # the extractor never moved
    assert result.training.as_dict()["weights"] == weights
    assert len(result.labels) == 24


def test_a_run_with_random_weights_reports_none() -> None:
    kt = KnowledgeTransfer(_grey_teacher(), laplace(200, per="record"), seed=1,
                           release_generator=torch.Generator().manual_seed(2), plan=PlanSettings(num_queries=48),
                           training=TrainingSettings(epochs=1))
    result = kt.run(_grey_images())
    assert result.training.weights is None and "weights" not in result.training.as_dict()


def test_torchvision_state_dicts_start_their_architecture_at_224_pixels(tmp_path: Path, resnet_file: Path) -> None:
    info = weights_info(resnet_file)
    assert (info.architecture, info.input_size, info.features) == ("resnet18", 224, 512)
    student = build_student("resnet18", num_classes=3, in_channels=1, image_size=28, weights=str(resnet_file))
    assert isinstance(student, PretrainedStudent)
    assert student(torch.rand(2, 1, 28, 28)).shape == (2, 3)  # grey repeated to RGB, resized to 224
    trainable = [name for name, p in student.named_parameters() if p.requires_grad]
    assert trainable == ["head.weight", "head.bias"]
    wrapped = tmp_path / "wrapped.pth"  # a training checkpoint that keeps the state dict under "state_dict"
    torch.save({"state_dict": torch.load(resnet_file, weights_only=True), "epoch": 3}, wrapped)
    assert weights_info(wrapped).architecture == "resnet18"
    small = tmp_path / "mobilenet.pth"
    torch.save(mobilenet_v2().state_dict(), small)
    assert weights_info(small).architecture == "mobilenet_v2"


def _refusal(path: Path, architecture: str | None = None) -> str:
    with pytest.raises(WeightsError) as err:
        weights_info(path, architecture)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"student weights {path.name}: ")
    return message


def test_missing_corrupt_and_truncated_files_are_refused_in_one_line(tmp_path: Path, resnet_file: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert "no such file" in _refusal(tmp_path / "nope.pth", "resnet18")
    assert "resnet18 state dict" in _refusal(tmp_path / "nope.pth", "resnet18")
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a model" * 50)
    assert "is not a PyTorch file" in _refusal(garbage, "resnet18")
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(resnet_file.read_bytes()[: 1 << 20])
    assert "is cut short or damaged" in _refusal(truncated)
    monkeypatch.setattr(pretrained, "MAX_FILE_BYTES", 500)
    assert "is 550 bytes, more than the 500 bytes a weights file may be" in _refusal(garbage, "resnet18")
    monkeypatch.undo()
    numbers = tmp_path / "numbers.pth"
    torch.save({"epoch": 3, "lr": 0.1}, numbers)
    assert "no state dict of tensors" in _refusal(numbers)


def test_a_file_of_another_architecture_names_the_layers_and_the_input_it_expected(tmp_path: Path,
                                                                                  resnet_file: Path) -> None:
    assert "not mobilenet_v2 weights" in _refusal(resnet_file, "mobilenet_v2")
    small_images = tmp_path / "cifar-stem.pth"  # a ResNet-18 made for 32-pixel images: a 3x3 stem
    net = resnet18()
    net.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
    torch.save(net.state_dict(), small_images)
    message = _refusal(small_images, "resnet18")
    assert "conv1.weight is [64, 3, 3, 3] in the file, resnet18 expects [64, 3, 7, 7]" in message
    assert "224x224" in message
    other = tmp_path / "other.pth"
    torch.save(nn.Linear(4, 2).state_dict(), other)
    assert "fits none of resnet18, mobilenet_v2" in _refusal(other)
    script = script_file(tmp_path / "mine.ts")
    assert "is a TorchScript model" in _refusal(script, "resnet18") and "torchscript" in _refusal(script, "resnet18")
    assert "is a state dict" in _refusal(resnet_file, "torchscript")


def test_a_torchscript_file_must_say_its_input_size_and_work_at_it(tmp_path: Path) -> None:
    assert "says no input size" in _refusal(script_file(tmp_path / "silent.ts", meta=""))
    assert "input_size must be a whole number" in _refusal(script_file(tmp_path / "odd.ts", meta={"input_size": 3}))
    assert "is not {\"input_size\"" in _refusal(script_file(tmp_path / "bad.ts", meta="[1, 2"))
    wrong = script_file(tmp_path / "wrong-size.ts", FixedSize(), meta={"input_size": 32})
    message = _refusal(wrong)
    assert "failed on RGB input (2, 3, 32, 32)" in message and "input_size 32" in message
    assert weights_info(script_file(tmp_path / "right-size.ts", FixedSize())).features == 4
    maps = script_file(tmp_path / "maps.ts", nn.Conv2d(3, 2, 3))
    assert "a feature extractor returns (N, features)" in _refusal(maps)


def test_a_student_rebuilt_from_its_checkpoint_needs_the_file_it_started_from(tmp_path: Path) -> None:
    path = script_file(tmp_path / "extractor.ts")
    info = weights_info(path)
    config = {"num_classes": 2, "in_channels": 1, "image_size": 8, "weights": str(path),
              "weights_sha256": info.sha256, "value_range": [0.0, 1.0]}
    student = build_student("torchscript", **config)
    images = torch.rand(4, 1, 8, 8)
    save_checkpoint(tmp_path / "student.pt", student, "torchscript", config)
    rebuilt, _ = load_checkpoint(tmp_path / "student.pt")
    assert torch.allclose(rebuilt(images), student(images))
    script_file(path, meta={"input_size": 16, "changed": True})  # another file under the same name
    with pytest.raises(ValueError, match="has changed"):
        load_checkpoint(tmp_path / "student.pt")


def test_the_feature_cache_keeps_at_most_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = pretrained._FeatureCache(limit=10 * 6 * 4)  # ten rows of six float32 features
    monkeypatch.setattr(pretrained, "_FEATURES", cache)
    student = build_student("torchscript", num_classes=2, in_channels=3, image_size=16,
                            weights=str(script_file(tmp_path / "extractor.ts")))
    images = torch.rand(25, 3, 16, 16)
    first = student.features(images)
    assert cache.bytes <= cache.limit or len(cache.rows) == 25
    assert cache.bytes == sum(row.numel() * 4 for row in cache.rows.values())  # each row counted, in its own storage
    again = student.features(images[-5:])
    assert torch.equal(again, first[-5:]) and len(cache.rows) <= 25
    fresh = student.features(torch.rand(3, 3, 16, 16))
    assert fresh.shape == (3, 6) and cache.bytes <= cache.limit + 3 * 6 * 4


def test_a_batch_larger_than_the_cache_and_an_image_twice_in_a_batch_come_back_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = pretrained._FeatureCache(limit=2 * 6 * 4)  # two rows
    monkeypatch.setattr(pretrained, "_FEATURES", cache)
    student = build_student("torchscript", num_classes=2, in_channels=3, image_size=16,
                            weights=str(script_file(tmp_path / "extractor.ts")))
    images = torch.rand(5, 3, 16, 16)
    with torch.no_grad():
        expected = student.backbone(student.prepare(images)).float()
    student.features(images[:2])  # both kept; the next batch drops them while it adds three new ones
    assert torch.allclose(student.features(images), expected, atol=1e-6)
    doubled = student.features(torch.cat([images[4:], images[4:], images[:1]]))
    assert torch.allclose(doubled, expected[[4, 4, 0]], atol=1e-6)
    assert cache.bytes == len(cache.rows) * 6 * 4 <= cache.limit


def test_a_file_is_read_once_whatever_architecture_is_asked(tmp_path: Path, resnet_file: Path) -> None:
    path = script_file(tmp_path / "extractor.ts")
    first = pretrained.load_weights(path)
    student = build_student("torchscript", num_classes=2, in_channels=1, image_size=8, weights=str(path))
    assert isinstance(student, PretrainedStudent) and student.backbone is first.body
    assert pretrained.load_weights(resnet_file, "resnet18").body is pretrained.load_weights(resnet_file).body


def test_the_torchscript_archive_is_told_from_a_torch_save_zip(tmp_path: Path, resnet_file: Path) -> None:
    assert zipfile.is_zipfile(resnet_file)  # torch.save writes a zip too
    assert not pretrained._is_torchscript(resnet_file)
    assert pretrained._is_torchscript(script_file(tmp_path / "extractor.ts"))
