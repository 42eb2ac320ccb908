"""Mock teacher models: trivial rule, digits CNN (accuracy, cache, determinism), checkpoints, folder training."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import torch
from PIL import Image

from mock_server import ServerConfig, build_teacher, load_checkpoint, save_checkpoint, serve
from mock_server.teacher import SmallCNN, trivial_teacher


def test_trivial_teacher_is_a_mean_intensity_bucket():
    t = trivial_teacher((1, 4, 4), 10)
    x = np.stack([np.zeros((1, 4, 4)), np.ones((1, 4, 4)), np.full((1, 4, 4), 0.55)]).astype(np.float32)
    assert t.predict(x).tolist() == [0, 9, 5]
    assert t.predict(np.zeros((0, 1, 4, 4), np.float32)).shape == (0,)
    with pytest.raises(ValueError, match="expected"):
        t.predict(np.zeros((2, 1, 5, 5), np.float32))
    with pytest.raises(ValueError, match="no weights"):
        save_checkpoint(t, "unused.pt")


@pytest.fixture(scope="module")
def digits8(tmp_path_factory):
    """The 8x8 digits teacher, trained once into a temporary state dir (about a second)."""
    state = tmp_path_factory.mktemp("state")
    cfg = ServerConfig(image_size=8, state_dir=str(state))
    return cfg, build_teacher(cfg)


def test_digits_teacher_reports_clean_accuracy(digits8):
    cfg, t = digits8
    assert t.input_shape == (1, 8, 8) and t.class_names == tuple("0123456789")
    assert t.held_out == 360 and t.accuracy is not None and t.accuracy >= 0.9
    assert "trained on 1078 images" in t.source and f"{t.accuracy:.3f}" in t.summary()


def test_digits_teacher_cache_is_reused_and_training_is_deterministic(digits8):
    cfg, t = digits8
    cached = build_teacher(cfg)
    assert "cached weights" in cached.source and cached.accuracy == t.accuracy
    fresh = build_teacher(ServerConfig(image_size=8, state_dir=cfg.state_dir, no_cache=True))
    for name, w in t.module.state_dict().items():
        assert torch.equal(w, cached.module.state_dict()[name])
        assert torch.equal(w, fresh.module.state_dict()[name]), name
    other_seed = build_teacher(ServerConfig(image_size=8, state_dir=cfg.state_dir, seed=1, epochs=1))
    assert "cached" not in other_seed.source  # a different key trains anew


def test_checkpoint_round_trip_through_the_server(digits8, tmp_path):
    cfg, t = digits8
    path = save_checkpoint(t, tmp_path / "teacher.pt")
    with serve(checkpoint=str(path), image_size=8) as srv:
        meta = requests.get(srv.model_url).json()
        assert meta["inputs"][0]["shape"] == [-1, 1, 8, 8]
        x = np.random.default_rng(0).random((7, 1, 8, 8), dtype=np.float32)
        r = requests.post(f"{srv.model_url}/infer", json={"inputs": [
            {"name": "input", "shape": [7, 1, 8, 8], "datatype": "FP32", "data": x.ravel().tolist()}]})
        assert r.json()["outputs"][0]["data"] == t.predict(x).tolist()
        assert srv.teacher.accuracy == t.accuracy
    # a bare state_dict works too; its accuracy is measured on the digits held-out split
    bare = tmp_path / "bare.pt"
    torch.save(t.module.state_dict(), bare)
    loaded = load_checkpoint(bare, ServerConfig(image_size=8))
    assert loaded.input_shape == (1, 8, 8) and loaded.accuracy == pytest.approx(t.accuracy)


class NotWeights:
    """An arbitrary object: a safe loader must refuse to unpickle it."""


def test_unsafe_or_wrong_checkpoints_are_refused(tmp_path):
    cfg = ServerConfig()
    evil = tmp_path / "evil.pt"
    torch.save({"state_dict": NotWeights()}, evil)
    with pytest.raises(ValueError, match="cannot load checkpoint .* safely"):
        load_checkpoint(evil, cfg)
    other = tmp_path / "other.pt"
    torch.save({"arch": "resnet18", "state_dict": {}}, other)
    with pytest.raises(ValueError, match="arch 'resnet18'"):
        load_checkpoint(other, cfg)
    junk = tmp_path / "junk.pt"
    torch.save({"w": torch.zeros(3)}, junk)
    with pytest.raises(ValueError, match="not a small_cnn_v1 state_dict"):
        load_checkpoint(junk, cfg)
    with pytest.raises(ValueError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt", cfg)
    mismatch = tmp_path / "mismatch.pt"
    torch.save({"state_dict": SmallCNN(1, 3).state_dict(), "class_names": ["a", "b"]}, mismatch)
    with pytest.raises(ValueError, match="does not match"):
        load_checkpoint(mismatch, cfg)


def _png_folder(root, per_class: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    for name, (lo, hi) in {"dark": (0, 90), "bright": (160, 256)}.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            arr = rng.integers(lo, hi, size=(10, 10, 3), dtype=np.uint8)
            Image.fromarray(arr, "RGB").save(root / name / f"{i:03d}.png")
    (root / "dark" / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    return root


def test_folder_training_caches_by_content(tmp_path):
    folder = _png_folder(tmp_path / "imgs")
    cfg = ServerConfig(train_folder=str(folder), image_size=8, state_dir=str(tmp_path / "state"))
    t = build_teacher(cfg)
    assert t.class_names == ("bright", "dark") and t.input_shape == (1, 8, 8)
    assert t.held_out == 16 and t.accuracy == 1.0  # bright vs dark is trivially separable
    assert "cached" in build_teacher(cfg).source
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(folder / "dark" / "extra.png")
    assert "cached" not in build_teacher(cfg).source  # new content, new cache key
    rgb = build_teacher(ServerConfig(train_folder=str(folder), image_size=8, channels=3, no_cache=True))
    assert rgb.input_shape == (3, 8, 8)


def test_folder_errors_name_the_problem(tmp_path):
    (tmp_path / "only").mkdir()
    with pytest.raises(ValueError, match="at least two class"):
        build_teacher(ServerConfig(train_folder=str(tmp_path), no_cache=True))
    (tmp_path / "empty").mkdir()
    (tmp_path / "only" / "a.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ValueError, match="has no images"):
        build_teacher(ServerConfig(train_folder=str(tmp_path), no_cache=True))
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "empty" / "ok.png")
    with pytest.raises(ValueError, match="cannot read image .*a.png"):
        build_teacher(ServerConfig(train_folder=str(tmp_path), no_cache=True))
    with pytest.raises(ValueError, match="not a directory"):
        build_teacher(ServerConfig(train_folder=str(tmp_path / "nope"), no_cache=True))


def test_the_resnet_teacher_trains_with_flips_and_crops_caches_apart_and_round_trips(tmp_path):
    from mock_server.teacher import ARCHS

    folder = _png_folder(tmp_path / "imgs")
    state = str(tmp_path / "state")
    small = build_teacher(ServerConfig(train_folder=str(folder), image_size=8, channels=3, state_dir=state))
    cfg = ServerConfig(train_folder=str(folder), image_size=8, channels=3, state_dir=state, arch="resnet", epochs=2)
    t = build_teacher(cfg)
    assert small.arch == ARCHS["small_cnn"] and t.arch == ARCHS["resnet"] and "cached" not in t.source
    assert t.accuracy == 1.0 and "cached" in build_teacher(cfg).source  # its own cache entry, reused
    path = save_checkpoint(t, tmp_path / "resnet.pt")
    loaded = load_checkpoint(path, ServerConfig(image_size=8))
    probe = np.random.default_rng(0).random((5, 3, 8, 8), dtype=np.float32)
    assert loaded.arch == t.arch and loaded.predict(probe).tolist() == t.predict(probe).tolist()
    with pytest.raises(ValueError, match="arch must be one of"):
        ServerConfig(arch="vit")


def test_the_resnet_recipe_on_a_named_device_draws_as_on_the_default_and_comes_back_on_the_cpu():
    from mock_server.teacher import train_resnet

    x = torch.rand(40, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(40) % 2
    default = train_resnet(x, y, 2, epochs=1, seed=3)
    named = train_resnet(x, y, 2, epochs=1, seed=3, device="cpu")
    for (name, a), b in zip(default.state_dict().items(), named.state_dict().values(), strict=True):
        assert b.device.type == "cpu" and torch.equal(a, b), name
