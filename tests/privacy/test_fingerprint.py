"""The ledger's perceptual fingerprints: what they are blind to, and what they tell apart."""

from __future__ import annotations

import sqlite3

import torch
import torch.nn.functional as F

from ldpclient.privacy.basis import dct_matrix
from ldpclient.privacy.ledger import fingerprint as fp


def _table() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE fingerprints (source_key BLOB PRIMARY KEY, print BLOB NOT NULL)")
    return c


def _smooth(n: int, seed: int, shape: tuple[int, ...] = (1, 28, 28)) -> torch.Tensor:
    """Smooth random images in [0, 1] (low-pass noise: what a photo looks like to a fingerprint)."""
    g = torch.Generator().manual_seed(seed)
    small = torch.rand(n, shape[0], 6, 6, generator=g)
    return F.interpolate(small, size=shape[1:], mode="bicubic", align_corners=False).clamp(0, 1)


def test_the_two_matrix_products_are_the_resize_and_the_dct() -> None:
    x = torch.rand(5, 3, 30, 22)
    d = dct_matrix(fp.SIDE).to(torch.float32)
    for k, crop in enumerate(fp.CROPS):
        dy, dx = round(crop * 30), round(crop * 22)
        grey = x.mean(1, keepdim=True)[:, :, dy : 30 - dy, dx : 22 - dx]
        small = F.interpolate(grey, size=(fp.SIDE, fp.SIDE), mode="bilinear", antialias=True, align_corners=False)
        coef = (d @ small[:, 0] @ d.T)[:, : fp.FREQUENCIES, : fp.FREQUENCIES].reshape(5, -1)[:, 1:]
        assert torch.allclose(fp._prints(fp._grey(x), len(fp.CROPS))[:, k], F.normalize(coef, dim=1), atol=1e-5)


def test_blind_to_brightness_and_contrast_and_to_the_value_range() -> None:
    x = _smooth(8, 0)
    base = fp.fingerprint(x)
    for changed in (x * 0.7 + 0.2, x * 255.0, 1.5 * x - 0.3):
        assert torch.allclose(fp.fingerprint(changed), base, atol=1e-5)


def test_stored_copies_are_found_and_distinct_images_are_not() -> None:
    private, others = _smooth(50, 1), _smooth(50, 2)
    c = _table()
    fp.store(c, [bytes([k]) for k in range(50)], private)
    assert bool((fp.nearest(fp.stored(c), fp.query(private)) >= fp.NEAR).all())  # the int8 copies keep them near
    cropped = F.interpolate(private[:, :, 2:-2, 2:-2], size=(28, 28), mode="bilinear", antialias=True)
    assert bool((fp.nearest(fp.stored(c), fp.query(cropped)) >= fp.NEAR).all())  # a centre crop: a stored crop
    assert bool((fp.nearest(fp.stored(c), fp.query(others)) < fp.NEAR).all())


def test_the_windows_are_crops_resized_and_the_spectrum_is_blind_to_a_circular_shift() -> None:
    x = torch.rand(3, 1, 28, 30)
    d = dct_matrix(fp.SIDE).to(torch.float32)
    prints = fp._window_prints(fp._grey(x))
    for a, (top, bottom) in enumerate(fp.WINDOWS[::4]):
        for b, (left, right) in enumerate(fp.WINDOWS[::5]):
            t, bo, le, ri = (round(v * s / 32) for v, s in ((top, 28), (bottom, 28), (left, 30), (right, 30)))
            part = x[:, :, t : 28 - bo, le : 30 - ri]
            small = F.interpolate(part, size=(fp.SIDE, fp.SIDE), mode="bilinear", antialias=True, align_corners=False)
            coef = (d @ small[:, 0] @ d.T)[:, : fp.FREQUENCIES, : fp.FREQUENCIES].reshape(3, -1)[:, 1:]
            k = 4 * a * len(fp.WINDOWS) + 5 * b
            assert torch.allclose(prints[:, k], F.normalize(coef, dim=1), atol=1e-5)
    image = torch.rand(1, fp.SIDE, fp.SIDE)
    hann = fp._spectrum_operator()[1]
    windowed = image * hann[:, None] * hann[None, :]
    shifted = torch.roll(windowed, (3, -5), (1, 2))
    assert torch.allclose(torch.fft.rfft2(shifted).abs(), torch.fft.rfft2(windowed).abs(), atol=1e-4)


def test_shifted_and_off_centre_cropped_copies_are_found_and_distinct_images_are_not() -> None:
    private, others = _smooth(60, 5, (3, 32, 32)), _smooth(60, 6, (3, 32, 32))
    c = _table()
    fp.store(c, [bytes([k]) for k in range(60)], private)
    # moved 2 pixels down and right (the top rows repeated), and cut 2 pixels off the top and left then resized
    shifted = torch.cat([private[:, :, :1].expand(-1, -1, 2, -1), private[:, :, :-2]], 2)
    shifted = torch.cat([shifted[:, :, :, :1].expand(-1, -1, -1, 2), shifted[:, :, :, :-2]], 3)
    off_centre = F.interpolate(private[:, :, 2:, 2:], size=(32, 32), mode="bilinear", antialias=True)
    assert float(fp.fingerprint(shifted).mul(fp.fingerprint(private)).sum(1).max()) < fp.NEAR  # not as they are
    assert bool((fp.nearest(fp.stored(c), fp.query(shifted)) >= fp.NEAR).all())
    assert bool((fp.nearest(fp.stored(c), fp.query(off_centre)) >= fp.NEAR).all())
    assert bool((fp.nearest(fp.stored(c), fp.query(others)) < fp.NEAR).all())
    big = F.interpolate(private[:4], size=(96, 96), mode="bilinear")  # kept at 64 a side for its windows
    assert fp.query(big).grey[0].shape == (4, 64, 64)
    assert bool((fp.nearest(fp.stored(c), fp.query(big)) >= fp.NEAR).all())


def test_nothing_is_stored_for_records_that_are_not_images_and_nothing_matches_an_empty_table() -> None:
    c = _table()
    fp.store(c, [b"a", b"b"], torch.rand(2, 16))  # tabular records: no fingerprint
    fp.store(c, [b"c"], torch.rand(1, 1, 4, 4))  # below MIN_SIDE
    assert c.execute("SELECT COUNT(*) FROM fingerprints").fetchone()[0] == 0
    assert bool(torch.isinf(fp.nearest(fp.stored(c), fp.query(_smooth(3, 0)))).all())
    flat = torch.full((1, 1, 28, 28), 0.5)
    fp.store(c, [b"d"], _smooth(1, 4))
    assert float(fp.nearest(fp.stored(c), fp.query(flat))[0]) < fp.NEAR  # a flat image's zero print matches nothing


def _turned_and_cut(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """``x`` turned by ``degrees`` about its centre, cut to the centred square that has no empty corner, resized back
    (as a photo editor's "straighten")."""
    import math

    n, c, h, w = x.shape
    t = math.radians(degrees)
    theta = torch.tensor([[math.cos(t), -math.sin(t), 0.0], [math.sin(t), math.cos(t), 0.0]]).expand(n, 2, 3)
    turned = F.grid_sample(x, F.affine_grid(theta, [n, c, h, w], align_corners=False), align_corners=False)
    cut = math.ceil(h * (1 - 1 / (math.cos(t) + abs(math.sin(t)))) / 2)
    return F.interpolate(turned[:, :, cut : h - cut, cut : w - cut], size=(h, w), mode="bilinear", antialias=True)


def test_mirrored_turned_inverted_and_greyscale_copies_are_found_and_distinct_images_are_not() -> None:
    private, others = _smooth(40, 7, (3, 32, 32)), _smooth(200, 8, (3, 32, 32))
    c = _table()
    fp.store(c, [bytes([k]) for k in range(40)], private)
    luma = (0.299 * private[:, 0] + 0.587 * private[:, 1] + 0.114 * private[:, 2])[:, None].expand(-1, 3, -1, -1)
    copies = {
        "mirrored": private.flip(-1), "turned 90": private.rot90(1, (2, 3)), "turned 180": private.rot90(2, (2, 3)),
        "turned 270, mirrored": private.rot90(3, (2, 3)).flip(-1), "inverted": 1 - private,
        "inverted, mirrored": (1 - private).flip(-1), "greyscale": luma, "turned 5, cut": _turned_and_cut(private, 5),
        "turned -5, cut": _turned_and_cut(private, -5),
    }
    for kind, made in copies.items():
        assert float(fp.fingerprint(made).mul(fp.fingerprint(private)).sum(1).max()) < fp.NEAR or kind == "greyscale"
        found = fp.closest(fp.stored(c), fp.query(made))
        assert bool((found.similarity >= fp.NEAR).all()), (kind, found.similarity.min())
        assert torch.equal(found.at, torch.arange(40)), kind  # each matched to its own original
        symmetric = kind.startswith(("mirrored", "turned 9", "turned 1", "turned 2", "inverted,"))
        assert bool(((found.variant > 0) & (found.variant < fp.SYMMETRIES)).all()) == symmetric, kind
    assert bool((fp.nearest(fp.stored(c), fp.query(others)) < fp.NEAR).all())


def test_images_outside_the_ledger_are_searched_as_the_ledger_keeps_them() -> None:
    private = _smooth(30, 9, (1, 28, 28))
    c = _table()
    fp.store(c, [bytes([k]) for k in range(30)], private)
    (kept,) = list(fp.stored(c))
    (made,) = list(fp.prints_of([private]))
    assert torch.equal(made, kept)  # the same int8 codes, decoded the same way
    copies = fp.query(private.flip(-1))
    assert torch.equal(fp.nearest(fp.prints_of([private[:10], private[10:]]), copies), fp.nearest(fp.stored(c), copies))
    assert list(fp.prints_of([torch.rand(3, 16)])) == []  # not images: nothing to search
