"""Release bases (``--basis``): the DCT release's transform, clipping, exact sensitivity and guarantee.

The record-level release keeps K low-frequency orthonormal DCT coefficients, clips the vector to a norm
ball of radius C (L1 for Laplace, L2 for Gaussian) and calibrates the noise to the replacement
sensitivity 2C. These tests check each step on its own and the whole through the public mechanisms.
"""

from __future__ import annotations

import math

import pytest
import torch

from ldpclient.privacy import Domain, gaussian, laplace
from ldpclient.privacy.basis import (
    dct_layout,
    dct_matrix,
    default_clip_norm,
    default_coefficients,
    snap_into_ball,
    zigzag,
)
from ldpclient.privacy.mechanisms import make_mechanism

UNIT = Domain(0.0, 1.0)


def test_dct_matrix_is_orthonormal() -> None:
    for n in (1, 7, 28):
        d = dct_matrix(n)
        assert torch.allclose(d @ d.T, torch.eye(n, dtype=torch.float64), atol=1e-12)


def test_zigzag_takes_the_lowest_frequencies_first() -> None:
    assert zigzag(4, 4, 6).tolist() == [0, 1, 4, 2, 5, 8]  # (0,0) (0,1) (1,0) (0,2) (1,1) (2,0)


def test_all_coefficients_rebuild_the_record_exactly() -> None:
    layout = dct_layout((1, 6, 5), UNIT, "l2", 30, 1e9)
    x = torch.rand(3, 1, 6, 5, dtype=torch.float64)
    assert torch.allclose(layout.inverse(layout.forward(x)), x, atol=1e-12)


def test_colour_keeps_luminance_and_a_quarter_per_chroma_axis() -> None:
    layout = dct_layout((3, 8, 8), UNIT, "l2", 16, None)
    assert [int(k.numel()) for k in layout.kept] == [16, 4, 4]
    assert layout.coefficients == 24
    c = torch.randn(2, 24, dtype=torch.float64)
    assert torch.allclose(layout.forward(layout.inverse(c)), c, atol=1e-12)  # the inverse stays in the span
    grey = torch.full((1, 3, 8, 8), 0.5, dtype=torch.float64)  # equal RGB: all energy on the luminance axis
    assert torch.allclose(layout.forward(grey)[0, 16:], torch.zeros(8, dtype=torch.float64), atol=1e-12)


def test_defaults_follow_the_record_shape_only() -> None:
    assert default_coefficients((1, 28, 28)) == 64
    assert default_coefficients((3, 32, 32)) == 64
    assert default_coefficients((8, 8)) == 64
    assert default_coefficients((1, 16, 16)) == 64
    assert default_coefficients((1, 224, 224)) == 64
    assert default_coefficients((1, 5, 5)) == 25
    assert default_clip_norm((1, 28, 28), UNIT, "l2", 64) == pytest.approx(8.0)
    assert default_clip_norm((1, 28, 28), UNIT, "l1", 64) == pytest.approx(32.0)
    assert default_clip_norm((1, 28, 28), Domain(-1.0, 1.0), "l2", 25) == pytest.approx(16.0)
    assert default_clip_norm((3, 28, 28), UNIT, "l2", 96) == pytest.approx(8.0 * math.sqrt(3))


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_clip_leaves_short_vectors_and_shortens_long_ones_to_the_bound(norm: str) -> None:
    layout = dct_layout((1, 8, 8), UNIT, norm, 10, 2.0)
    c = torch.randn(50, 10, dtype=torch.float64) * torch.logspace(-2, 1, 50, dtype=torch.float64).unsqueeze(1)
    clipped, over = layout.clip(c)
    order = 1 if norm == "l1" else 2
    before = torch.linalg.vector_norm(c, ord=order, dim=1)
    after = torch.linalg.vector_norm(clipped, ord=order, dim=1)
    assert torch.equal(over, before > 2.0)
    assert torch.allclose(after[over], torch.full_like(after[over], 2.0))
    assert torch.equal(clipped[~over], c[~over])
    assert 0 < int(over.sum()) < 50  # both branches ran


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_snapped_vectors_stay_in_the_ball_in_integer_arithmetic(norm: str) -> None:
    radius_units = 512
    gamma = 3.0 / radius_units  # a ball of radius 3
    layout = dct_layout((1, 8, 8), UNIT, norm, 16, 3.0)
    g = torch.Generator().manual_seed(0)
    c, _ = layout.clip(torch.randn(2000, 16, generator=g, dtype=torch.float64) * 10)  # all on the boundary
    j = snap_into_ball(c, gamma, radius_units, norm)
    if norm == "l1":
        assert int(j.abs().sum(dim=1).max()) <= radius_units
    else:
        assert int((j * j).sum(dim=1).max()) <= radius_units**2
    assert float((c - j * gamma).abs().max()) < gamma  # truncation moves each coefficient by under one step
    assert bool(((j * gamma).abs() <= c.abs() + 1e-15).all())  # toward zero


def test_a_row_pushed_out_by_rounding_is_brought_back() -> None:
    gamma = 1.0
    c = torch.tensor([[2.0 + 1e-12, 1.0]], dtype=torch.float64)  # L1 3 + 1e-12 with a radius of 3 units
    j = snap_into_ball(c, gamma, 3, "l1")
    assert int(j.abs().sum()) <= 3


@pytest.mark.parametrize("secure", [True, False])
def test_laplace_dct_guarantee_is_the_record_level_epsilon(secure: bool) -> None:
    mech = laplace(30.0, per="record", basis="dct", secure=secure)
    g = mech.guarantee((1, 28, 28))
    assert g.epsilon_record == 30.0 and g.delta_record == 0.0
    assert g.epsilon_element == g.epsilon_record  # one coefficient may carry the whole sensitivity
    assert g.elements_per_record == 64
    assert g.params["basis"] == "dct" and g.params["clip_norm_kind"] == "L1"
    assert g.params["sensitivity"] == pytest.approx(64.0)
    assert g.params["b"] == pytest.approx(64.0 / 30.0, rel=1e-6 if not secure else 2e-3)
    if secure:
        assert g.params["epsilon_record_bound"] <= 30.0  # the realised bound, rounding included, is below the claim


@pytest.mark.parametrize("secure", [True, False])
def test_gaussian_dct_guarantee_is_calibrated_to_twice_the_clip(secure: bool) -> None:
    from ldpclient.privacy import analytic_gaussian as ag

    mech = gaussian(30.0, 1e-5, per="record", basis="dct", coefficients=16, clip_norm=2.0, secure=secure)
    g = mech.guarantee((1, 16, 16))
    assert (g.epsilon_record, g.delta_record, g.elements_per_record) == (30.0, 1e-5, 16)
    assert g.params["clip_norm_kind"] == "L2" and g.params["sensitivity"] == 4.0
    ideal = ag.calibrate_sigma(30.0, 1e-5, 4.0)
    if secure:  # the discrete Gaussian's zCDP conversion is looser than the analytic calibration: more noise
        assert ideal <= g.params["sigma"] < 2.0 * ideal
        assert g.params["epsilon_record_bound"] <= 30.0 and g.params["delta_record_bound"] <= 1e-5
    else:
        assert g.params["sigma"] == pytest.approx(ideal)


@pytest.mark.parametrize("name", ["laplace", "gaussian"])
@pytest.mark.parametrize("secure", [True, False])
def test_noise_on_the_coefficients_has_the_stated_scale(name: str, secure: bool) -> None:
    mech = make_mechanism(name, epsilon=20.0, per="record", basis="dct", coefficients=9, clip_norm=1.0,
                          secure=secure)
    blank = torch.zeros(4000, 1, 12, 12)  # coefficients 0: the release is pure noise
    rel = mech.release(blank, generator=torch.Generator().manual_seed(1))
    assert rel.released_shape == (9,) and rel.reduction == 1  # the noised coefficients
    layout = dct_layout((1, 12, 12), UNIT, mech.coefficient_norm, 9, 1.0)
    rebuilt = rel.upsampled().values  # post-processing: the inverse transform, at the record's shape
    assert rebuilt.shape == (4000, 1, 12, 12)
    assert torch.allclose(layout.forward(rebuilt.double()).float(), rel.values, atol=1e-5)
    noise = rel.values.double()
    p = rel.guarantee.params
    if name == "laplace":
        assert float(noise.abs().mean()) == pytest.approx(p["b"], rel=0.05)  # E|Laplace(b)| = b
    else:
        assert float(noise.std()) == pytest.approx(p["sigma"], rel=0.05)


def test_rand_layer_noise_is_drawn_on_the_coefficients() -> None:
    mech = laplace(20.0, per="record", basis="dct", coefficients=9, clip_norm=1.0)
    extra = mech.noise((500, 1, 12, 12), generator=torch.Generator().manual_seed(2))
    layout = dct_layout((1, 12, 12), UNIT, "l1", 9, 1.0)
    coef = layout.forward(extra.double())
    assert extra.shape == (500, 1, 12, 12)
    assert torch.allclose(layout.inverse(coef, origin=False).float(), extra, atol=1e-5)
    assert float(coef.abs().mean()) == pytest.approx(mech.guarantee((1, 12, 12)).params["b"], rel=0.1)


def test_records_far_apart_release_distributions_the_guarantee_can_bound() -> None:
    """Two records at opposite corners of the domain: their clipped, snapped vectors differ by at most the
    grid sensitivity, so the Laplace privacy loss of any output is at most the stated epsilon."""
    mech = laplace(10.0, per="record", basis="dct", coefficients=9, clip_norm=1.5)
    plan = mech._plan((1, 12, 12))
    layout, grid = plan.values.coefficient_layout, plan.values.secure_grid
    a, b = torch.zeros(1, 1, 12, 12, dtype=torch.float64), torch.ones(1, 1, 12, 12, dtype=torch.float64)
    b[..., ::2, :] = 0.0  # stripes: energy outside the DC too
    ja = snap_into_ball(layout.clip(layout.forward(a))[0], grid.gamma, grid.units // 2, "l1")
    jb = snap_into_ball(layout.clip(layout.forward(b))[0], grid.gamma, grid.units // 2, "l1")
    loss = float((ja - jb).abs().sum()) / grid.sampler.scale  # ln P(y|a)/P(y|b) <= ||ja - jb||_1 / scale
    assert loss <= 10.0


def test_colour_release_holds_the_sum_of_channel_coefficients_and_rebuilds_the_record_shape() -> None:
    mech = gaussian(50.0, per="record", basis="dct")
    rel = mech.release(torch.rand(3, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    assert rel.released_shape == (64 + 16 + 16,) == (rel.guarantee.elements_per_record,)
    assert rel.upsampled().values.shape == (3, 3, 32, 32)
    assert rel[1:].upsampled().values.shape == (2, 3, 32, 32)  # a sub-batch keeps its basis


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": "tldp-laplace", "epsilon": 2.0, "basis": "dct"}, "unexpected keyword argument .basis."),
        ({"name": "laplace", "epsilon": 2.0, "per": "record", "basis": "dct", "reduction": 2}, "reduction 1"),
        ({"name": "laplace", "epsilon": 2.0, "per": "element", "basis": "dct"}, "per record"),
        ({"name": "laplace", "epsilon": 2.0, "per": "element", "coefficients": 5}, "basis dct and pca only"),
        ({"name": "gaussian", "epsilon": 2.0, "per": "element", "clip_norm": 1.0}, "basis dct and pca only"),
        ({"name": "laplace", "epsilon": 2.0, "per": "record", "basis": "wavelet"}, "basis must be one of"),
        ({"name": "laplace", "epsilon": 2.0, "per": "record", "basis": "dct", "clip_norm": -1.0}, "clip_norm"),
        ({"name": "laplace", "epsilon": 2.0, "per": "record", "basis": "dct", "coefficients": 0}, "coefficients"),
    ],
)
def test_bad_basis_options_are_refused_before_any_noise(kwargs: dict, needle: str) -> None:
    kwargs = dict(kwargs)
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=needle):
        make_mechanism(name, **kwargs)


def test_more_coefficients_than_the_image_has_is_refused_with_the_shape() -> None:
    mech = laplace(2.0, per="record", basis="dct", coefficients=100)
    with pytest.raises(ValueError, match="8x8 channel has only 64"):
        mech.guarantee((1, 8, 8))


def test_pooled_config_keeps_its_keys_so_stored_releases_still_match() -> None:
    assert "basis" not in laplace(2.0, per="element").config()
    cfg = laplace(2.0, per="record", basis="dct", coefficients=9).config()
    assert (cfg["basis"], cfg["coefficients"], cfg["clip_norm"]) == ("dct", 9, None)


def test_public_input_reads_epsilon_0_with_the_same_noise() -> None:
    mech = laplace(5.0, per="record", basis="dct")
    rel = mech.release(torch.zeros(2, 1, 28, 28), public=True)
    assert rel.guarantee.epsilon_record == 0.0
    assert math.isfinite(float(rel.values.abs().max()))


# -- through the CLI, against the real mock teacher -------------------------------------------------------


def _private_folder(root):
    from support.image_folders import random_png_folder

    return random_png_folder(root / "private", seed=0)


@pytest.mark.parametrize("augment", ["sup", "rand"])
def test_label_with_basis_dct_sends_only_what_the_kept_coefficients_span(tmp_path, augment: str) -> None:
    """On the wire: with no post-processing, every query (a Sup average of two reconstructions, or a
    reconstruction plus Rand's second layer drawn on the coefficients) is rebuilt exactly from its 6 kept
    coefficients, so the teacher sees 6 numbers per record, not 64 pixels."""
    import json

    import numpy as np
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app
    from ldpclient.io.querylog import read_query_log

    log = tmp_path / "log.jsonl"
    with mock_server.serve(model="trivial", image_size=8, query_log=str(log), max_batch_size=64) as srv:
        result = CliRunner().invoke(app, [
            "label", str(_private_folder(tmp_path)), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"),
            "--output", str(tmp_path / "labels.csv"), "--queries", "24", "--batch-size", "8", "--epochs", "1",
            "--seed", "3", "--max-retry-time", "0", "--epsilon", "30", "--basis", "dct", "--coefficients", "6",
            "--postprocess", "", "--augment", augment, "--json",
        ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["mechanism"]["config"]["basis"] == "dct"
    assert report["mechanism"]["reduce"] == 1
    g = report["guarantee"]
    assert g["per_record"]["epsilon"] == 30.0 and g["elements_per_record"] == 6
    assert g["params"]["clip_norm_kind"] == "L1"
    sent = torch.from_numpy(np.concatenate([arr for _, arr in read_query_log(str(log))])).double()
    assert len(sent) == 24
    layout = dct_layout((1, 8, 8), UNIT, "l1", 6, None)
    # the client clips queries to the teacher's value range before sending: check the rows it left alone
    unclipped = ((sent > 0) & (sent < 1)).flatten(1).all(dim=1)
    assert int(unclipped.sum()) >= 12
    inside = sent[unclipped]
    assert torch.allclose(layout.inverse(layout.forward(inside)), inside, atol=1e-4)
    wider = dct_layout((1, 8, 8), UNIT, "l1", 7, None)  # the check can fail: the 7th coefficient is never sent
    assert float(wider.forward(inside)[:, 6].abs().max()) < 1e-4
    assert float(layout.forward(inside)[:, 1:].abs().max()) > 1e-2


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--basis", "dct", "--mechanism", "tldp-laplace"], "--basis dct takes --mechanism laplace, gaussian or "
                                                            "quantised-rr"),
        (["--basis", "dct", "--reduce", "2"], "give --reduce 1"),
        (["--basis", "dct", "--epsilon-unit", "element"], "give --epsilon-unit record"),
        (["--basis", "pool", "--coefficients", "4"], "apply to --basis dct and pca only"),
        (["--basis", "dct", "--clip-norm", "0"], "--clip-norm must be a finite number > 0"),
        (["--basis", "dct", "--coefficients", "65"], "8x8 channel has only 64"),
    ],
)
def test_noise_command_refuses_bad_basis_options_in_one_line(tmp_path, extra: list[str], needle: str) -> None:
    from typer.testing import CliRunner

    from ldpclient.cli.commands import app

    result = CliRunner().invoke(app, ["noise", str(_private_folder(tmp_path)), "--out", str(tmp_path / "out"),
                                      "--size", "8", "--state-dir", str(tmp_path / "s"), *extra])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing noised


def test_noise_command_with_basis_dct_states_the_coefficients(tmp_path) -> None:
    from typer.testing import CliRunner

    from ldpclient.cli.commands import app

    result = CliRunner().invoke(app, ["noise", str(_private_folder(tmp_path)), "--out", str(tmp_path / "out"),
                                      "--size", "8", "--state-dir", str(tmp_path / "s"), "--basis", "dct",
                                      "--mechanism", "gaussian", "--epsilon", "40", "--coefficients", "5"])
    assert result.exit_code == 0, result.output
    assert "5 low-frequency DCT coefficients clipped to L2 norm" in result.output
    assert (tmp_path / "out" / "preview.png").is_file()


def test_audit_simulates_the_dct_release_it_is_told_of(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from ldpclient.cli.commands import app

    result = CliRunner().invoke(app, [
        "audit", "--private", str(_private_folder(tmp_path)), "--size", "8", "--sweep", "40", "--epsilon-unit",
        "record", "--basis", "dct", "--coefficients", "5", "--cnn-steps", "0", "--no-empirical", "--no-rme",
        "--max-queries", "8", "--out", str(tmp_path / "a"), "--json",
    ])
    assert result.exit_code == 0, result.output
    g = json.loads(result.stdout)["sweep"][0]["guarantee"]
    assert (g["params"]["basis"], g["elements_per_record"], g["per_record"]["epsilon"]) == ("dct", 5, 40.0)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "dct"),  # laplace, 100 per record, no --reduce
        ({"mechanism": "gaussian"}, "dct"),
        ({"reduce": 4}, "pool"),  # an explicit pooling factor asks for pixels
        ({"reduce": 1}, "pool"),
        ({"epsilon_unit": "element"}, "pool"),
        ({"mechanism": "tldp-laplace"}, "pool"),
        ({"epsilon": 0.0}, "pool"),  # data-free: blank queries noised as the study measured them
        ({"coefficients": 16}, "dct"),  # a dct parameter asks for dct
        ({"basis": "pool"}, "pool"),
        ({"basis": "dct", "reduce": 4}, "dct"),  # given: kept (and refused later, in one line)
    ],
)
def test_the_default_basis_follows_the_options(tmp_path, options: dict, expected: str) -> None:
    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import resolve_basis, settle_release

    opts = LabelOptions(private_dir=tmp_path, teacher="http://127.0.0.1:1/v2/models/m", **options)
    assert resolve_basis(opts) == expected
    resolved = settle_release(opts, (1, 28, 28))
    assert resolved.basis == expected
    if expected == "dct" and "reduce" not in options:
        assert (resolved.reduce, resolved.postprocess) == (1, "clip")


def test_a_dct_runs_baseline_pools_its_blank_queries_as_measured(tmp_path) -> None:
    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import build_free_query_mechanism, free_query_shape_settings, settle_release

    opts = LabelOptions(private_dir=tmp_path, teacher="http://127.0.0.1:1/v2/models/m", baseline=True)
    release = settle_release(opts, (1, 28, 28))
    assert release.basis == "dct"
    free = build_free_query_mechanism(opts, release, (0.0, 1.0), (1, 28, 28))
    assert free.basis == "pool" and free.reduction == 4
    assert free_query_shape_settings(release, (1, 28, 28)) == (4, "blur:2,clip")
    pooled = LabelOptions(private_dir=tmp_path, teacher="x", reduce=2, postprocess="clip")
    assert free_query_shape_settings(settle_release(pooled, (1, 28, 28)), (1, 28, 28)) == (2, "clip")  # its own


def test_the_ledger_stores_the_coefficients_and_returns_releases_that_rebuild(tmp_path) -> None:
    from ldpclient.privacy import Ledger

    mech = laplace(20.0, per="record", basis="dct", coefficients=9)
    records = torch.rand(5, 1, 12, 12)
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        first = ledger.release(mech, records, generator=torch.Generator().manual_seed(0))
        again = ledger.release(mech, records)
    assert first.released_shape == again.released_shape == (9,)
    assert bool(again.reused.all()) and torch.equal(first.values, again.values)  # stored, not noised again
    assert torch.equal(first.upsampled().values, again.upsampled().values)


def test_the_band_transform_equals_the_full_one_at_a_large_size() -> None:
    """Only the lowest frequencies are computed (cheap at 224x224); they must be the full transform's."""
    from ldpclient.privacy.basis import _OPPONENT

    layout = dct_layout((3, 40, 36), UNIT, "l1", 64, None)
    x = torch.rand(3, 3, 40, 36, dtype=torch.float64)
    y = torch.einsum("oc,nchw->nohw", _OPPONENT, x)
    full = (dct_matrix(40) @ y @ dct_matrix(36).T).reshape(3, 3, 40 * 36)
    reference = torch.cat([full[:, ch, idx] for ch, idx in enumerate(layout.kept)], dim=1)
    assert torch.allclose(layout.forward(x), reference, atol=1e-12)
    spread = torch.zeros(3, 3, 40 * 36, dtype=torch.float64)
    for ch, idx in enumerate(layout.kept):
        spread[:, ch, idx] = full[:, ch, idx]
    rebuilt = torch.einsum("oc,nohw->nchw", _OPPONENT, dct_matrix(40).T @ spread.reshape(3, 3, 40, 36) @ dct_matrix(36))
    assert torch.allclose(layout.inverse(layout.forward(x)), rebuilt, atol=1e-12)
