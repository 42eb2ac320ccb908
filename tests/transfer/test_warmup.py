"""The rotation warm-up (``label --warmup``): what it trains, what it leaves alone, how a run reports it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ldpclient.io.records import as_record_source
from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings
from ldpclient.transfer.student import load_checkpoint, small_cnn, small_resnet
from ldpclient.transfer.warmup import rotation_warmup, rotations


def _bright_top(n: int, side: int = 12, seed: int = 0) -> torch.Tensor:
    """Colour images bright in their top rows only: which way one was turned shows."""
    g = torch.Generator().manual_seed(seed)
    images = 0.1 * torch.rand(n, 3, side, side, generator=g)
    images[:, :, : side // 3, :] += 0.5 + 0.4 * torch.rand(n, 3, side // 3, side, generator=g)
    return images


def test_rotations_turn_each_image_four_ways_first_rotations_first() -> None:
    turned, which = rotations(torch.arange(8.0).view(2, 1, 2, 2))
    assert turned.shape == (8, 1, 2, 2) and which.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert torch.equal(turned[0], torch.arange(4.0).view(1, 2, 2))
    assert torch.equal(turned[2], torch.rot90(torch.arange(4.0).view(1, 2, 2), 1, dims=(1, 2)))


@pytest.mark.parametrize("build", [small_cnn, small_resnet])
def test_the_warm_up_trains_the_layers_below_the_output_and_puts_the_output_layer_back_unchanged(build) -> None:
    torch.manual_seed(0)
    model = build(num_classes=5, in_channels=3, image_size=12)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    head_name, head = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)][-1]
    history = rotation_warmup(model, as_record_source(_bright_top(48)), epochs=10, pad=1, seed=1)
    assert [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1] is head and head.out_features == 5
    after = model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    head_keys = {f"{head_name}.weight", f"{head_name}.bias"}
    assert head_keys <= set(after)
    assert not moved & head_keys  # the output layer: the same weights
    assert moved  # the layers below: trained
    assert len(history) == 10 and history[-1] > max(0.5, history[0])  # the pretext is learnt (chance 0.25)


def test_the_warm_up_refuses_what_it_cannot_do() -> None:
    model = small_cnn(num_classes=3, in_channels=1, image_size=12)
    with pytest.raises(ValueError, match="square"):
        rotation_warmup(model, as_record_source(torch.rand(4, 1, 12, 10)), epochs=1, pad=0, seed=0)
    with pytest.raises(ValueError, match="epochs"):
        rotation_warmup(model, as_record_source(torch.rand(4, 1, 12, 12)), epochs=-1, pad=0, seed=0)
    with pytest.raises(ValueError, match="warmup"):
        TrainingSettings(warmup=-1)


def test_a_run_with_a_warm_up_repeats_with_its_seed_reports_it_and_leaves_the_callers_rng_alone(tmp_path) -> None:
    x = _bright_top(40, side=16, seed=2)
    teacher = LocalTeacher(lambda v: v.mean((2, 3)), (3, 16, 16), 3, name="channel")
    stages: list[tuple[str, int, int]] = []

    def run(warmup: int, progress=None, checkpoint=None):
        return KnowledgeTransfer(
            teacher,
            laplace(20.0, per="element"),
            seed=4,
            release_generator=torch.Generator().manual_seed(5),
            progress=progress,
            plan=PlanSettings(num_queries=200),
            training=TrainingSettings(epochs=1, batch_size=16, device="cpu", warmup=warmup, checkpoint=checkpoint),
            adaptation=AdaptationSettings(adapt=False),
        ).run(x)

    torch.manual_seed(123)
    state = torch.get_rng_state()
    warm = run(2, progress=lambda stage, done, total, metrics: stages.append((stage, done, total)),
               checkpoint=tmp_path / "warm.pt")
    assert torch.equal(torch.get_rng_state(), state)
    again, cold = run(2), run(0)
    assert warm.training.warmup_epochs == 2 and cold.training.warmup_epochs == 0
    assert "warmup" in warm.timings and "warmup" not in cold.timings
    # not adapted, yet it has seen the clean private images: its checkpoint says so
    extra = load_checkpoint(tmp_path / "warm.pt")[1]["extra"]
    assert extra["adapted_on_clean_private_records"] is False and extra["warmed_up_on_clean_private_records"] is True
    assert [s for s in stages if s[0] == "warmup"] == [("warmup", 0, 2), ("warmup", 1, 2), ("warmup", 2, 2)]
    first_train = next(k for k, s in enumerate(stages) if s[0] == "train")
    assert max(k for k, s in enumerate(stages) if s[0] == "warmup") < first_train  # before training
    for a, b in zip(warm.student.state_dict().values(), again.student.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(warm.student.state_dict().values(),
                                                     cold.student.state_dict().values(), strict=True))


def test_label_takes_warmup_epochs_reports_them_and_refuses_a_negative_count(tmp_path: Path) -> None:
    from PIL import Image
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app

    rng = np.random.default_rng(7)
    private = tmp_path / "private"
    private.mkdir()
    for k in range(10):
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(private / f"p{k}.png")
    with mock_server.serve(model="trivial", image_size=16, channels=3) as srv:
        args = ["label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"),
                "--queries", "40", "--epochs", "1", "--output", str(tmp_path / "labels.csv")]
        planned = json.loads(CliRunner().invoke(app, [*args, "--dry-run", "--json", "--warmup", "3"]).output)
        assert planned["plan"]["student"]["warmup_epochs"] == 3
        result = CliRunner().invoke(app, [*args, "--json", "--warmup", "2", "--html"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["student"]["warmup_epochs"] == 2
        page = (tmp_path / "labels.html").read_text()
        assert "2 epochs telling rotations of the clean private images apart" in page
        refused = CliRunner().invoke(app, [*args, "--warmup", "-1"])
    assert refused.exit_code == 2 and "--warmup" in refused.output
