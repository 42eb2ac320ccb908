"""One function per default: values, and that the CLI, the options and the library use them."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from typer.testing import CliRunner

from ldpclient.cli.commands import app
from ldpclient.privacy import defaults as privacy_defaults
from ldpclient.privacy import laplace
from ldpclient.run.options import COUNT_OPTIONS, LabelOptions, NoiseOptions
from ldpclient.run.plan import shape_settings
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import BOUNDS, PlanSettings, TrainingSettings


def test_reduction_keeps_at_least_seven_pixels_per_side_and_divides_both_axes() -> None:
    assert privacy_defaults.reduction((1, 28, 28)) == 4
    assert privacy_defaults.reduction((1, 8, 8)) == 1
    assert privacy_defaults.reduction((3, 32, 32)) == 4
    assert privacy_defaults.reduction((3, 224, 224)) == 32
    assert privacy_defaults.reduction((1, 28, 21)) == 1  # 7 divides both, but 21 / 7 = 3 px is too small
    assert privacy_defaults.reduction((1, 42, 28)) == 2
    assert privacy_defaults.reduction((1, 5, 5)) == 1


def test_postprocess_blur_is_half_a_cell_of_the_coarsest_default_grid() -> None:
    assert defaults.postprocess((1, 28, 28), 4) == "blur:2,clip"
    assert defaults.postprocess((1, 8, 8), 1) == "blur:0.571,clip"  # 64 pixels: the lowpass would keep all
    assert defaults.postprocess((3, 224, 224), 32) == "blur:16,clip"
    assert defaults.postprocess((1, 42, 28), 2) == "blur:3,clip"  # the longer side sets the scale
    assert defaults.blur_postprocess((1, 28, 28)) == "blur:2,clip"


def test_postprocess_of_a_pixel_release_is_the_dct_band_unless_the_noise_is_wider_than_half_the_domain() -> None:
    assert defaults.postprocess((1, 28, 28), 1, 2.0) == "lowpass:64,clip"  # the paper's 2 per pixel
    assert defaults.postprocess((1, 28, 28), 1, 1.99) == "blur:2,clip"
    assert defaults.postprocess((1, 28, 28), 1, 1.0) == "blur:2,clip"
    assert defaults.postprocess((1, 28, 28), 1, None) == "blur:2,clip"  # epsilon unknown
    assert defaults.postprocess((3, 32, 32), 1, 2.0) == "lowpass:64,clip"
    assert defaults.postprocess((1, 9, 8), 1, 5.0) == "lowpass:64,clip"  # 72 pixels: the projection drops 8
    assert defaults.postprocess((1, 28, 28), 4, 50.0) == "blur:2,clip"  # pooled: always the blur
    assert privacy_defaults.epsilon_element(1568, "record", (1, 28, 28), 1) == 2.0
    assert privacy_defaults.epsilon_element(2, "element", (1, 28, 28), 1) == 2.0
    assert privacy_defaults.epsilon_element(96, "record", (3, 32, 32), 4) == 96 / 192
    assert privacy_defaults.epsilon_element(49, "record", (28, 28), 4) == 1.0
    assert defaults.postprocess((1, 28, 28), 1, 50.0, "dct") == "clip"  # a coefficient basis: band-limited already
    assert defaults.postprocess((3, 32, 32), 1, None, "pca") == "clip"
    assert shape_settings((1, 28, 28), 1, None, "pool", 1568, "record") == (1, "lowpass:64,clip")
    assert shape_settings((1, 28, 28), 1, None, "pool", 100, "record") == (1, "blur:2,clip")
    assert shape_settings((1, 28, 28), 1, None, "pool") == (1, "blur:2,clip")
    assert shape_settings((1, 28, 28), None, None, "pool", 2, "element") == (4, "blur:2,clip")
    assert shape_settings((1, 28, 28), 1, "clip", "pool", 2, "element") == (1, "clip")  # given wins
    assert shape_settings((1, 28, 28), None, None, "dct", 100, "record") == (1, "clip")  # a coefficient basis


def test_query_budget_defaults() -> None:
    assert defaults.num_queries(719, "sup") == 14380
    assert defaults.num_queries(10, "sup") == 45  # capped by the distinct pairs
    assert defaults.num_queries(10, "rand") == 500
    assert defaults.num_queries(10, "none") is None
    assert defaults.query_batch_size(None) == 256 and defaults.query_batch_size(64) == 64
    assert defaults.query_batch_size(10_000) == 256


def test_cli_options_and_library_share_the_defaults() -> None:
    label_opts = LabelOptions(private_dir=".", teacher="t")  # type: ignore[arg-type]
    assert label_opts.mechanism == privacy_defaults.mechanism() and label_opts.epsilon == privacy_defaults.epsilon()
    assert label_opts.epsilon_unit == privacy_defaults.epsilon_unit()
    assert label_opts.train_batch_size == defaults.train_batch_size() and label_opts.epochs == defaults.epochs()
    assert label_opts.reduce is None and label_opts.postprocess is None  # resolved from the teacher's shape
    noise_opts = NoiseOptions(private_dir=".", out=".")  # type: ignore[arg-type]
    assert noise_opts.mechanism == privacy_defaults.mechanism()
    from ldpclient.transfer.settings import PlanSettings, TrainingSettings

    training, plan = TrainingSettings(), PlanSettings()
    assert training.epochs is None and training.batch_size is None  # -> defaults.*() when the pipeline is built
    assert training.student is None and label_opts.student is None  # -> defaults.student(shape, public) by the run
    assert training.crop is None and not training.flip and not label_opts.flip
    assert plan.augment == defaults.augment()
    kt = KnowledgeTransfer(
        LocalTeacher(torch.nn.Flatten(), input_shape=(1, 2, 2), num_classes=4), laplace(1.0, per="element")
    )
    settled = kt.resolved(torch.rand(3, 1, 2, 2))
    assert settled.epochs == defaults.epochs() and settled.batch_size == defaults.train_batch_size()
    help_text = CliRunner().invoke(app, ["label", "--help"], terminal_width=200).output
    assert re.search(rf"\[default: {defaults.train_batch_size()}[;\]]", help_text)  # '[default: 32; x>=1]'


def test_shape_settings_keep_what_is_given_and_fill_the_rest() -> None:
    assert shape_settings((1, 28, 28), None, None, "pool") == (4, "blur:2,clip")
    assert shape_settings((1, 28, 28), 1, "", "pool") == (1, "")  # '' is "no post-processing", kept
    assert shape_settings((1, 8, 8), 2, None, "pool") == (2, "blur:0.571,clip")
    assert shape_settings((1, 28, 28), None, None, "dct") == (1, "clip")


def test_label_options_resolve_the_pixel_release_post_processing_from_the_shape() -> None:
    from ldpclient.run.plan import settle_release

    paper = LabelOptions(private_dir=".", teacher="t", epsilon=2.0, epsilon_unit="element", reduce=1)  # type: ignore[arg-type]
    resolved = settle_release(paper, (1, 28, 28))
    assert (resolved.basis, resolved.reduce, resolved.postprocess) == ("pool", 1, "lowpass:64,clip")
    assert settle_release(paper, (1, 8, 8)).postprocess == "blur:0.571,clip"
    noisy = LabelOptions(private_dir=".", teacher="t", epsilon=100.0, reduce=1)  # type: ignore[arg-type]
    assert settle_release(noisy, (1, 28, 28)).postprocess == "blur:2,clip"  # 0.128 per pixel
    pooled = LabelOptions(private_dir=".", teacher="t", epsilon=2.0, epsilon_unit="element")  # type: ignore[arg-type]
    assert settle_release(pooled, (1, 28, 28)).postprocess == "blur:2,clip"
    record = LabelOptions(private_dir=".", teacher="t")  # type: ignore[arg-type]
    assert settle_release(record, (1, 28, 28)).postprocess == "clip"  # dct


def test_the_student_and_the_training_shift_follow_the_image_shape() -> None:
    # with public images: the residual student for colour images of 16 px and more, every row shifted by 1/8
    assert (
        defaults.student((3, 32, 32), True) == "small_resnet" and defaults.student((4, 16, 20), True) == "small_resnet"
    )
    assert defaults.student((1, 28, 28), True) == "small_cnn"  # grey
    assert defaults.student((3, 8, 8), True) == "small_cnn" and defaults.student((3, 15, 64), True) == "small_cnn"
    assert [defaults.train_crop(s, True) for s in (8, 15, 16, 28, 32, 224)] == [0, 0, 2, 3, 4, 28]
    # without them (noised queries alone): no shift whatever the shape; the pooled CNN for grey images of 24 px
    # and more, the small CNN for colour and small ones and in data-free runs
    assert {defaults.student(s, False) for s in ((3, 32, 32), (1, 23, 64), (3, 224, 224))} == {"small_cnn"}
    assert {defaults.student(s, False) for s in ((1, 24, 24), (1, 28, 28), (1, 64, 48))} == {"pooled_cnn"}
    assert defaults.student((1, 28, 28), False, data_free=True) == "small_cnn"
    assert {defaults.train_crop(s, False) for s in (8, 28, 32, 224)} == {0}


#: The label options that stand for a transfer setting with bounds, by the setting's name.
OPTION_FOR_SETTING = {setting: (option, field) for option, setting, field in COUNT_OPTIONS}


@pytest.mark.parametrize("setting", sorted(BOUNDS))
def test_a_count_has_one_range_for_the_library_and_the_command_line(setting: str) -> None:
    assert set(OPTION_FOR_SETTING) == set(BOUNDS) - {"public_repeats", "crop"}  # those two have no option
    assert [OPTION_FOR_SETTING[s][0] for s in ("num_queries", "epochs", "batch_size")] == [
        "--queries", "--epochs", "--train-batch-size"]
    least, most = BOUNDS[setting]
    owner = PlanSettings if setting in {f.name for f in dataclasses.fields(PlanSettings)} else TrainingSettings
    outside = [least - 1] + ([most + 1] if most is not None else [])
    for value in outside:
        with pytest.raises(ValueError, match=f"^{setting} must be"):
            owner(**{setting: value})
        if setting in OPTION_FOR_SETTING:
            option, field = OPTION_FOR_SETTING[setting]
            with pytest.raises(ValueError, match=f"^{option} must be"):
                LabelOptions(private_dir=".", teacher="t", **{field: value}).validate()  # type: ignore[arg-type]
    for value in [least] + ([most] if most is not None else []):
        owner(**{setting: value})
        if setting in OPTION_FOR_SETTING:
            option, field = OPTION_FOR_SETTING[setting]
            LabelOptions(private_dir=".", teacher="t", **{field: value}).validate()  # type: ignore[arg-type]
