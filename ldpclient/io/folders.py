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
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from PIL import Image

from .decoding import (
    DEFAULT_MAX_PIXELS,
    MAX_FILE_BYTES,
    DecodedRun,
    ImageDecodeError,
    decode_array,
    decode_files,
    ignore_interrupts,
    read_image_file,
    source_id,
)
from .decoding import _check_shape as _check_shape
from .records import DiskRecords

IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
)
#: Folders with at least this many image files are decoded by a pool of processes (one per core);
#: smaller ones in this process (starting the pool would cost more than it saves).
POOL_MIN_FILES = 4096


class DataError(ValueError):
    """A problem with the private folder as a whole (missing, empty, nothing readable).

    The message is one line and names the folder.
    """


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
    #: how messages name the folder (``private folder``, ``--public folder``)
    what: str = "private folder"


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
    """Decoded private records in memory: ``records`` float32 ``(N, C, H, W)`` in ``[0, 1]``, row ``i`` from
    ``paths[i]``."""

    records: torch.Tensor


@dataclass(frozen=True)
class SpooledImages(DecodedFolder):
    """Decoded private records spooled to disk (:class:`~ldpclient.io.records.DiskRecords`), row ``i`` from
    ``paths[i]``.

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


def discover_images(
    root: str | os.PathLike[str], *, limit: int | None = None, what: str = "private folder"
) -> Discovery:
    """List image files under ``root`` recursively, in sorted relative-path order.

    Does not decode anything. Non-image extensions, hidden entries, zero-byte files,
    broken symlinks and symlinks whose target lies outside ``root`` are returned
    in ``skipped``. Symlinked directories are not descended into (their targets,
    when inside ``root``, are scanned directly), which also rules out cycles.
    ``limit``: stop once that many image files are found (a partial listing, for a check
    that only needs to know whether the folder holds any). Raises :class:`DataError`
    when ``root`` is missing or not a directory (the message calls it ``what``).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 (or None for every file), got {limit}")
    root_path = Path(root)
    if not root_path.exists():
        raise DataError(f"{what} {str(root_path)!r} does not exist")
    if not root_path.is_dir():
        raise DataError(f"{what} {str(root_path)!r} is not a directory")
    real_root = root_path.resolve()
    files: list[str] = []
    skipped: list[Skipped] = []
    pending = [""]  # relative directories still to list ("" is the root)
    while pending and (limit is None or len(files) < limit):
        rel_dir = pending.pop()
        try:
            with os.scandir(root_path / rel_dir if rel_dir else root_path) as it:
                entries = list(it)
        except OSError:  # as os.walk: a directory that cannot be listed is passed over
            continue
        for entry in entries:  # DirEntry answers type questions from the listing: one stat per image file
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if _is_dir(entry):
                reason = _directory_problem(entry, real_root)
                if reason is None:
                    pending.append(rel)
                else:
                    skipped.append(Skipped(rel + "/", reason))
                continue
            reason = _file_problem(entry, real_root)
            if reason is None:
                files.append(rel)
                if limit is not None and len(files) >= limit:
                    break
            else:
                skipped.append(Skipped(rel, reason))
    return Discovery(root_path, tuple(sorted(files)), tuple(sorted(skipped, key=lambda s: s.path)), what)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """A directory, or a symlink to one (as ``os.walk`` sorts them)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _directory_problem(entry: os.DirEntry[str], real_root: Path) -> str | None:
    if entry.name.startswith("."):
        return "hidden directory"
    if entry.is_symlink():
        if not _inside(Path(entry.path).resolve(), real_root):
            return "symlink leaves the folder"
        return "symlinked directory (its target is scanned directly)"
    return None


def _suffix(name: str) -> str:
    """The file name's extension as :attr:`pathlib.PurePath.suffix` gives it ("" for none)."""
    i = name.rfind(".")
    return name[i:] if 0 < i < len(name) - 1 else ""


def _file_problem(entry: os.DirEntry[str], real_root: Path) -> str | None:
    name = entry.name
    if name.startswith("."):
        return "hidden file"
    suffix = _suffix(name)
    if suffix.lower() not in IMAGE_EXTENSIONS:
        return f"not an image file extension ({suffix or 'none'})"
    if entry.is_symlink():
        try:
            os.stat(entry.path)
        except OSError as exc:
            return "symlink loop" if exc.errno == errno.ELOOP else "broken symlink"
        if not _inside(Path(entry.path).resolve(), real_root):
            return "symlink leaves the folder"
    try:
        if not entry.is_file():
            return "not a regular file"
        size = entry.stat().st_size
    except OSError as exc:
        return f"cannot stat ({exc.strerror or exc})"
    if size == 0:
        return "empty file (0 bytes)"
    return None


def decode_image(
    path: str | os.PathLike[str] | bytes,
    input_shape: Sequence[int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> torch.Tensor:
    """Decode one image file (a path, or the file's bytes) to float32 ``(C, H, W)`` in ``[0, 1]``
    (see :func:`ldpclient.io.decoding.decode_array` for the conversion and every refusal)."""
    return torch.from_numpy(decode_array(path, input_shape, max_pixels=max_pixels))


def load_private_folder(
    root: str | os.PathLike[str],
    input_shape: Sequence[int],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> PrivateImages:
    """Discover and decode every usable image under ``root`` (see :func:`decode_image`), in memory.

    ``progress(done, total)`` is called as files are done (files counted, in order). Raises
    :class:`DataError` when the folder is missing, holds no image files, or none of them decodes.
    ``workers``: decoding processes (default: one per core for large folders, see
    :data:`POOL_MIN_FILES`; 1: this process only). Memory: O(N x record);
    :func:`spool_private_folder` is the O(chunk) form.
    """
    blocks: list[torch.Tensor] = []
    listing = _decode_folder(root, input_shape, max_pixels, progress,
                             lambda block, _ids, _contents: blocks.append(block), workers)
    return PrivateImages(listing.root, listing.paths, listing.skipped, torch.cat(blocks))


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
    root: str | os.PathLike[str] | Discovery,
    input_shape: Sequence[int],
    *,
    convert: Callable[[torch.Tensor], torch.Tensor] | None = None,
    directory: str | os.PathLike[str] | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> SpooledImages:
    """Decode every usable image under ``root`` (a folder, or its :func:`discover_images` listing, which is then
    not listed again) into a :class:`DiskRecords` spool file in ``directory``.

    Same files, order, skips and errors as :func:`load_private_folder`; ``convert`` maps each
    chunk of decoded records (float32 ``(B, C, H, W)`` in ``[0, 1]``) to the stored values
    (e.g. the teacher's value range). Each record's source id (:func:`source_id` of its file) is
    kept with it, so the ledger sums its spend per image file, and so is what it shows (:func:`content_id`), so that
    the ledger knows the same image under another file (:meth:`~ldpclient.privacy.ledger.Ledger.same_images`).
    Memory: O(:func:`spool_chunk` records) per decoding process plus 64 bytes a record, whatever N is.
    """
    spool = DiskRecords(_check_shape(input_shape), directory)

    def add(block: torch.Tensor, ids: list[bytes], contents: list[bytes]) -> None:
        spool.append(convert(block) if convert is not None else block, ids=ids, contents=contents)

    try:
        listing = _decode_folder(root, input_shape, max_pixels, progress, add, workers)
    except BaseException:
        spool.close()
        raise
    return SpooledImages(listing.root, listing.paths, listing.skipped, spool)


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def decoding_workers(files: int, workers: int | None = None) -> int:
    """Decoding processes for a folder of ``files`` image files: ``workers`` when given (>= 1), else one per
    core for folders of at least :data:`POOL_MIN_FILES` files and 1 (this process) below."""
    if workers is not None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        return workers
    return available_cores() if files >= POOL_MIN_FILES else 1


def _decoded_runs(
    root: Path,
    runs: Sequence[Sequence[str]],
    shape: tuple[int, int, int],
    max_pixels: int,
    workers: int,
    done: Callable[[int], None],
) -> Iterator[DecodedRun]:
    """The runs of files decoded, in order: here, or by ``workers`` processes with at most two runs each in
    flight (bounded memory). ``done(k)``: k more files are done (per file here, per run from the pool).
    A process that dies is a one-line :class:`DataError`; Ctrl-C stops the pool."""
    if workers <= 1:
        for rels in runs:
            yield decode_files(str(root), rels, shape, max_pixels, on_file=lambda: done(1))
        return
    # fork, as torch's DataLoader does on Linux: the processes run numpy and Pillow only (no torch, no
    # threads of ours), and unlike spawn/forkserver they never re-import the caller's main module
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=ignore_interrupts)
    pending: list[Future[DecodedRun]] = []
    try:
        next_run = 0
        while next_run < len(runs) or pending:
            while next_run < len(runs) and len(pending) < 2 * workers:
                pending.append(pool.submit(decode_files, str(root), runs[next_run], shape, max_pixels))
                next_run += 1
            run = pending.pop(0).result()
            done(len(run[3]) + len(run[4]))
            yield run
    except BrokenProcessPool:
        raise DataError(
            f"decoding the images of {str(root)!r} stopped: a decoding process died (out of memory, or killed); "
            "nothing was sent"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _decode_folder(
    root: str | os.PathLike[str] | Discovery,
    input_shape: Sequence[int],
    max_pixels: int,
    progress: Callable[[int, int], None] | None,
    sink: Callable[[torch.Tensor, list[bytes], list[bytes]], None],
    workers: int | None = None,
) -> DecodedFolder:
    """Decode the folder's images in path order, handing each block of records (float32 ``(B, C, H, W)``),
    their :func:`source_id` s and their :func:`content_id` s to ``sink``; the listing (DataError if none)."""
    shape = _check_shape(input_shape)
    found = root if isinstance(root, Discovery) else discover_images(root)
    if not found.files:
        extra = f" ({len(found.skipped)} other entries skipped)" if found.skipped else ""
        raise DataError(
            f"{found.what} {str(found.root)!r} contains no image files "
            f"({', '.join(sorted(IMAGE_EXTENSIONS))}){extra}"
        )
    per_run = spool_chunk(shape)
    runs = [found.files[s : s + per_run] for s in range(0, len(found.files), per_run)]
    paths: list[str] = []
    skipped = list(found.skipped)
    count = [0]

    def done(k: int) -> None:
        count[0] += k
        if progress is not None:
            progress(count[0], len(found.files))

    workers = decoding_workers(len(found.files), workers)
    for block, ids, contents, decoded, refused in _decoded_runs(found.root, runs, shape, max_pixels, workers, done):
        if decoded:
            sink(torch.from_numpy(block), ids, contents)
            paths.extend(decoded)
        skipped.extend(Skipped(rel, reason) for rel, reason in refused)
    if not paths:
        first = skipped[0] if skipped else None
        detail = f"; e.g. {first.path}: {first.reason}" if first else ""
        raise DataError(
            f"no readable image in {found.what} {str(found.root)!r} "
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


#: Image files of a folder :func:`check_private_folder` reads at most to find one it can decode.
PROBE_FILES = 64


def check_private_folder(path: Path, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
    """Raise DataError (one line) when ``path`` is missing, not a folder, holds no image files, or when none of its
    image files can be decoded (how many, and why the first cannot), before anything else is checked. It reads
    files until one decodes, :data:`PROBE_FILES` at most (a larger folder whose first ones are all unreadable is
    judged by its loading, which lists and decodes it in full)."""
    found = discover_images(path, limit=PROBE_FILES + 1)
    if not found.files:
        raise DataError(
            f"private folder {str(path)!r} contains no image files ({', '.join(sorted(IMAGE_EXTENSIONS))})"
        )
    probed = found.files[:PROBE_FILES]
    refused: list[tuple[str, str]] = []
    for rel in probed:
        decoded, skipped = decode_files(str(found.root), [rel], (1, 8, 8), max_pixels)[3:]
        if decoded:
            return
        refused.extend(skipped)
    if len(found.files) <= PROBE_FILES and refused:
        first, why = refused[0]
        raise DataError(f"no readable image in private folder {str(path)!r}: its {len(probed)} image file(s) cannot "
                        f"be decoded (e.g. {first!r}: {why})")


__all__ = [
    "DEFAULT_MAX_PIXELS", "IMAGE_EXTENSIONS", "MAX_FILE_BYTES", "POOL_MIN_FILES", "SPOOL_CHUNK", "DataError",
    "DecodedFolder", "Discovery", "ImageDecodeError", "PrivateImages", "Skipped", "SpooledImages", "available_cores",
    "PROBE_FILES", "check_private_folder", "decode_image", "decoding_workers", "discover_images", "load_private_folder",
    "printable_path", "read_image_file", "source_id", "spool_chunk", "spool_private_folder", "to_uint8_image",
    "to_value_range",
]
