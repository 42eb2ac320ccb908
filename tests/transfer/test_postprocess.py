"""Post-processing transforms: free, dataset-independent, Release/Derived only."""

import pytest
import torch

from ldpclient.privacy import Derived, Domain, laplace
from ldpclient.transfer.postprocess import (
    ClipToDomain,
    DctLowpass,
    GaussianBlur,
    MedianFilter,
    Transform,
    apply_all,
    parse_postprocess,
)


def _release(n=16, size=12, eps=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return laplace(eps, per="element").release(torch.full((n, 1, size, size), 0.5), generator=g)


def test_clip_uses_release_domain_and_keeps_guarantee():
    rel = _release()
    out = ClipToDomain()(rel)
    assert isinstance(out, Derived)
    assert out.values.min() >= 0 and out.values.max() <= 1
    assert out.guarantee == rel.guarantee
    assert out.steps == ("clip",)
    narrow = ClipToDomain(Domain(0.2, 0.8))(rel)
    assert narrow.values.min() >= 0.2 and narrow.values.max() <= 0.8


def test_blur_preserves_constants_and_reduces_noise():
    rel = _release(eps=1.0)
    noisy = rel.values
    out = GaussianBlur(1.5)(rel).values
    assert out.shape == noisy.shape
    assert (out - 0.5).std() < 0.5 * (noisy - 0.5).std()
    # a constant image is a fixed point (normalised kernel, reflect padding)
    const = laplace(1e9, secure=False, per="element").release(
        torch.full((2, 1, 9, 9), 0.3), generator=torch.Generator().manual_seed(0)
    )
    assert torch.allclose(GaussianBlur(2.0)(const).values, const.values, atol=1e-5)


def test_median_removes_impulses():
    rel = _release(eps=1.0)
    med = MedianFilter(3)(rel).values
    assert med.shape == rel.values.shape
    assert (med - 0.5).abs().mean() < (rel.values - 0.5).abs().mean()


def test_lowpass_is_the_orthogonal_projection_onto_the_lowest_dct_band():
    from ldpclient.privacy.basis import dct_matrix, zigzag

    rel = _release(n=4, size=12, eps=1.0)
    out = DctLowpass(20)(rel).values
    assert out.shape == rel.values.shape and out.dtype == rel.values.dtype
    assert DctLowpass(20)(DctLowpass(20)(rel)).values.sub(out).abs().max() < 1e-5  # idempotent
    # the same as zeroing every coefficient outside the 20 lowest of a full 2-D DCT, per channel
    d = dct_matrix(12)
    full = d @ rel.values.double() @ d.T
    keep = torch.zeros(144, dtype=torch.float64)
    keep[zigzag(12, 12, 20)] = 1
    expected = d.T @ (full * keep.view(12, 12)) @ d
    assert torch.allclose(out.double(), expected, atol=1e-5)
    # white noise keeps 20/144 of its energy; a constant image is a fixed point; all coefficients: identity
    assert (out - 0.5).pow(2).sum() < 0.25 * (rel.values - 0.5).pow(2).sum()
    const = torch.full((1, 3, 9, 7), 0.3)
    assert torch.allclose(DctLowpass(1).apply(const, None), const, atol=1e-6)  # type: ignore[arg-type]
    x = torch.rand(2, 3, 9, 7)
    assert torch.allclose(DctLowpass(63).apply(x, None), x, atol=1e-6)  # type: ignore[arg-type]
    assert torch.allclose(DctLowpass(1000).apply(x, None), x, atol=1e-6)  # type: ignore[arg-type]
    assert out.sub(rel.values).abs().max() > 0.1
    assert apply_all(rel, [DctLowpass(20), ClipToDomain()]).steps == ("lowpass(20)", "clip")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="lowpass"):
            DctLowpass(bad)  # type: ignore[arg-type]


def test_raw_tensor_rejected():
    for t in (ClipToDomain(), GaussianBlur(1.0), MedianFilter(3), DctLowpass(4)):
        with pytest.raises(TypeError):
            t(torch.rand(2, 1, 8, 8))
    with pytest.raises(TypeError):
        apply_all(torch.rand(2, 1, 8, 8), [])


def test_apply_all_order_and_steps():
    rel = _release()
    out = apply_all(rel, [GaussianBlur(1.0), ClipToDomain()])
    assert out.steps == ("blur(sigma=1)", "clip")
    assert out.guarantee == rel.guarantee


def test_parse_spec():
    ts = parse_postprocess("clip, blur:1.5 ,median:5,lowpass:30")
    assert [type(t) for t in ts] == [ClipToDomain, GaussianBlur, MedianFilter, DctLowpass]
    assert ts[1].sigma == 1.5 and ts[2].size == 5 and ts[3].coefficients == 30
    assert parse_postprocess("") == [] and parse_postprocess(None) == []
    for bad in ("sharpen", "blur:x", "median:4", "blur:-1", "clip:3", "lowpass:0", "lowpass:2.5"):
        with pytest.raises(ValueError, match="post-processing"):
            parse_postprocess(bad)


def test_every_registered_step_parses_and_the_message_lists_them_all():
    from ldpclient.transfer.postprocess import STEPS

    for name, step in STEPS.items():
        assert isinstance(parse_postprocess(name)[0], Transform) and name in step.usage
    with pytest.raises(ValueError) as err:
        parse_postprocess("sharpen")
    for step in STEPS.values():
        assert step.usage in str(err.value)
