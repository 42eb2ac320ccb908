"""Post-processing transforms: free, dataset-independent, Release/Derived only."""

import pytest
import torch

from ldpclient.privacy import Derived, Domain, laplace
from ldpclient.transfer.postprocess import (
    ClipToDomain,
    GaussianBlur,
    MedianFilter,
    Transform,
    apply_all,
    parse_postprocess,
)


def _release(n=16, size=12, eps=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return laplace(eps).release(torch.full((n, 1, size, size), 0.5), generator=g)


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
    const = laplace(1e9, secure=False).release(torch.full((2, 1, 9, 9), 0.3), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(GaussianBlur(2.0)(const).values, const.values, atol=1e-5)


def test_median_removes_impulses():
    rel = _release(eps=1.0)
    med = MedianFilter(3)(rel).values
    assert med.shape == rel.values.shape
    assert (med - 0.5).abs().mean() < (rel.values - 0.5).abs().mean()


def test_raw_tensor_rejected():
    for t in (ClipToDomain(), GaussianBlur(1.0), MedianFilter(3)):
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
    ts = parse_postprocess("clip, blur:1.5 ,median:5")
    assert [type(t) for t in ts] == [ClipToDomain, GaussianBlur, MedianFilter]
    assert ts[1].sigma == 1.5 and ts[2].size == 5
    assert parse_postprocess("") == [] and parse_postprocess(None) == []
    for bad in ("sharpen", "blur:x", "median:4", "blur:-1", "clip:3"):
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
