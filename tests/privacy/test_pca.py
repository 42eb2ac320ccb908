"""The ``pca`` release basis: fitted on public images alone, the same record-level guarantee as ``dct``."""

from __future__ import annotations

import pytest
import torch

from ldpclient.privacy import Domain, PcaBasis, fit_pca, gaussian, laplace
from ldpclient.privacy.pca import PCA_MAX_VALUES
from ldpclient.transfer.decoder import fit_decoder

UNIT = Domain(0.0, 1.0)


def _public(n: int = 120, shape: tuple[int, ...] = (1, 6, 6), seed: int = 0) -> torch.Tensor:
    return torch.rand(n, *shape, generator=torch.Generator().manual_seed(seed))


def test_all_components_rebuild_a_record_exactly_and_fewer_project_it() -> None:
    public = _public()
    layout = fit_pca(public, UNIT, coefficients=36).layout((1, 6, 6), UNIT, "l1", None)
    x = _public(5, seed=1)
    assert torch.allclose(layout.inverse(layout.forward(x)), x.to(torch.float64), atol=1e-9)
    few = fit_pca(public, UNIT, coefficients=8).layout((1, 6, 6), UNIT, "l1", None)
    once = few.inverse(few.forward(x))
    assert torch.allclose(few.inverse(few.forward(once)), once, atol=1e-9)  # a projection: applying it twice is once
    assert torch.allclose(few.inverse(torch.zeros(1, 8)), public.to(torch.float64).mean(0, keepdim=True))


def test_components_are_orthonormal_and_colour_keeps_a_quarter_per_chroma_axis() -> None:
    basis = fit_pca(_public(200, (3, 5, 5)), UNIT, coefficients=12)
    assert [int(v.shape[0]) for v in basis.components] == [12, 3, 3]
    for v in basis.components:
        assert torch.allclose(v @ v.T, torch.eye(len(v), dtype=torch.float64), atol=1e-9)
    assert laplace(50, per="record", basis=basis).guarantee((3, 5, 5)).params["coefficients"] == 18


def test_the_basis_is_a_function_of_the_public_images_alone() -> None:
    public = _public()
    a, b = fit_pca(public, UNIT), fit_pca(public.clone(), UNIT)
    assert a.digest == b.digest and all(torch.equal(u, v) for u, v in zip(a.components, b.components, strict=True))
    other = fit_pca(_public(seed=5), UNIT)
    assert other.digest != a.digest
    ma, mo = laplace(50, per="record", basis=a), laplace(50, per="record", basis=other)
    assert ma.config()["basis_digest"] == a.digest and ma.config() != mo.config()  # a ledger key per basis
    x = _public(4, seed=2)
    ra = ma.release(x, generator=torch.Generator().manual_seed(3))
    rb = laplace(50, per="record", basis=b).release(x, generator=torch.Generator().manual_seed(3))
    assert torch.equal(ra.values, rb.values) and ra.upsampled().values.shape == x.shape


@pytest.mark.parametrize("secure", [True, False])
def test_the_guarantee_is_the_dct_release_of_as_many_coefficients_with_the_same_clip(secure: bool) -> None:
    pca = laplace(20, per="record", basis=fit_pca(_public(), UNIT, coefficients=16), clip_norm=3.0, secure=secure)
    dct = laplace(20, per="record", basis="dct", coefficients=16, clip_norm=3.0, secure=secure)
    gp, gd = pca.guarantee((1, 6, 6)), dct.guarantee((1, 6, 6))
    assert gp.epsilon_record == gd.epsilon_record <= 20.0
    assert gp.params["sensitivity"] == gd.params["sensitivity"] == 6.0
    assert gp.params["basis"] == "pca" and "principal components" in gp.notes[0]
    g = gaussian(5, per="record", basis=fit_pca(_public(), UNIT, coefficients=16), clip_norm=3.0)
    assert g.guarantee((1, 6, 6)).epsilon_record == gaussian(5, per="record", basis="dct", coefficients=16,
                                                            clip_norm=3.0).guarantee((1, 6, 6)).epsilon_record


def test_two_records_coefficients_differ_by_at_most_twice_the_clip() -> None:
    layout = fit_pca(_public(), UNIT).layout((1, 6, 6), UNIT, "l1", 2.0)
    extremes = torch.stack([torch.zeros(1, 6, 6), torch.ones(1, 6, 6), (torch.arange(36) % 2).float().view(1, 6, 6)])
    coef, _ = layout.clip(layout.forward(torch.cat([extremes, _public(50, seed=9)])))
    assert float(torch.cdist(coef, coef, p=1).max()) <= 4.0 + 1e-9


def test_what_cannot_release_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="fitted on public images"):
        laplace(50, per="record", basis="pca")
    with pytest.raises(ValueError, match="give them to fit_pca"):
        laplace(50, per="record", basis=fit_pca(_public(), UNIT), coefficients=8)
    with pytest.raises(ValueError, match="shape"):
        laplace(50, per="record", basis=fit_pca(_public(), UNIT)).release(torch.rand(2, 1, 7, 7))
    with pytest.raises(ValueError, match="more public images"):
        fit_pca(_public(16), UNIT)
    with pytest.raises(ValueError, match="at most"):
        fit_pca(torch.rand(3, 1, 1, PCA_MAX_VALUES + 1), UNIT, coefficients=1)
    planned = laplace(50, per="record", basis=PcaBasis.unfitted((1, 6, 6)))
    assert planned.guarantee((1, 6, 6)).epsilon_record <= 50.0  # what a run plans with before reading images
    with pytest.raises(ValueError, match="not fitted yet"):
        planned.release(_public(2))


def test_a_decoder_decodes_pca_releases_into_the_public_images() -> None:
    public = _public(300)
    mech = laplace(200, per="record", basis=fit_pca(public, UNIT), secure=False)
    decoder = fit_decoder(mech, public, seed=0)
    release = mech.release(public[:3], generator=torch.Generator().manual_seed(1))
    assert decoder.decoded(release).values.shape == (3, 1, 6, 6)


def test_a_pca_mechanism_travels_to_a_worker_whole() -> None:
    import pickle

    mech = laplace(50, per="record", basis=fit_pca(_public(), UNIT))
    copy = pickle.loads(pickle.dumps(mech))  # what a Ray worker gets
    x = _public(3, seed=4)
    assert copy.config() == mech.config()
    assert torch.equal(copy.release(x, generator=torch.Generator().manual_seed(0)).values,
                       mech.release(x, generator=torch.Generator().manual_seed(0)).values)
