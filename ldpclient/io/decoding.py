"""Reading and decoding one private image file: numpy and Pillow only, so that decoding
processes start without importing torch.

Units: a decoded record is float32 ``(C, H, W)`` in ``[0, 1]``. Every failure of one file is an
:class:`ImageDecodeError` with a short reason (the folder-level logic in :mod:`ldpclient.io.folders`
lists it as skipped). :func:`decode_files` is the unit of work of a decoding process: a run of
files in, one stacked block and the skips out, in order.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import stat
import warnings
from typing import Callable, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

#: Largest accepted image, in pixels (width x height) of the *file*, before resizing.
#: Guards against decompression bombs; Pillow's own limit is also turned into an error.
DEFAULT_MAX_PIXELS = 40_000_000


class ImageDecodeError(Exception):
    """One file could not be used; ``reason`` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: Largest image file read (bytes): a file is read whole, once, to hash and decode it.
MAX_FILE_BYTES = 256 * 2**20
#: Smallest read after the first (bytes), when a file turns out longer than ``fstat`` said.
_READ_BLOCK = 1 << 16


def read_image_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of one image file, read so that nothing swapped in after discovery can block or flood us.

    The file is opened with ``O_NONBLOCK`` (a FIFO or device put in its place cannot
    block the open), checked to be a regular file *after* opening (``fstat`` of the
    open descriptor), and read to at most ``max_bytes``. Raises
    :class:`ImageDecodeError` with a short reason otherwise.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ImageDecodeError(f"cannot open ({exc.strerror or type(exc).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageDecodeError("not a regular file (changed since the folder was listed)")
        if st.st_size > max_bytes:
            raise ImageDecodeError(f"file too large ({st.st_size} bytes > limit {max_bytes})")
        parts: list[bytes] = []
        total = 0
        while total <= max_bytes:  # to the end, at most max_bytes + 1 (a file that grew since fstat)
            part = os.read(fd, min(max_bytes + 1 - total, max(st.st_size + 1 - total, _READ_BLOCK)))
            if not part:
                break
            parts.append(part)
            total += len(part)
    except OSError as exc:
        raise ImageDecodeError(f"cannot read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > max_bytes:
        raise ImageDecodeError(f"file too large (more than {max_bytes} bytes)")
    if not data:
        raise ImageDecodeError("empty file (0 bytes)")
    return data


def source_id(data: bytes) -> bytes:
    """A source's id for the privacy ledger: the SHA-256 of the file's bytes (32 bytes).

    The ledger keys its spend by an HMAC of this id under its own secret, so the
    plain digest is never stored; the same image file has one spend whatever shape
    or value range a teacher asks for.
    """
    return hashlib.sha256(data).digest()


def content_id(image: Image.Image) -> bytes:
    """What the image shows, for the privacy ledger (32 bytes): the SHA-256 of its first frame's pixels at its own
    size, as 8-bit RGBA. A file renamed, copied or re-encoded without loss (PNG, BMP, TIFF, another compression,
    metadata stripped) keeps it; an edit of one pixel changes it. A lossy re-encoding (JPEG) changes pixels, so it
    changes this too."""
    width, height = image.size
    digest = hashlib.sha256(b"ldpclient-content-v1\x00" + f"{width}x{height}".encode() + b"\x00")
    digest.update(image.convert("RGBA").tobytes())
    return digest.digest()


def decode_array(
    path: str | os.PathLike[str] | bytes,
    input_shape: Sequence[int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> np.ndarray:
    """Decode one image file (a path, or the file's bytes) to a float32 array ``(C, H, W)`` in ``[0, 1]``.

    ``input_shape`` is ``(C, H, W)`` with C = 1 (grey) or 3 (RGB). The image is
    converted to that colour mode (alpha dropped; 16-bit grey scaled from
    0..65535), then resized to ``H x W`` with bilinear filtering (aspect ratio not
    kept). Multi-frame files (GIF, TIFF) use their first frame. Raises
    :class:`ImageDecodeError` with a short reason for any file that cannot be used,
    including files with more than ``max_pixels`` pixels (checked from the header,
    before decoding) and Pillow's decompression-bomb warning or error.
    """
    return decode_with_content(path, input_shape, max_pixels=max_pixels)[0]


def decode_with_content(
    path: str | os.PathLike[str] | bytes,
    input_shape: Sequence[int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> tuple[np.ndarray, bytes]:
    """:func:`decode_array`, and the image's :func:`content_id`."""
    c, h, w = _check_shape(input_shape)
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
    data = path if isinstance(path, bytes) else read_image_file(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                width, height = img.size
                if width * height > max_pixels:
                    raise ImageDecodeError(
                        f"too many pixels ({width}x{height} > limit {max_pixels}; possible decompression bomb)"
                    )
                img.seek(0)
                img.load()
                arr = _to_array(img, c)
                content = content_id(img)
    except ImageDecodeError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageDecodeError(f"decompression bomb refused ({exc})") from None
    except UnidentifiedImageError:
        raise ImageDecodeError("not a readable image (unknown format)") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ImageDecodeError(f"cannot decode image ({msg})") from None
    if arr.dtype == np.uint8:
        if arr.shape[0] == h and arr.shape[1] == w:  # 8-bit at the asked size: finite and in [0, 1] already
            return arr.transpose(2, 0, 1).astype(np.float32, order="C") / 255.0, content
        arr = arr.astype(np.float32) / 255.0
    if arr.shape[0] != h or arr.shape[1] != w:
        arr = _resize(arr, h, w)
    if not np.isfinite(arr).all():
        raise ImageDecodeError("image has non-finite values")
    return np.ascontiguousarray(np.clip(arr, 0.0, 1.0, dtype=np.float32).transpose(2, 0, 1)), content


def _check_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or shape[0] not in (1, 3) or shape[1] < 1 or shape[2] < 1:
        raise ValueError(f"input shape must be (C, H, W) with C in {{1, 3}}, got {tuple(input_shape)}")
    return shape[0], shape[1], shape[2]


def _to_array(img: Image.Image, channels: int) -> np.ndarray:
    """HWC array with the requested number of channels: uint8 (0..255) from 8-bit modes, else float32 in [0, 1]."""
    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        grey = np.asarray(img, dtype=np.float64) / 65535.0
        arr = grey[:, :, None].astype(np.float32)
    elif mode == "F":
        arr = np.asarray(img, dtype=np.float32)[:, :, None]
    else:
        target = "L" if channels == 1 else "RGB"
        if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
            img = img.convert("RGBA" if channels == 3 else "LA")
            img = img.convert(target)
        elif mode != target:
            img = img.convert(target)
        arr = np.asarray(img)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        return arr  # L or RGB: the channels asked for
    if channels == 3:  # float/16-bit colour cannot happen (those modes are single-channel)
        arr = np.repeat(arr, 3, axis=2)
    return np.clip(arr, 0.0, 1.0)


def _resize(arr: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear (antialiased when shrinking) resize of an HWC float array, channel by channel."""
    planes = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(arr[:, :, k], dtype=np.float32)).resize(
                (w, h), Image.Resampling.BILINEAR
            )
        )
        for k in range(arr.shape[2])
    ]
    return np.stack(planes, axis=2)

#: What :func:`decode_files` returns: the decoded block ``(B, C, H, W)`` float32, the B source ids, the B
#: :func:`content_id` s, the B relative paths decoded, and ``(relative path, reason)`` for each file skipped.
DecodedRun = tuple[np.ndarray, list[bytes], list[bytes], list[str], list[tuple[str, str]]]


def decode_files(
    root: str,
    rels: Sequence[str],
    input_shape: Sequence[int],
    max_pixels: int,
    on_file: Callable[[], None] | None = None,
) -> DecodedRun:
    """Read and decode the files ``rels`` under ``root``, in order (see :func:`decode_array`);
    ``on_file()`` after each file (progress, when decoding in the caller's process)."""
    shape = _check_shape(input_shape)
    arrays: list[np.ndarray] = []
    ids: list[bytes] = []
    contents: list[bytes] = []
    decoded: list[str] = []
    skipped: list[tuple[str, str]] = []
    for rel in rels:
        try:
            data = read_image_file(os.path.join(root, rel))
            array, content = decode_with_content(data, shape, max_pixels=max_pixels)
            arrays.append(array)
            ids.append(source_id(data))
            contents.append(content)
            decoded.append(rel)
        except ImageDecodeError as exc:
            skipped.append((rel, exc.reason))
        if on_file is not None:
            on_file()
    block = np.stack(arrays) if arrays else np.empty((0, *shape), dtype=np.float32)
    return block, ids, contents, decoded, skipped


def ignore_interrupts() -> None:
    """A decoding process's initializer: Ctrl-C is the parent's to handle (it stops the pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


__all__ = [
    "DEFAULT_MAX_PIXELS", "DecodedRun", "ImageDecodeError", "MAX_FILE_BYTES", "content_id", "decode_array",
    "decode_files", "decode_with_content",
    "ignore_interrupts", "read_image_file", "source_id",
]
