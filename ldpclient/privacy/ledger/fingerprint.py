"""Perceptual fingerprints: which public images are near copies of private ones.

A fingerprint is computed on the device from an image at the teacher's shape, when the ledger charges its
first release (it is kept beside the image's source key, in the ledger's ``fingerprints`` table, and never
sent). A ``--public`` image whose fingerprint is near a stored one is refused: a re-encoded, resized,
brightened or slightly cropped copy of a private image is not sent as it is because it was called public.

The fingerprint (in the manner of a DCT perceptual hash, kept as numbers rather than bits, which small digit
images need): the image's mean over channels, resized to :data:`SIDE` x :data:`SIDE` pixels (antialiased), its
orthonormal 2-D DCT, the lowest :data:`FREQUENCIES` x :data:`FREQUENCIES` coefficients but the mean's, scaled to
unit length. Resizing and the DCT are linear and separable, so both are one matrix per axis and crop
(:func:`_axis_operator`), applied as two matrix products. Unit length without the mean makes it blind to
brightness and contrast (``a * x + b``); low frequencies make it blind to re-encoding and resampling. A private
image is kept at :data:`CROPS` centre crops (none, then about 1, 2 and 3 pixels in 28 off each side), and once
more from its luma (:func:`_luma`: what a greyscale copy keeps), each stored as int8 (its largest coefficient at
127): 5 x 143 = 715 bytes per image (:data:`SLOTS` prints; a blob stored with four has its uncropped print read
in the fifth slot).

A public image is searched in two stages, as it is and as :func:`_variants` undoes the copies a person makes of a
picture (mirrored, quarter-turned, turned by a few degrees; an inverted copy's fingerprint is the negated
original's, so cosines count by their size). First its fingerprint as it is against every stored crop (resized
and centre-cropped copies). Then shifted and off-centre-cropped copies: for each variant, the stored images
nearest in a shift-blind summary (:func:`_spectrum`: the magnitude of the Fourier transform of the image each
fingerprint describes, which a shift leaves almost unchanged; :data:`CANDIDATES` for the image as it is,
:data:`VARIANT_CANDIDATES` for the others) are compared with the variant's fingerprints at :data:`WINDOWS` x
:data:`WINDOWS` windows (each side cut by 0-4 steps of 1/32 at either end, 4 in all at most: 225 windows;
:data:`CENTRED` for a turned-back one), so that some window of a moved copy covers what a stored crop covers. Two
images are near copies when any of these cosines is at least :data:`NEAR`.

Measured (``benchmarks/bench_fingerprint.py``, ``benchmarks/bench_lookalikes.py``): against 1,000 private images,
distinct public images of simple shapes sometimes reach :data:`NEAR` (digits 2 of 797, MNIST 2 of 4,000,
Fashion-MNIST 62 of 8,000 look-alikes: two 1s, trousers of one silhouette; CIFAR-10 none of 8,000), as close as
some copies are, so they are refused too (a missed copy would send a private image as it is);
re-encoded (JPEG quality 60-90), 2x upscaled, brightened, darkened, gamma-changed, mirrored, quarter-turned,
inverted and greyscale copies were caught, and centre-cropped, off-centre-cropped and shifted ones; JPEG copies
of noisy colour images less often, copies turned by a few degrees and cropped on most sets but MNIST. The
shift-blind stage ranks among the images of each block of :data:`BLOCK` stored ones, so a shifted copy's
chance of being a candidate falls slowly as a block fills (CIFAR-10, copies shifted 2 pixels with wrap-around:
98 % caught among 1,000 stored, 93 % among 16,000).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterable, Iterator, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ...state.database import Database
from ..basis import dct_matrix

#: Side (pixels) the image is resized to before its DCT.
SIDE = 32
#: Frequencies kept per axis (the mean's coefficient dropped: FREQUENCIES ** 2 - 1 numbers).
FREQUENCIES = 12
#: Centre crops a private image is kept at (fraction of each side cut off each edge).
CROPS = (0.0, 0.036, 0.072, 0.108)
#: Prints the ledger keeps per image: one per crop of :data:`CROPS`, and one of its luma (:func:`stored_prints`).
SLOTS = len(CROPS) + 1
#: Cosine at or above which a public image is a near copy of a private one.
NEAR = 0.995
#: Numbers per fingerprint (one crop).
SIZE = FREQUENCIES * FREQUENCIES - 1
#: Windows per axis a public image is also fingerprinted at: cut by ``lo`` and ``hi`` steps of :data:`_STEP` of
#: its side at either end, 4 steps at most (15 per axis, 225 per image).
WINDOWS = tuple((lo, hi) for lo in range(5) for hi in range(5) if lo + hi <= 4)
#: The centred windows (as many steps cut at either end): all a turned-back image (:data:`TURNS`) is searched at.
CENTRED = tuple((lo, hi) for lo, hi in WINDOWS if abs(lo - hi) <= 1 and lo + hi <= 3)
#: One window step: a fraction of the side (1 pixel in 28 or 32, 2 in 64).
_STEP = 1 / 32
#: Stored images per block of :data:`BLOCK` whose crops each public image is compared with at every window.
CANDIDATES = 64
#: As :data:`CANDIDATES`, for each variant of a public image but the image as it is (:func:`_variants`).
VARIANT_CANDIDATES = 16
#: Frequencies per axis of the shift-blind summary (:func:`_spectrum`).
_SPECTRUM_FREQUENCIES = 6
#: Largest side of the grey copy a search keeps of each public image (its windows are cut from it).
_QUERY_SIDE = 64
#: Smallest image side fingerprinted (smaller records, or records that are not images, get none).
MIN_SIDE = 8
#: Stored fingerprints compared per step (images per block of :func:`stored`; :func:`prints_of` is given blocks of
#: this many, as the shift-blind stage ranks within a block).
BLOCK = 16384
#: Fingerprints compared against them per step (a 512 x 65,536 float32 block: 128 MiB).
_QUERY_CHUNK = 512
#: Public images fingerprinted at every window per step (64 x 225 x 143 float32: 8 MiB).
_WINDOW_CHUNK = 64


def fingerprintable(record_shape: tuple[int, ...]) -> bool:
    """Whether records of ``record_shape`` (``(C, H, W)`` or ``(H, W)``) are images this module fingerprints."""
    return len(record_shape) in (2, 3) and min(record_shape[-2:]) >= MIN_SIDE


def _grey(records: torch.Tensor) -> torch.Tensor:
    """``(N, H, W)`` float32: the mean over channels."""
    x = records.detach().to(torch.float32)
    return x if x.dim() == 3 else x.mean(1)


@lru_cache(maxsize=16)
def _axis_operator(n: int) -> torch.Tensor:
    """``(len(CROPS), FREQUENCIES, n)``: along one axis of ``n`` pixels, each crop cut off, the rest resized to
    :data:`SIDE` (antialiased linear, as ``F.interpolate(..., "bilinear", antialias=True)`` does per axis) and
    the lowest :data:`FREQUENCIES` orthonormal DCT coefficients taken: one matrix per crop."""
    return torch.stack([_resize_dct(n, round(crop * n), round(crop * n)) for crop in CROPS])


@lru_cache(maxsize=16)
def _window_operator(n: int, windows: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """``(len(windows), FREQUENCIES, n)``: as :func:`_axis_operator`, for ``windows`` (as :data:`WINDOWS`)."""
    return torch.stack([_resize_dct(n, round(lo * _STEP * n), round(hi * _STEP * n)) for lo, hi in windows])


def _resize_dct(n: int, lo: int, hi: int) -> torch.Tensor:
    """``(FREQUENCIES, n)``: along one axis of ``n`` pixels, ``lo`` and ``hi`` pixels cut off its ends, the rest
    resized to :data:`SIDE` (antialiased linear, as ``F.interpolate(..., "bilinear", antialias=True)`` does per
    axis) and the lowest :data:`FREQUENCIES` orthonormal DCT coefficients taken."""
    d = dct_matrix(SIDE).to(torch.float32)[:FREQUENCIES]
    kept = n - lo - hi
    # each unit vector resized on its own (two columns: a (K, 1, n, 1) tensor is also channels-last, which
    # sends interpolate down another path)
    eye = torch.eye(kept).reshape(kept, 1, kept, 1).expand(kept, 1, kept, 2).contiguous()
    resize = F.interpolate(eye, size=(SIDE, 2), mode="bilinear", antialias=True, align_corners=False)
    out = torch.zeros(FREQUENCIES, n)
    out[:, lo : lo + kept] = d @ resize[:, 0, :, 0].T
    return out


def _prints(grey: torch.Tensor, crops: int) -> torch.Tensor:
    """``(N, crops, SIZE)`` unit-length fingerprints of ``(N, H, W)`` images at the first ``crops`` crops."""
    n, h, w = grey.shape
    rows, cols = _axis_operator(h)[:crops], _axis_operator(w)[:crops]
    # two large matrix products (rows, then columns per crop) rather than many small ones
    y = (rows.reshape(-1, h) @ grey.permute(1, 0, 2).reshape(h, n * w)).view(crops, FREQUENCIES * n, w)
    coef = torch.bmm(y, cols.transpose(1, 2)).view(crops, FREQUENCIES, n, FREQUENCIES).permute(2, 0, 1, 3)
    return F.normalize(coef.reshape(n, crops, -1)[:, :, 1:], dim=2)


def fingerprint(records: torch.Tensor) -> torch.Tensor:
    """The fingerprint of each image ``(N, C, H, W)`` or ``(N, H, W)`` (any value range): ``(N, SIZE)`` float32
    of unit length (a flat image gives zeros, which match nothing)."""
    return _prints(_grey(records), 1)[:, 0]


def _window_prints(grey: torch.Tensor, windows: tuple[tuple[int, int], ...] = WINDOWS) -> torch.Tensor:
    """``(N, len(windows) ** 2, SIZE)`` unit-length fingerprints of ``(N, H, W)`` images at every window of
    ``windows`` (as :data:`WINDOWS`) per axis."""
    n, h, w = grey.shape
    a = len(windows)
    rows, cols = _window_operator(h, windows).reshape(-1, h), _window_operator(w, windows).reshape(-1, w)
    coef = (rows @ grey @ cols.T).view(n, a, FREQUENCIES, a, FREQUENCIES).transpose(2, 3)
    return F.normalize(coef.reshape(n, a * a, -1)[:, :, 1:], dim=2)


@lru_cache(maxsize=1)
def _spectrum_operator() -> tuple[torch.Tensor, torch.Tensor]:
    """The DCT rows that turn a fingerprint back into the (low-passed) :data:`SIDE`-pixel image it describes, and
    the Hann window applied before its Fourier transform."""
    return dct_matrix(SIDE).to(torch.float32)[:FREQUENCIES], torch.hann_window(SIDE, periodic=False)


def _spectrum(prints: torch.Tensor) -> torch.Tensor:
    """The shift-blind summary of fingerprints ``(M, SIZE)``: the image each describes (its lowest frequencies),
    windowed, the magnitude of its Fourier transform at the lowest :data:`_SPECTRUM_FREQUENCIES` frequencies
    (half the plane: the other half mirrors it), unit length: ``(M, F)`` float32."""
    d, hann = _spectrum_operator()
    coef = torch.cat([prints.new_zeros(len(prints), 1), prints], 1).view(-1, FREQUENCIES, FREQUENCIES)
    image = d.T @ coef @ d * (hann[:, None] * hann[None, :])
    k = _SPECTRUM_FREQUENCIES
    mag = torch.fft.rfft2(image).abs()
    return F.normalize(torch.cat([mag[:, : k + 1, : k + 1].flatten(1), mag[:, -k:, 1 : k + 1].flatten(1)], 1), dim=1)


#: Small turns (degrees) a public image is also turned back by (:func:`_turned`): a copy turned by up to about 2
#: degrees either side of one of them (or of none) is compared upright. Only the image as it is and its mirror are
#: turned back (:func:`_variants`).
TURNS = (-10.0, -7.5, -5.0, -2.5, 2.5, 5.0, 7.5, 10.0)


class Query(NamedTuple):
    """Public images as a search takes them (:func:`query`): each as a copy of a private image could have been made
    from it (:func:`_variants`), with one entry of :attr:`grey` per variant."""

    #: ``(N, V, SIZE)``: each image's fingerprint under each of the ``V`` variants (:func:`fingerprint` of it).
    prints: torch.Tensor
    #: per variant, ``(N, h, w)`` float32: the grey images, at most :data:`_QUERY_SIDE` a side (the windows are
    #: cut from them).
    grey: tuple[torch.Tensor, ...]

    @staticmethod
    def cat(queries: list["Query"]) -> "Query":
        """One query of the images of ``queries`` (of one image shape), in order."""
        return Query(torch.cat([q.prints for q in queries]),
                     tuple(torch.cat(parts) for parts in zip(*(q.grey for q in queries), strict=True)))


def _turned(grey: torch.Tensor, degrees: float) -> torch.Tensor:
    """``(N, H, W)`` images turned by ``degrees`` about their centre (bilinear; the corners the turn leaves
    empty take the nearest edge's values). Not cut: a copy turned and cut to its full corners is a turned-back
    image whose middle the stored crops and the windows cover."""
    n, h, w = grey.shape
    t = math.radians(degrees)
    cos, sin = math.cos(t), math.sin(t)
    theta = torch.tensor([[cos, -sin * h / w, 0.0], [sin * w / h, cos, 0.0]], dtype=torch.float32)
    grid = F.affine_grid(theta.expand(n, 2, 3), [n, 1, h, w], align_corners=False)
    return F.grid_sample(grey[:, None], grid, mode="bilinear", padding_mode="border", align_corners=False)[:, 0]


#: The first variants of :func:`_variants`: the eight symmetries of the square (searched at every window).
SYMMETRIES = 8


def _variants(grey: torch.Tensor) -> list[torch.Tensor]:
    """What a search compares of images ``(N, H, W)``: the eight symmetries of the square (the images as they
    are, turned by 90, 180 and 270 degrees, and each of these mirrored left-right), then the images as they are
    and mirrored, each turned back by every one of :data:`TURNS`. A colour-inverted copy needs no variant: its
    fingerprint is the original's negated (:func:`nearest` compares cosines by their size)."""
    out = [torch.rot90(g, k, (1, 2)) for g in (grey, grey.flip(-1)) for k in range(4)]
    out += [_turned(g, degrees) for g in (grey, grey.flip(-1)) for degrees in TURNS]
    return out


def query(records: torch.Tensor) -> Query:
    """What a search keeps of images ``(N, C, H, W)`` or ``(N, H, W)`` (any value range)."""
    grey = _grey(records)
    h, w = grey.shape[1:]
    if max(h, w) > _QUERY_SIDE:
        scale = _QUERY_SIDE / max(h, w)
        size = (max(MIN_SIDE, round(h * scale)), max(MIN_SIDE, round(w * scale)))
        grey = F.interpolate(grey[:, None], size=size, mode="bilinear", antialias=True, align_corners=False)[:, 0]
    variants = [v.contiguous() for v in _variants(grey)]
    return Query(torch.stack([_prints(v, 1)[:, 0] for v in variants], 1), tuple(variants))


def _luma(records: torch.Tensor) -> torch.Tensor:
    """``(N, H, W)`` float32: what a photo editor's greyscale keeps of RGB images (ITU-R 601 luma); of other
    images, their mean over channels (:func:`_grey`)."""
    if records.dim() != 4 or records.shape[1] != 3:
        return _grey(records)
    x = records.detach().to(torch.float32)
    return 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]


def stored_prints(records: torch.Tensor) -> list[bytes]:
    """What the ledger keeps of each image: its fingerprint at every :data:`CROPS` crop, then that of its luma
    (:func:`_luma`, uncropped: what a greyscale copy's fingerprint is near), int8, concatenated (:data:`SLOTS`
    prints)."""
    prints = torch.cat([_prints(_grey(records), len(CROPS)), _prints(_luma(records), 1)], 1)  # (N, SLOTS, SIZE)
    top = prints.abs().amax(2, keepdim=True).clamp(min=1e-12)
    codes = (prints / top * 127).round().to(torch.int8).numpy()
    return [row.tobytes() for row in codes]


def _decode(blobs: list[bytes]) -> torch.Tensor:
    """``(M, SLOTS, SIZE)`` unit-length float32 prints from stored blobs (:func:`stored_prints`). A blob without
    the luma print (kept before the ledger stored one) has its uncropped print in that slot."""
    whole = [b if len(b) == SLOTS * SIZE else b + b[:SIZE] for b in blobs]
    codes = np.frombuffer(b"".join(whole), dtype=np.int8).reshape(len(blobs), SLOTS, SIZE)
    return F.normalize(torch.from_numpy(codes.astype(np.float32)), dim=2)


def store(c: Database, source_keys: list[bytes], records: torch.Tensor) -> None:
    """Keep the fingerprints of ``records`` under their source keys (the first one kept), inside the caller's
    transaction; nothing for records that are not images (:func:`fingerprintable`)."""
    if not source_keys or not fingerprintable(tuple(records.shape[1:])):
        return
    c.executemany("INSERT INTO fingerprints(source_key, print) VALUES (?, ?) ON CONFLICT(source_key) DO NOTHING",
                  zip(source_keys, stored_prints(records), strict=True))


def stored(c: Database) -> Iterator[torch.Tensor]:
    """The fingerprints the ledger keeps (:func:`store`), :data:`BLOCK` images at a time: ``(M, SLOTS, SIZE)``
    unit-length float32 blocks, as :func:`nearest` takes them."""
    last = b""
    while True:
        rows = c.execute("SELECT source_key, print FROM fingerprints WHERE source_key > ? ORDER BY source_key "
                         "LIMIT ?", (last, BLOCK)).fetchall()
        if not rows:
            return
        last = bytes(rows[-1][0])
        yield _decode([bytes(r[1]) for r in rows if len(r[1]) in (len(CROPS) * SIZE, SLOTS * SIZE)])


def prints_of(records: Iterable[torch.Tensor]) -> Iterator[torch.Tensor]:
    """Blocks as :func:`stored` yields them (:data:`BLOCK` images each, but the last), of images not in a ledger
    (this run's private images, ``(n, C, H, W)`` or ``(n, H, W)`` chunks of any value range): each image's
    fingerprints as the ledger keeps them (:func:`stored_prints`, through the same int8 codes)."""
    held: list[torch.Tensor] = []
    count = 0
    for chunk in records:
        if len(chunk) and fingerprintable(tuple(chunk.shape[1:])):
            held.append(_decode(stored_prints(chunk)))
            count += len(chunk)
        if count >= BLOCK:
            whole = torch.cat(held)
            yield whole[:BLOCK]
            held, count = [whole[BLOCK:]], len(whole) - BLOCK
    if count:
        yield torch.cat(held)


class Closest(NamedTuple):
    """For each public image: ``similarity``, the largest cosine with any stored crop (``(N,)`` float32 in
    ``[0, 1]``, ``-inf`` where nothing is stored), ``at``, the stored image it was found at (``(N,)``
    int64: its position in the blocks, counted from the first block's first image; -1 where nothing is stored), and
    ``variant``, the variant of the public image that had it (``(N,)`` int64, an index of :func:`_variants`: 0 the
    image as it is, below :data:`SYMMETRIES` a symmetry of the square, then a turned-back one)."""

    similarity: torch.Tensor
    at: torch.Tensor
    variant: torch.Tensor


def nearest(blocks: Iterable[torch.Tensor], images: Query) -> torch.Tensor:
    """For each public image (:func:`query`), the largest cosine with any stored crop: :func:`closest`'s
    ``similarity``."""
    return closest(blocks, images).similarity


def closest(blocks: Iterable[torch.Tensor], images: Query) -> Closest:
    """For each public image (:func:`query`), the largest cosine, by its size (an inverted copy's is negative),
    with any stored crop, and the stored image that has it: its fingerprint as it is against every crop, then,
    for each of its variants, its fingerprint at each window (:data:`WINDOWS`; :data:`CENTRED` for the turned ones)
    against the crops of the variant's shift-blind nearest images per block (:data:`CANDIDATES` for the image as
    it is, :data:`VARIANT_CANDIDATES` for each other variant). ``blocks``: stored fingerprints (:func:`stored`,
    :func:`prints_of`)."""
    n, variants = images.prints.shape[:2]
    best = torch.full((n, variants), -math.inf)
    where = torch.full((n, variants), -1, dtype=torch.int64)
    spectra = _spectrum(images.prints.reshape(n * variants, SIZE)).view(n, variants, -1)
    upright = images.prints[:, 0].contiguous()
    offset = 0

    def keep(rows: slice, v: int, cosines: torch.Tensor, found: torch.Tensor) -> None:
        better = cosines > best[rows, v]
        best[rows, v] = torch.where(better, cosines, best[rows, v])
        where[rows, v] = torch.where(better, found + offset, where[rows, v])

    for block in blocks:
        if not len(block):
            continue
        crops = block.shape[1]
        flat = block.reshape(-1, SIZE).T  # (SIZE, M * crops)
        for i in range(0, n, _QUERY_CHUNK):
            top = (upright[i : i + _QUERY_CHUNK] @ flat).abs().max(1)
            keep(slice(i, i + _QUERY_CHUNK), 0, top.values, top.indices // crops)
        block_spectra = _spectrum(block[:, 0])
        for v, grey in enumerate(images.grey):
            k = min(CANDIDATES if v == 0 else VARIANT_CANDIDATES, len(block))
            for i in range(0, n, _WINDOW_CHUNK):
                candidates = (spectra[i : i + _WINDOW_CHUNK, v] @ block_spectra.T).topk(k, dim=1).indices  # (n, k)
                windows = _window_prints(grey[i : i + _WINDOW_CHUNK], WINDOWS if v < SYMMETRIES else CENTRED)
                top = torch.einsum("nws,nkcs->nwkc", windows, block[candidates]).abs().flatten(1).max(1)
                found = candidates.gather(1, ((top.indices // crops) % k).unsqueeze(1)).squeeze(1)
                keep(slice(i, i + _WINDOW_CHUNK), v, top.values, found)
        offset += len(block)
    top = best.max(1)
    return Closest(top.values, where.gather(1, top.indices.unsqueeze(1)).squeeze(1), top.indices)


__all__ = ["BLOCK", "CANDIDATES", "CROPS", "FREQUENCIES", "NEAR", "SIDE", "SIZE", "SLOTS", "SYMMETRIES", "TURNS",
           "VARIANT_CANDIDATES", "WINDOWS", "Closest", "Query", "closest", "fingerprint", "fingerprintable", "nearest",
           "prints_of", "query",
           "store", "stored", "stored_prints"]
