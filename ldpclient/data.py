"""Private image folders: discovery, validation and decoding to the teacher's input shape.

Everything here runs on the data owner's machine and returns *raw* record tensors,
which only :mod:`ldpclient.privacy` may turn into releases. Units: decoded records
are float32 in ``[0, 1]`` (the state units the mechanisms' default domain
declares), shape ``(C, H, W)`` taken from the teacher's metadata. Decoding
(resize, grey/RGB conversion) happens *before* noising, because what is noised is
exactly what is sent.

Discovery is recursive and deterministic (sorted relative POSIX paths). An
optional ``class_name/`` layout is ignored: directory names are never read as
labels and nothing but LDP releases ever leaves the machine. Files that cannot be
used (not an image, zero bytes, truncated or undecodable, more pixels than the
limit, symlinks leaving the folder) are skipped and listed with a reason; a
missing or empty folder is a :class:`DataError` with a one-line message.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from .records import DiskRecords

IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
)
#: Largest accepted image, in pixels (width x height) of the *file*, before resizing.
#: Guards against decompression bombs; Pillow's own limit is also turned into an error.
DEFAULT_MAX_PIXELS = 40_000_000


class DataError(ValueError):
    """A problem with the private folder as a whole (missing, empty, nothing readable).

    The message is one line and names the folder.
    """


class ImageDecodeError(Exception):
    """One file could not be used; ``reason`` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def printable_path(rel: str) -> str:
    """``rel`` as it can be written to a UTF-8 file or report.

    A file name that is not valid UTF-8 reaches Python with its undecodable bytes as
    surrogate escapes; such a name is kept for opening the file, and shown with
    ``\\xNN`` escapes wherever it is written (labels, reports).
    """
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return rel


@dataclass(frozen=True)
class Skipped:
    """A file (or directory) left out, with the reason. ``path`` is relative to the folder."""

    path: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"path": printable_path(self.path), "reason": self.reason}


@dataclass(frozen=True)
class Discovery:
    """Result of scanning a folder: candidate image files and what was left out."""

    root: Path
    files: tuple[str, ...]
    skipped: tuple[Skipped, ...]


@dataclass(frozen=True)
class DecodedFolder:
    """What decoding a folder found: ``paths[i]`` (relative POSIX path under ``root``) is record ``i``;
    ``skipped``: files that were not used, with reasons (discovery and decoding together, sorted by path)."""

    root: Path
    paths: tuple[str, ...]
    skipped: tuple[Skipped, ...]

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def printable_paths(self) -> tuple[str, ...]:
        """``paths`` as written to labels and reports (see :func:`printable_path`)."""
        return tuple(printable_path(p) for p in self.paths)

    @property
    def escaped_paths(self) -> tuple[str, ...]:
        """The printable forms of the file names that are not valid UTF-8 (the report lists them)."""
        return tuple(q for p, q in zip(self.paths, self.printable_paths, strict=True) if p != q)


@dataclass(frozen=True)
class PrivateImages(DecodedFolder):
    """Decoded private records in memory: ``records`` float32 ``(N, C, H, W)`` in ``[0, 1]``, row ``i`` from ``paths[i]``."""

    records: torch.Tensor


@dataclass(frozen=True)
class SpooledImages(DecodedFolder):
    """Decoded private records spooled to disk (:class:`~ldpclient.records.DiskRecords`), row ``i`` from ``paths[i]``.

    ``records`` holds the values ``convert`` gave (see :func:`spool_private_folder`);
    close it (or the ``SpooledImages``) when done.
    """

    records: DiskRecords

    def close(self) -> None:
        self.records.close()

    def __enter__(self) -> "SpooledImages":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def discover_images(root: str | os.PathLike[str]) -> Discovery:
    """List image files under ``root`` recursively, in sorted relative-path order.

    Does not decode anything. Non-image extensions, hidden entries, zero-byte files,
    broken symlinks and symlinks whose target lies outside ``root`` are returned
    in ``skipped``. Symlinked directories are not descended into (their targets,
    when inside ``root``, are scanned directly), which also rules out cycles.
    Raises :class:`DataError` when ``root`` is missing or not a directory.
    """
    root_path = Path(root)
    if not root_path.exists():
        raise DataError(f"private folder {str(root_path)!r} does not exist")
    if not root_path.is_dir():
        raise DataError(f"private folder {str(root_path)!r} is not a directory")
    real_root = root_path.resolve()
    files: list[str] = []
    skipped: list[Skipped] = []
    for dirpath, dirnames, filenames in os.walk(root_path, followlinks=False, onerror=None):
        here = Path(dirpath)
        kept_dirs = []
        for d in dirnames:
            p = here / d
            rel = p.relative_to(root_path).as_posix()
            if d.startswith("."):
                skipped.append(Skipped(rel + "/", "hidden directory"))
            elif p.is_symlink():
                target = p.resolve()
                if not _inside(target, real_root):
                    skipped.append(Skipped(rel + "/", "symlink leaves the folder"))
                else:
                    skipped.append(Skipped(rel + "/", "symlinked directory (its target is scanned directly)"))
            else:
                kept_dirs.append(d)
        dirnames[:] = sorted(kept_dirs)
        for name in filenames:
            p = here / name
            rel = p.relative_to(root_path).as_posix()
            reason = _file_problem(p, name, real_root)
            if reason is None:
                files.append(rel)
            else:
                skipped.append(Skipped(rel, reason))
    return Discovery(root_path, tuple(sorted(files)), tuple(sorted(skipped, key=lambda s: s.path)))


def _file_problem(p: Path, name: str, real_root: Path) -> str | None:
    if name.startswith("."):
        return "hidden file"
    if p.suffix.lower() not in IMAGE_EXTENSIONS:
        return f"not an image file extension ({p.suffix or 'none'})"
    if p.is_symlink():
        try:
            os.stat(p)
        except OSError as exc:
            return "symlink loop" if exc.errno == errno.ELOOP else "broken symlink"
        if not _inside(p.resolve(), real_root):
            return "symlink leaves the folder"
    if not p.is_file():
        return "not a regular file"
    try:
        size = p.stat().st_size
    except OSError as exc:
        return f"cannot stat ({exc.strerror or exc})"
    if size == 0:
        return "empty file (0 bytes)"
    return None


#: Largest image file read (bytes): a file is read whole, once, to hash and decode it.
MAX_FILE_BYTES = 256 * 2**20


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
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ImageDecodeError(f"cannot read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
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


def decode_image(
    path: str | os.PathLike[str] | bytes,
    input_shape: Sequence[int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> torch.Tensor:
    """Decode one image file (a path, or the file's bytes) to float32 ``(C, H, W)`` in ``[0, 1]``.

    ``input_shape`` is ``(C, H, W)`` with C = 1 (grey) or 3 (RGB). The image is
    converted to that colour mode (alpha dropped; 16-bit grey scaled from
    0..65535), then resized to ``H x W`` with bilinear filtering (aspect ratio not
    kept). Multi-frame files (GIF, TIFF) use their first frame. Raises
    :class:`ImageDecodeError` with a short reason for any file that cannot be used,
    including files with more than ``max_pixels`` pixels (checked from the header,
    before decoding) and Pillow's decompression-bomb warning or error.
    """
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
    except ImageDecodeError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageDecodeError(f"decompression bomb refused ({exc})") from None
    except UnidentifiedImageError:
        raise ImageDecodeError("not a readable image (unknown format)") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ImageDecodeError(f"cannot decode image ({msg})") from None
    if arr.shape[0] != h or arr.shape[1] != w:
        arr = _resize(arr, h, w)
    out = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))).float()
    if not torch.isfinite(out).all():
        raise ImageDecodeError("image has non-finite values")
    return out.clamp_(0.0, 1.0)


def _check_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or shape[0] not in (1, 3) or shape[1] < 1 or shape[2] < 1:
        raise ValueError(f"input shape must be (C, H, W) with C in {{1, 3}}, got {tuple(input_shape)}")
    return shape[0], shape[1], shape[2]


def _to_array(img: Image.Image, channels: int) -> np.ndarray:
    """HWC float32 array in [0, 1] with the requested number of channels."""
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
        arr = np.asarray(img, dtype=np.float32) / 255.0
        if arr.ndim == 2:
            arr = arr[:, :, None]
    if arr.shape[2] != channels:
        if channels == 3:
            arr = np.repeat(arr[:, :, :1], 3, axis=2)
        else:  # float/16-bit colour cannot happen (those modes are single-channel)
            arr = arr.mean(axis=2, keepdims=True)
    return np.clip(arr, 0.0, 1.0)


def _resize(arr: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear (antialiased when shrinking) resize of an HWC float array, channel by channel."""
    planes = [
        np.asarray(Image.fromarray(np.ascontiguousarray(arr[:, :, k], dtype=np.float32)).resize((w, h), Image.Resampling.BILINEAR))
        for k in range(arr.shape[2])
    ]
    return np.stack(planes, axis=2)


def load_private_folder(
    root: str | os.PathLike[str],
    input_shape: Sequence[int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    progress: Callable[[int, int], None] | None = None,
) -> PrivateImages:
    """Discover and decode every usable image under ``root`` (see :func:`decode_image`), in memory.

    ``progress(done, total)`` is called after each file. Raises :class:`DataError`
    when the folder is missing, holds no image files, or none of them decodes.
    Memory: O(N x record); :func:`spool_private_folder` is the O(chunk) form.
    """
    tensors: list[torch.Tensor] = []
    listing = _decode_folder(root, input_shape, max_pixels, progress, lambda record, _sid: tensors.append(record))
    return PrivateImages(listing.root, listing.paths, listing.skipped, torch.stack(tensors))


#: Records decoded per chunk before they are converted and spooled (bounds memory while decoding) ...
SPOOL_CHUNK = 1024
#: ... and at most this many elements per chunk, whatever the teacher's input shape (16 MB of float32).
SPOOL_CHUNK_ELEMENTS = 2**22


def spool_chunk(input_shape: Sequence[int]) -> int:
    """Records decoded per chunk for records of ``input_shape``: :data:`SPOOL_CHUNK`, fewer for large records."""
    elements = 1
    for s in input_shape:
        elements *= int(s)
    return max(1, min(SPOOL_CHUNK, SPOOL_CHUNK_ELEMENTS // max(1, elements)))


def spool_private_folder(
    root: str | os.PathLike[str],
    input_shape: Sequence[int],
    *,
    convert: Callable[[torch.Tensor], torch.Tensor] | None = None,
    directory: str | os.PathLike[str] | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    progress: Callable[[int, int], None] | None = None,
) -> SpooledImages:
    """Decode every usable image under ``root`` into a :class:`DiskRecords` spool file in ``directory``.

    Same files, order, skips and errors as :func:`load_private_folder`; ``convert`` maps each
    chunk of decoded records (float32 ``(B, C, H, W)`` in ``[0, 1]``) to the stored values
    (e.g. the teacher's value range). Each record's source id (:func:`source_id` of its file) is
    kept with it, so the ledger sums its spend per image file. Memory: O(:data:`SPOOL_CHUNK` records)
    plus 32 bytes a record, whatever N is.
    """
    spool = DiskRecords(_check_shape(input_shape), directory)
    per_chunk = spool_chunk(input_shape)
    chunk: list[torch.Tensor] = []
    ids: list[bytes] = []

    def flush() -> None:
        if chunk:
            block = torch.stack(chunk)
            spool.append(convert(block) if convert is not None else block, ids=list(ids))
            chunk.clear()
            ids.clear()

    def add(record: torch.Tensor, sid: bytes) -> None:
        chunk.append(record)
        ids.append(sid)
        if len(chunk) >= per_chunk:
            flush()

    try:
        listing = _decode_folder(root, input_shape, max_pixels, progress, add)
        flush()
    except BaseException:
        spool.close()
        raise
    return SpooledImages(listing.root, listing.paths, listing.skipped, spool)


def _decode_folder(
    root: str | os.PathLike[str],
    input_shape: Sequence[int],
    max_pixels: int,
    progress: Callable[[int, int], None] | None,
    sink: Callable[[torch.Tensor, bytes], None],
) -> DecodedFolder:
    """Decode the folder's images in path order, handing each record and its :func:`source_id` to ``sink``;
    the listing (DataError if none)."""
    shape = _check_shape(input_shape)
    found = discover_images(root)
    if not found.files:
        extra = f" ({len(found.skipped)} other entries skipped)" if found.skipped else ""
        raise DataError(
            f"private folder {str(found.root)!r} contains no image files "
            f"({', '.join(sorted(IMAGE_EXTENSIONS))}){extra}"
        )
    paths: list[str] = []
    skipped = list(found.skipped)
    for k, rel in enumerate(found.files):
        try:
            data = read_image_file(found.root / rel)
            sink(decode_image(data, shape, max_pixels=max_pixels), source_id(data))
            paths.append(rel)
        except ImageDecodeError as exc:
            skipped.append(Skipped(rel, exc.reason))
        if progress is not None:
            progress(k + 1, len(found.files))
    if not paths:
        first = skipped[0] if skipped else None
        detail = f"; e.g. {first.path}: {first.reason}" if first else ""
        raise DataError(
            f"no readable image in private folder {str(found.root)!r} "
            f"({len(found.files)} image files, all skipped{detail})"
        )
    return DecodedFolder(found.root, tuple(paths), tuple(sorted(skipped, key=lambda s: s.path)))


def to_uint8_image(values: torch.Tensor) -> Image.Image:
    """A ``(C, H, W)`` tensor in ``[0, 1]`` units as a PIL image (values clipped, rounded to 0..255).

    Used for noised copies and previews: applied to a release it is
    post-processing (clip + quantise) and costs no privacy.
    """
    if values.dim() != 3 or values.shape[0] not in (1, 3):
        raise ValueError(f"expected a (C, H, W) tensor with C in {{1, 3}}, got shape {tuple(values.shape)}")
    arr = (values.detach().float().clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)
    hwc = arr.permute(1, 2, 0).cpu().numpy()
    if hwc.shape[2] == 1:
        return Image.fromarray(np.ascontiguousarray(hwc[:, :, 0]))
    return Image.fromarray(np.ascontiguousarray(hwc))


def to_value_range(records: torch.Tensor, value_range: tuple[float, float], *, integer: bool = False) -> torch.Tensor:
    """Decoded images (float [0, 1]) in the teacher's value range; ``integer``: rounded to whole units
    (for an integer domain such as 0..255: the 8-bit pixel values the files held)."""
    lo, hi = float(value_range[0]), float(value_range[1])
    out = records if (lo, hi) == (0.0, 1.0) else records * (hi - lo) + lo
    return torch.round(out) if integer else out


def check_private_folder(path: Path) -> None:
    """Raise DataError (one line) when ``path`` is missing, not a folder, or holds no image files."""
    found = discover_images(path)
    if not found.files:
        raise DataError(
            f"private folder {str(path)!r} contains no image files ({', '.join(sorted(IMAGE_EXTENSIONS))})"
        )
