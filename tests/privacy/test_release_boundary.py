"""The Release/Derived type boundary keeps raw tensors out of downstream stages."""

import pytest
import torch

from ldpclient.privacy import Derived, Domain, Guarantee, Release
from ldpclient.privacy.release import as_derived


def test_release_cannot_be_built_from_a_raw_tensor():
    g = Guarantee("laplace", 1.0, 0.0, 4.0, 0.0, 4, Domain())
    with pytest.raises(TypeError, match="produced by ldpclient.privacy"):
        Release(torch.zeros(1, 1, 2, 2), g, (1, 2, 2))


def test_derived_needs_a_release_origin():
    with pytest.raises(TypeError, match="Release or Derived"):
        Derived.combine(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 1, dtype=torch.long), "x")
    with pytest.raises(TypeError, match="raw tensors must go through"):
        as_derived(torch.zeros(2, 4))


def test_derived_cannot_be_built_from_a_raw_tensor():
    """Derived(raw_tensor, ...) is refused: no raw tensor passes as_derived to reach a teacher."""
    g = Guarantee("laplace", 1.0, 0.0, 4.0, 0.0, 4, Domain())
    with pytest.raises(TypeError, match="come only from releases"):
        Derived(torch.zeros(2, 1, 2, 2), torch.zeros(2, 1, dtype=torch.long), g)


def test_guarantee_validates_and_public_input_costs_nothing():
    with pytest.raises(ValueError, match="delta_record"):
        Guarantee("x", 1.0, 0.0, 1.0, 1.5, 1, Domain())
    with pytest.raises(ValueError, match="high must exceed low"):
        Domain(1.0, 0.0)
    g = Guarantee("laplace", 1.0, 0.0, 784.0, 0.0, 784, Domain()).for_public_input()
    assert g.epsilon_record == 0.0 and g.public_input


def test_map_refuses_a_function_that_returns_a_raw_tensor():
    """Derived.from_release(rel).map(lambda v: raw) is refused: it would hand the raw tensor to a teacher."""
    from ldpclient.privacy import laplace

    raw = torch.rand(4, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    rel = laplace(2.0, per="record").release(raw, generator=torch.Generator().manual_seed(1))
    with pytest.raises(TypeError, match="not a row-wise function"):
        Derived.from_release(rel).map(lambda v: raw, "sneak")
    with pytest.raises(TypeError, match="not a row-wise function"):
        Derived.from_release(rel).map(lambda v: raw[: len(v)], "sneak a slice")
    with pytest.raises(TypeError, match="not a row-wise function"):
        Derived.from_release(rel).map(lambda v: v + raw[: len(v)], "add raw rows")
    ok = Derived.from_release(rel).map(lambda v: v.clamp(0, 1), "clip")  # row-wise post-processing passes
    assert torch.equal(ok.values, rel.values.clamp(0, 1))
