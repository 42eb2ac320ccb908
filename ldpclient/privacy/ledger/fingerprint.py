"""Perceptual fingerprints: which public images are near copies of private ones.

A fingerprint is computed on the device from an image at the teacher's shape, when the ledger charges its
first release (it is kept beside the image's source key, in the ledger's ``fingerprints`` table, and never
sent). A ``--public`` image whose fingerprint is near a stored one is refused: a re-encoded, resized,
brightened or slightly cropped copy of a private image is not sent as it is because it was called public.

The fingerprint (in the manner of a DCT perceptual hash, kept as numbers rather than bits, which small digit
images need): the image's mean over channels, resized to :data:`SIDE` x :data:`SIDE` pixels (antialiased), its
orthonormal 2-D DCT, the lowest :data:`FREQUENCIES` x :data:`FREQUENCIES` coefficients but the mean's, scaled to
unit length. Resizing and the DCT are linear and separable, so both are one matrix per axis and crop
(:func:`_axis_operator`), applied as two matrix products. Unit length without the mean makes it blind to brightness and contrast (``a * x + b``); low
frequencies make it blind to re-encoding and resampling. A private image is kept at :data:`CROPS` centre crops
(none, then about 1, 2 and 3 pixels in 28 off each side), each stored as int8 (its largest coefficient at
127): 4 x 143 = 572 bytes per image. Two images are near copies when the cosine between the public one's
fingerprint and any of the private one's crops is at least :data:`NEAR`.

Measured (BENCHMARKS.md, "Near copies of private images"; ``benchmarks/bench_fingerprint.py``): no distinct
public image of digits, MNIST or CIFAR-10 reached :data:`NEAR` against 1,000 private images; re-encoded (JPEG
quality 60-90), 2x upscaled, brightened, darkened and gamma-changed copies were caught, centre crops mostly;
copies shifted by a few pixels (an off-centre crop) are not caught.
"""

from __future__ import annotations

import math
import sqlite3
from functools import lru_cache
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ..basis import dct_matrix

#: Side (pixels) the image is resized to before its DCT.
SIDE = 32
#: Frequencies kept per axis (the mean's coefficient dropped: FREQUENCIES ** 2 - 1 numbers).
FREQUENCIES = 12
#: Centre crops a private image is kept at (fraction of each side cut off each edge).
CROPS = (0.0, 0.036, 0.072, 0.108)
#: Cosine at or above which a public image is a near copy of a private one.
NEAR = 0.995
#: Numbers per fingerprint (one crop).
SIZE = FREQUENCIES * FREQUENCIES - 1
#: Smallest image side fingerprinted (smaller records, or records that are not images, get none).
MIN_SIDE = 8
#: Stored fingerprints compared per step.
_CHUNK = 16384
#: Fingerprints compared against them per step (a 512 x 65,536 float32 block: 128 MiB).
_QUERY_CHUNK = 512


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
    d = dct_matrix(SIDE).to(torch.float32)[:FREQUENCIES]
    out = torch.zeros(len(CROPS), FREQUENCIES, n)
    for k, crop in enumerate(CROPS):
        cut = round(crop * n)
        kept = n - 2 * cut
        # each unit vector resized on its own (two columns: a (K, 1, n, 1) tensor is also channels-last, which
        # sends interpolate down another path)
        eye = torch.eye(kept).reshape(kept, 1, kept, 1).expand(kept, 1, kept, 2).contiguous()
        resize = F.interpolate(eye, size=(SIDE, 2), mode="bilinear", antialias=True, align_corners=False)
        out[k, :, cut : cut + kept] = d @ resize[:, 0, :, 0].T
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


def stored_prints(records: torch.Tensor) -> list[bytes]:
    """What the ledger keeps of each image: its fingerprint at every :data:`CROPS` crop, int8, concatenated."""
    prints = _prints(_grey(records), len(CROPS))  # (N, crops, SIZE)
    top = prints.abs().amax(2, keepdim=True).clamp(min=1e-12)
    codes = (prints / top * 127).round().to(torch.int8).numpy()
    return [row.tobytes() for row in codes]


def _decode(blobs: list[bytes]) -> torch.Tensor:
    """``(M, crops, SIZE)`` unit-length float32 prints from stored blobs."""
    codes = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(len(blobs), len(CROPS), SIZE)
    return F.normalize(torch.from_numpy(codes.astype(np.float32)), dim=2)


def store(c: sqlite3.Connection, source_keys: list[bytes], records: torch.Tensor) -> None:
    """Keep the fingerprints of ``records`` under their source keys (the first one kept), inside the caller's
    transaction; nothing for records that are not images (:func:`fingerprintable`)."""
    if not source_keys or not fingerprintable(tuple(records.shape[1:])):
        return
    c.executemany("INSERT OR IGNORE INTO fingerprints(source_key, print) VALUES (?, ?)",
                  zip(source_keys, stored_prints(records), strict=True))


def _stored(c: sqlite3.Connection) -> Iterator[torch.Tensor]:
    """The stored fingerprints, :data:`_CHUNK` at a time."""
    last = b""
    while True:
        rows = c.execute("SELECT source_key, print FROM fingerprints WHERE source_key > ? ORDER BY source_key "
                         "LIMIT ?", (last, _CHUNK)).fetchall()
        if not rows:
            return
        last = bytes(rows[-1][0])
        yield _decode([bytes(r[1]) for r in rows if len(r[1]) == len(CROPS) * SIZE])


def nearest(c: sqlite3.Connection, prints: torch.Tensor) -> torch.Tensor:
    """For each fingerprint ``(N, SIZE)`` (:func:`fingerprint`), the highest cosine with any stored one at any
    crop: ``(N,)`` float32 in ``[-1, 1]`` (``-inf`` where nothing is stored)."""
    best = torch.full((len(prints),), -math.inf)
    for stored in _stored(c):
        flat = stored.reshape(-1, SIZE).T  # (SIZE, M * crops)
        for i in range(0, len(prints), _QUERY_CHUNK):
            part = best[i : i + _QUERY_CHUNK]
            torch.maximum(part, (prints[i : i + _QUERY_CHUNK] @ flat).amax(1), out=part)
    return best


__all__ = ["CROPS", "FREQUENCIES", "NEAR", "SIDE", "SIZE", "fingerprint", "fingerprintable", "nearest", "store",
           "stored_prints"]
