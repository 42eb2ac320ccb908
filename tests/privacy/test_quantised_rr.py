"""Randomized response on a quantised code (``quantised-rr``): the code, the exact guarantee, the sampler's law,
the audit, and the command line."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest
import torch

from ldpclient.audit.empirical_epsilon import audit_mechanism
from ldpclient.privacy import Domain, make_mechanism
from ldpclient.privacy.basis import dct_layout
from ldpclient.privacy.mechanisms.quantised_rr import realised_epsilon, resample_units, truth_probability
from ldpclient.privacy.quantise import (
    MAX_BITS,
    CoefficientCode,
    allocate_bits,
    best_total_bits,
    code_for,
    model_spectrum,
)
from ldpclient.privacy.sampling import ONE

UNIT = Domain(0.0, 1.0)


def qrr(epsilon: float, **kwargs):
    return make_mechanism("quantised-rr", epsilon=epsilon, per="record", **kwargs)


def test_bits_go_where_the_model_distortion_is_largest() -> None:
    scale = torch.tensor([8.0, 4.0, 2.0, 1.0], dtype=torch.float64)
    assert allocate_bits(scale, 0).tolist() == [0, 0, 0, 0]
    assert allocate_bits(scale, 1).tolist() == [1, 0, 0, 0]
    assert allocate_bits(scale, 3).tolist() == [2, 1, 0, 0]  # 8/2 = 4 ties with 4: the lower index first
    bits = allocate_bits(scale, 10)
    assert int(bits.sum()) == 10 and bits.tolist() == sorted(bits.tolist(), reverse=True)
    assert allocate_bits(scale, 4 * MAX_BITS).tolist() == [MAX_BITS] * 4
    with pytest.raises(ValueError, match="total_bits"):
        allocate_bits(scale, 4 * MAX_BITS + 1)


def test_levels_are_equally_likely_under_the_model_and_read_back_inside_their_cell() -> None:
    mean = torch.tensor([1.0, 0.0, -2.0], dtype=torch.float64)
    scale = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64)
    code = CoefficientCode(mean, scale, torch.tensor([3, 1, 0]))
    g = torch.Generator().manual_seed(0)
    coef = mean + scale * torch.randn(200_000, 3, dtype=torch.float64, generator=g)
    levels = code.encode(coef)
    assert levels[:, 2].eq(0).all()  # no bits: one level, read back as the mean
    shares = torch.bincount(levels[:, 0], minlength=8).double() / len(levels)
    assert torch.allclose(shares, torch.full((8,), 1 / 8, dtype=torch.float64), atol=0.005)
    values = code.decode(levels)
    assert torch.allclose(values[:, 2], mean[2].expand(len(values)))
    assert torch.equal(code.encode(values), levels)  # a read-back value lies in its own cell
    # the read-back value is the model's mean within the cell: the error has (about) mean 0 per level
    err = (coef[:, 0] - values[:, 0])
    for j in range(8):
        assert abs(float(err[levels[:, 0] == j].mean())) < 0.02
    assert torch.equal(code.encode(torch.tensor([[1e9, -1e9, 0.0]], dtype=torch.float64)), torch.tensor([[7, 0, 0]]))


def test_the_code_length_follows_epsilon_and_keeps_the_true_code_most_of_the_time() -> None:
    previous, kept = 0, 0.5
    for eps in (5.0, 20.0, 50.0, 100.0, 300.0):
        b = best_total_bits(eps, 64 * MAX_BITS)
        assert previous < b < eps / math.log(2)  # grows with epsilon, always below eps / ln 2
        p = truth_probability(b, resample_units(eps, b))
        assert kept < p < 1.0  # 0.70 at 5 per record, 0.99 at 100
        previous, kept = b, p
    assert best_total_bits(100.0, 10) == 10  # capacity bounds it


@pytest.mark.parametrize("eps", [0.5, 3.0, 20.0, 100.0, 700.0])
@pytest.mark.parametrize("bits", [1, 7, 64, 400])
def test_the_sampler_never_realises_more_than_the_claim(eps: float, bits: int) -> None:
    units = resample_units(eps, bits)
    loss = realised_epsilon(bits, units)
    assert loss <= Decimal(eps)
    ideal = Decimal(2) ** bits / (Decimal(eps).exp() + Decimal(2) ** bits - 1)
    assert Decimal(units) / ONE >= ideal  # rounded towards more resampling
    if units < ONE and Decimal(eps) - loss > 0:  # ... by at most 2 units of 2**-62 in the share
        assert Decimal(units - 2) / ONE < ideal


def test_guarantee_is_pure_per_record_and_names_what_it_releases() -> None:
    m = qrr(50.0)
    g = m.guarantee((1, 28, 28))
    assert (g.epsilon_record, g.delta_record, g.elements_per_record) == (50.0, 0.0, 64)
    p = g.params
    assert p["epsilon_realised"] <= 50.0 and p["code_bits"] == best_total_bits(50.0, 64 * MAX_BITS)
    assert p["truth_probability"] == pytest.approx(math.exp(50) / (math.exp(50) + 2.0 ** p["code_bits"] - 1))
    assert p["sampling"].startswith("secure")
    text = " ".join(g.notes)
    assert "randomized response" in text and "as informative as its epsilon allows" in text
    config = m.config()
    json.dumps(config)
    assert config["name"] == "quantised-rr" and config["basis"] == "dct" and config["bits"] is None
    colour = qrr(100.0).guarantee((3, 32, 32))
    assert colour.elements_per_record == 96  # 64 luminance + 16 per chroma axis


def test_release_is_the_true_code_or_a_uniform_one_with_the_stated_probabilities() -> None:
    """8x8 records, 4 coefficients, a 4-bit code (16 codes), epsilon 2: P(true code) = e^2 / (e^2 + 15)."""
    m = qrr(2.0, coefficients=4, bits=4)
    plan = m._plan((1, 8, 8))
    code, layout = plan.values.code, plan.values.coefficient_layout
    records = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(1)).expand(60_000, 1, 8, 8)
    rel = m.release(records, generator=torch.Generator().manual_seed(2))
    assert rel.values.shape == (60_000, 4)
    got = code.encode(rel.values.double())
    truth = code.encode(layout.forward(records[:1]))
    index = torch.zeros(len(got), dtype=torch.int64)
    for j, b in enumerate(code.bits.tolist()):  # the code as one number
        index = (index << b) | got[:, j]
    true_index = int(sum(int(truth[0, j]) << sum(code.bits.tolist()[j + 1:]) for j in range(4)))
    counts = torch.bincount(index, minlength=16).double() / len(index)
    p = math.exp(2) / (math.exp(2) + 15)
    assert float(counts[true_index]) == pytest.approx(p, abs=0.01)
    others = torch.cat([counts[:true_index], counts[true_index + 1:]])
    assert torch.allclose(others, torch.full((15,), (1 - p) / 15, dtype=torch.float64), atol=0.005)


def test_the_empirical_epsilon_audit_passes_and_a_whole_code_event_comes_close_to_the_claim() -> None:
    m = qrr(3.0, coefficients=2, bits=2)
    res = audit_mechanism(m, (1, 4, 4), samples=100_000)
    assert not res["violated"], res
    # the whole code on two extreme records: P(code of x | x) / P(code of x | x') = e^eps exactly
    low, high = torch.zeros(40_000, 1, 4, 4), torch.ones(40_000, 1, 4, 4)
    a = m.release(low, generator=torch.Generator().manual_seed(3)).values
    b = m.release(high, generator=torch.Generator().manual_seed(4)).values
    plan = m._plan((1, 4, 4))
    code, layout = plan.values.code, plan.values.coefficient_layout
    target = code.decode(code.encode(layout.forward(low[:1])))[0].float()  # the true code of x, as released
    pa = float((a == target).all(1).double().mean())
    pb = float((b == target).all(1).double().mean())
    assert 2.6 < math.log(pa / pb) < 3.4


def test_a_colour_release_rebuilds_the_record_shape_and_beats_laplace_on_reconstruction_error() -> None:
    x = torch.rand(64, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    x = torch.nn.functional.avg_pool2d(x, 3, 1, 1)  # smooth: most energy in low frequencies
    rr = qrr(100.0).release(x, generator=torch.Generator().manual_seed(1))
    lap = make_mechanism("laplace", epsilon=100.0, per="record", basis="dct").release(
        x, generator=torch.Generator().manual_seed(1))
    up_rr, up_lap = rr.upsampled().values, lap.upsampled().values
    assert up_rr.shape == x.shape
    assert float(((up_rr.clamp(0, 1) - x) ** 2).mean()) < float(((up_lap.clamp(0, 1) - x) ** 2).mean())


def test_a_caller_spectrum_places_the_cells_and_changes_the_config() -> None:
    layout = dct_layout((1, 8, 8), UNIT, "l2", 4, None)
    mean, scale = model_spectrum(layout, UNIT)
    assert float(mean[0]) == pytest.approx(4.0) and float(scale[0]) == pytest.approx(2.0)  # DC of 8x8 on [0, 1]
    given = ([4.0, 0.0, 0.0, 0.0], [1.0, 3.0, 0.1, 0.1])
    m = qrr(10.0, coefficients=4, spectrum=given)
    assert m.guarantee((1, 8, 8)).params["spectrum"] == "given"
    assert m.config()["spectrum"] != qrr(10.0, coefficients=4, spectrum=([4.0, 0, 0, 0], [1.0, 1, 1, 1])).config()[
        "spectrum"]
    code = code_for(layout, UNIT, 8, (torch.tensor(given[0]).double(), torch.tensor(given[1]).double()))
    assert int(code.bits[1]) > int(code.bits[2])  # the larger given scale gets more bits
    with pytest.raises(ValueError, match="4 means and scales"):
        qrr(10.0, coefficients=4, spectrum=([0.0], [1.0])).guarantee((1, 8, 8))
    with pytest.raises(ValueError, match="scales finite and > 0"):
        qrr(10.0, coefficients=4, spectrum=([0.0] * 4, [1.0, 0.0, 1.0, 1.0])).guarantee((1, 8, 8))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"basis": "pool"}, "basis dct only"),
        ({"clip_norm": 3.0}, "clips no norm"),
        ({"bits": 0}, "bits must be None or a positive int"),
        ({"per": "element"}, "its epsilon is per record"),
        ({"reduction": 2}, "give reduction 1"),
    ],
)
def test_options_it_cannot_honour_are_refused(kwargs: dict, needle: str) -> None:
    options = {"per": "record", **kwargs}
    with pytest.raises(ValueError, match=needle):
        make_mechanism("quantised-rr", epsilon=10.0, **options)


def test_more_bits_than_the_coefficients_hold_is_refused_with_the_capacity() -> None:
    with pytest.raises(ValueError, match=f"more than 2 coefficients hold \\({2 * MAX_BITS}"):
        qrr(10.0, coefficients=2, bits=2 * MAX_BITS + 1).guarantee((1, 8, 8))


def test_rand_noise_has_the_quantisation_error_scale() -> None:
    m = qrr(30.0, coefficients=6)
    plan = m._plan((1, 8, 8))
    noise = m._noise((20_000, 6), plan, torch.Generator().manual_seed(0))
    assert torch.allclose(noise.std(0), plan.values.code.error_scale(), rtol=0.05)
    pixels = m.noise((5, 1, 8, 8), generator=torch.Generator().manual_seed(0))
    assert pixels.shape == (5, 1, 8, 8)


def test_label_sends_codes_of_the_kept_coefficients_and_its_baseline_noises_blanks_with_laplace(tmp_path) -> None:
    """Through the command line against the mock teacher: the report states the mechanism and its exact epsilon,
    every query the teacher got is rebuilt from the 6 kept coefficients (Sup averages of two code
    reconstructions), and the data-free baseline noises its blank queries with pooled Laplace."""
    import numpy as np
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app
    from ldpclient.io.querylog import read_query_log
    from support.image_folders import random_png_folder

    log = tmp_path / "log.jsonl"
    private = random_png_folder(tmp_path / "private", seed=0)
    with mock_server.serve(model="trivial", image_size=8, query_log=str(log), max_batch_size=64) as srv:
        result = CliRunner().invoke(app, [
            "label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"),
            "--output", str(tmp_path / "labels.csv"), "--queries", "24", "--batch-size", "8", "--epochs", "1",
            "--seed", "3", "--max-retry-time", "0", "--epsilon", "30", "--mechanism", "quantised-rr",
            "--coefficients", "6", "--postprocess", "", "--baseline", "--json",
        ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    g = report["guarantee"]
    assert g["mechanism"] == "quantised-rr" and g["per_record"] == {"epsilon": 30.0, "delta": 0.0}
    assert g["params"]["epsilon_realised"] <= 30.0 and g["elements_per_record"] == 6
    assert any("as informative as its epsilon allows" in n for n in g["notes"])
    assert report["baseline"]["blank_query_noise"]["name"] == "laplace"
    assert report["ledger"]["max_spent_epsilon"] == 30.0
    sent = torch.from_numpy(np.concatenate([arr for _, arr in read_query_log(str(log))])).double()
    private_queries = sent[:24]  # the private run's queries come first, then the baseline's blank ones
    layout = dct_layout((1, 8, 8), UNIT, "l2", 6, None)
    unclipped = ((private_queries > 0) & (private_queries < 1)).flatten(1).all(dim=1)
    inside = private_queries[unclipped]
    assert len(inside) >= 6
    assert torch.allclose(layout.inverse(layout.forward(inside)), inside, atol=1e-4)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--reduce", "2"], "releases DCT coefficients only (--basis dct): give --epsilon-unit record and no --reduce"),
        (["--basis", "pool"], "releases DCT coefficients only"),
        (["--epsilon-unit", "element"], "releases DCT coefficients only"),
        (["--clip-norm", "3"], "clips no norm"),
    ],
)
def test_the_noise_command_refuses_what_it_cannot_honour_in_one_line(tmp_path, extra: list[str], needle: str) -> None:
    from typer.testing import CliRunner

    from ldpclient.cli.commands import app
    from support.image_folders import random_png_folder

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["noise", str(random_png_folder(tmp_path / "private", seed=0)), "--out",
                                      str(out), "--size", "8", "--state-dir", str(tmp_path / "s"),
                                      "--mechanism", "quantised-rr", *extra])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output
    assert not out.exists() or not any(out.iterdir())


def test_the_dry_run_says_what_the_release_passes_on_before_anything_is_sent(tmp_path) -> None:
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app
    from support.image_folders import random_png_folder

    private = random_png_folder(tmp_path / "private", seed=0)
    with mock_server.serve(model="trivial", image_size=8, max_batch_size=64) as srv:
        result = CliRunner().invoke(app, [
            "label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"),
            "--mechanism", "quantised-rr", "--epsilon", "100", "--dry-run", "--json",
        ])
        text = CliRunner().invoke(app, [
            "label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"),
            "--mechanism", "quantised-rr", "--epsilon", "100", "--dry-run",
        ], terminal_width=400)
    assert result.exit_code == 0, result.output
    note = json.loads(result.stdout)["plan"]["release"]["note"]
    assert note.startswith("this release is as informative as its epsilon allows") and "% of releases" in note
    assert "as informative as its epsilon allows" in " ".join(text.output.split())
    assert not (tmp_path / "s").exists()  # nothing charged
