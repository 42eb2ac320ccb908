"""Student zoo, trainer on hard labels, labelling, checkpoints."""

import copy

import numpy as np
import pytest
import torch

from ldpclient.transfer.student import (
    LabelStore,
    Trainer,
    build_student,
    load_checkpoint,
    mobilenet_v2,
    pooled_cnn,
    predict,
    resnet18,
    save_checkpoint,
    select_device,
    small_cnn,
    validation_mask,
)


@pytest.mark.parametrize("name", ["small_cnn", "small_resnet", "resnet18", "mobilenet_v2", "small-cnn"])
@pytest.mark.parametrize("channels,size", [(1, 8), (3, 28)])
def test_zoo_shapes(name, channels, size):
    model = build_student(name, num_classes=7, in_channels=channels, image_size=size).eval()
    with torch.no_grad():
        out = model(torch.rand(2, channels, size, size))
    assert out.shape == (2, 7)


def test_the_pooled_cnn_runs_the_small_cnn_on_the_image_averaged_over_2x2_pixels() -> None:
    torch.manual_seed(0)
    pooled, small = pooled_cnn(num_classes=4, image_size=28), small_cnn(num_classes=4, image_size=28)
    # the same layers and weights: the pooled CNN on a 28 px image is the small CNN on its 2x2 means
    assert pooled.state_dict().keys() == small.state_dict().keys()
    small.load_state_dict(pooled.state_dict())
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(pooled.eval()(x), small.eval()(torch.nn.functional.avg_pool2d(x, 2)))
    assert build_student("pooled_cnn", num_classes=4, in_channels=1, image_size=16)(torch.rand(2, 1, 16, 16)).shape \
        == (2, 4)
    with pytest.raises(ValueError, match="fewer than 8 of 15 pixels"):
        pooled_cnn(image_size=15)


def test_the_last_pooling_passes_a_map_already_3x3_through_with_the_same_values_and_gradients() -> None:
    """The pooled CNN's last map on 28 px images is 3x3: it skips the pooling (and its backward pass), the small
    CNN's 7x7 map is still averaged; the outputs and gradients are those of ``nn.AdaptiveAvgPool2d(3)``."""
    torch.manual_seed(0)
    x = torch.rand(5, 1, 28, 28)
    for model in (pooled_cnn(num_classes=4), small_cnn(num_classes=4)):
        plain = copy.deepcopy(model)
        plain.features[8] = torch.nn.AdaptiveAvgPool2d(3)
        for m in (model, plain):
            m.eval()(x).square().sum().backward()
        assert torch.equal(model(x), plain(x))
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters(), strict=True))
    last = pooled_cnn(num_classes=4).features[8]
    three, seven = torch.rand(2, 64, 3, 3), torch.rand(2, 64, 7, 7)
    assert last(three) is three and last(seven).shape == (2, 64, 3, 3)  # passed through, not computed again


def test_each_max_pool_before_its_relu_gives_the_values_and_gradients_of_relu_first() -> None:
    """The small CNN pools before each ReLU (the ReLU then runs on a quarter of the map); the outputs and gradients
    are those of the usual order, ReLU first, with the same weights (dropout drawn alike)."""
    x = torch.rand(6, 1, 28, 28) - 0.3
    for model in (pooled_cnn(num_classes=4), small_cnn(num_classes=4), small_cnn(num_classes=4, image_size=8)):
        usual = copy.deepcopy(model)
        f = usual.features
        usual.features = torch.nn.Sequential(f[0], f[2], f[1], f[3], f[5], f[4], *f[6:])
        assert isinstance(usual.features[1], torch.nn.ReLU) and isinstance(usual.features[4], torch.nn.ReLU)
        assert usual.state_dict().keys() == model.state_dict().keys()
        size = 8 if isinstance(model.features[1], torch.nn.Identity) else 28
        outs = []
        for m in (model, usual):
            torch.manual_seed(1)
            outs.append(m.train()(x[..., :size, :size]))
            outs[-1].square().sum().backward()
        assert torch.equal(outs[0], outs[1])
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), usual.parameters(), strict=True))


def test_students_train_with_fused_adam_where_torch_has_it() -> None:
    from ldpclient.transfer.student import StudentAdam

    tr = Trainer(small_cnn(num_classes=2, image_size=8, width=8), epochs=1, device="cpu")
    assert isinstance(tr.optimizer, StudentAdam) and tr.optimizer.fused is True
    on_meta = torch.nn.Linear(2, 2, device="meta")  # a device without the fused kernel: torch's default
    assert StudentAdam(on_meta.parameters(), 1e-3).fused is None


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_student_adam_makes_torch_adams_weights_and_lets_no_moment_stay_subnormal(weight_decay: float) -> None:
    """Step for step the weights of ``torch.optim.Adam`` (fused), also for a parameter whose first gradient comes
    late and one whose gradient stays 0 after a few steps; that one's first moment, subnormal in torch's Adam after
    about 800 steps, is 0 in the student's."""
    from ldpclient.transfer.student import SUBNORMAL_FLUSH_STEPS, StudentAdam

    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(300)) for _ in range(3)]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    mine, torchs = StudentAdam(ours, 1e-3, weight_decay), torch.optim.Adam(theirs, lr=1e-3, weight_decay=weight_decay,
                                                                   fused=True)
    g = torch.Generator().manual_seed(1)
    steps = 1000 + SUBNORMAL_FLUSH_STEPS
    for t in range(steps):
        for k, (p, q) in enumerate(zip(ours, theirs, strict=True)):
            if k == 2 and t < 5:
                continue  # no gradient yet
            grad = torch.randn(300, generator=g) * float(k != 1 or t < 10)
            p.grad, q.grad = grad.clone(), grad.clone()
        mine.step()
        torchs.step()
        mine.zero_grad()
        torchs.zero_grad()
        assert all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True)), f"step {t}"
    tiny = torch.finfo(torch.float32).tiny
    if weight_decay == 0.0:
        stuck = torchs.state[theirs[1]]["exp_avg"]
        assert bool(((stuck != 0) & (stuck.abs() < tiny)).all())  # subnormal, for good
    for _, first, second in mine.state.values():
        for moment in (first, second):
            assert not bool(((moment != 0) & (moment.abs() < tiny)).any())


def test_a_student_trains_without_importing_torchs_compiler() -> None:
    """torch's optimisers import ``torch._dynamo`` (about a second) at their first use; training does not."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from ldpclient.transfer.student import LabelStore, Trainer, small_cnn\n"
        "x = torch.rand(64, 1, 8, 8); store = LabelStore(64, 2)\n"
        "store.set(list(range(64)), [k % 2 for k in range(64)])\n"
        "Trainer(small_cnn(num_classes=2, image_size=8, width=4), epochs=2, device='cpu').fit("
        "lambda epoch: [(list(range(64)), x)], store)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_factories_and_bad_names():
    assert isinstance(small_cnn(num_classes=3), torch.nn.Module)
    assert resnet18(num_classes=3, in_channels=1, image_size=96).conv1.stride == (2, 2)
    assert mobilenet_v2(num_classes=3, in_channels=2, image_size=16).features[0][0].in_channels == 2
    with pytest.raises(ValueError, match="unknown student"):
        build_student("vgg99")
    with pytest.raises(ValueError):
        small_cnn(num_classes=1)


def test_select_device():
    assert select_device("cpu").type == "cpu"
    assert select_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(ValueError):
        select_device("tpu")


def test_label_store_compact_and_checked():
    s = LabelStore(1000, 10)
    assert s.labels.dtype == np.int8 and s.labels.nbytes == 1000
    s.set(np.array([3, 5]), torch.tensor([7, 2]))
    assert s.get([3, 5, 6]).tolist() == [7, 2, -1]
    assert s.num_labelled == 2 and s.histogram()[7] == 1
    assert LabelStore(10, 500).labels.dtype == np.int16
    with pytest.raises(ValueError):
        s.set([1], [10])


def test_validation_mask_fraction_and_determinism():
    ids = np.arange(20000)
    m = validation_mask(ids, 0.1, seed=3)
    assert 0.08 < m.mean() < 0.12
    assert np.array_equal(m, validation_mask(ids, 0.1, seed=3))
    assert not validation_mask(ids, 0.0).any()


def _toy(n=600, seed=0):
    """Two classes: bright left half vs bright right half, 8x8, with noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.rand(n, 1, 8, 8, generator=g) * 0.3
    x[y == 0, :, :, :4] += 0.7
    x[y == 1, :, :, 4:] += 0.7
    return x, y


def test_trainer_learns_from_stream_and_reports_progress():
    x, y = _toy()
    labels = LabelStore(len(y), 2)
    labels.set(np.arange(len(y)), y)
    events = []

    def stream(epoch):
        for s in range(0, len(y), 100):
            yield np.arange(s, s + 100), x[s : s + 100]

    torch.manual_seed(0)
    model = small_cnn(num_classes=2, image_size=8, width=8)
    tr = Trainer(model, epochs=3, batch_size=32, lr=3e-3, val_fraction=0.2, device="cpu",
                 progress=lambda st, d, t, m: events.append((st, d, t)))
    hist = tr.fit(stream, labels, steps_per_epoch=15)
    assert len(hist.loss) == 3 and hist.loss[-1] < hist.loss[0]
    assert hist.val_accuracy[-1] > 0.9
    assert hist.images == 3 * int((~validation_mask(np.arange(600), 0.2, 0)).sum())
    assert ("epoch", 3, 3) in events and any(e[0] == "train" for e in events)
    xt, yt = _toy(200, seed=1)
    pred, conf = predict(tr.model, xt, device="cpu")
    assert pred.dtype == torch.int64 and (pred == yt).float().mean() > 0.9
    assert conf.shape == (200,) and torch.all((conf >= 0.5) & (conf <= 1))


def test_trainer_rejects_unlabelled_stream():
    x, _ = _toy(50)
    tr = Trainer(small_cnn(num_classes=2, image_size=8, width=8), epochs=1, device="cpu")
    with pytest.raises(ValueError, match="no labelled"):
        tr.fit(lambda e: iter([(np.arange(50), x)]), LabelStore(50, 2))


def test_checkpoint_roundtrip_safe_load(tmp_path):
    cfg = {"num_classes": 4, "in_channels": 1, "image_size": 8, "width": 8}
    model = build_student("small_cnn", **cfg).eval()
    path = tmp_path / "ck" / "student.pt"
    save_checkpoint(path, model, "small_cnn", cfg, extra={"plan": "abc"})
    loaded, info = load_checkpoint(path)
    assert info["student"] == "small_cnn" and info["extra"] == {"plan": "abc"}
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(model(x), loaded.eval()(x))
    assert torch.load(path, weights_only=True)["schema"] == 2  # one student: the schema older versions read
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot load"):
        load_checkpoint(bad)
    with pytest.raises(ValueError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    # weights that do not fit the student its config builds (a small_resnet saved at width 32 before the
    # default width became 16, its config without the width): one line, not a torch traceback
    wide = build_student("small_resnet", num_classes=4, in_channels=3, image_size=16, width=32)
    save_checkpoint(tmp_path / "wide.pt", wide, "small_resnet", {"num_classes": 4, "in_channels": 3, "image_size": 16})
    with pytest.raises(ValueError, match="do not fit the small_resnet student"):
        load_checkpoint(tmp_path / "wide.pt")


def test_checkpoint_refuses_arbitrary_pickles(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    p = tmp_path / "evil.pt"
    torch.save({"student": "small_cnn", "state_dict": {}, "x": Evil()}, p)
    with pytest.raises(ValueError, match="cannot load"):
        load_checkpoint(p)


def test_predictions_run_channels_last_on_a_copy_and_match_the_nchw_labels() -> None:
    import torch

    from ldpclient.transfer.student import compute_layout, predict, small_cnn

    torch.manual_seed(0)
    model = small_cnn(num_classes=10, image_size=28).eval()
    x = torch.rand(300, 1, 28, 28)
    labels, conf = predict(model, x, batch_size=64, device="cpu")
    with torch.no_grad():
        reference = torch.softmax(model(x), 1)
    assert compute_layout("cpu") == "channels_last"
    assert torch.equal(labels, reference.argmax(1)) and torch.allclose(conf, reference.max(1).values, atol=1e-5)
    assert all(p.is_contiguous() for p in model.parameters())  # the caller's model keeps its layout


def test_training_runs_channels_last_on_the_cpu_and_its_checkpoint_loads_as_nchw(tmp_path) -> None:
    import copy

    from ldpclient.transfer.student import batch_in_layout, to_compute_layout

    x, y = _toy(200)
    labels = LabelStore(len(y), 2)
    labels.set(np.arange(len(y)), y)
    torch.manual_seed(0)
    model = small_cnn(num_classes=2, image_size=8, width=8)
    before = copy.deepcopy(model)
    tr = Trainer(model, epochs=1, batch_size=32, val_fraction=0.0, device="cpu")
    conv = tr.model.features[3].weight  # (16, 8, 3, 3): NHWC and NCHW differ
    assert tr.model is model and conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert all(
        torch.equal(a, b) for a, b in zip(before.state_dict().values(), model.state_dict().values(), strict=True)
    )
    nhwc = batch_in_layout(x[:4], "cpu")
    assert nhwc.is_contiguous(memory_format=torch.channels_last) and torch.equal(nhwc, x[:4])
    assert batch_in_layout(torch.ones(3, 5), "cpu").is_contiguous()  # not an image batch: as it is
    with torch.no_grad():  # the same function in either layout, up to float summation order
        assert torch.allclose(before.eval()(x), model.eval()(x), atol=1e-5)
    tr.fit(lambda e: iter([(np.arange(200), x)]), labels)
    assert tr.model.features[3].weight.is_contiguous(memory_format=torch.channels_last)
    cfg = {"num_classes": 2, "in_channels": 1, "image_size": 8, "width": 8}
    save_checkpoint(tmp_path / "s.pt", model, "small_cnn", cfg)
    loaded, _ = load_checkpoint(tmp_path / "s.pt")
    assert all(p.is_contiguous() for p in loaded.parameters())
    with torch.no_grad():
        assert torch.allclose(model.eval()(x), loaded.eval()(x), atol=1e-5)
    assert to_compute_layout(loaded, "cpu") is loaded
