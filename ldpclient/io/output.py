"""Local output files that any layer may write: atomic text and JSON writes (secrets scrubbed, peer text
made safe), the version stamp reports carry, and the preview grid of images for the data owner's own eyes.

A leaf module: ``run`` (reports, label files) and ``audit`` (its report and figure) both write through it.
Files are written atomically (temporary file, fsync, rename, fsync of the folder), so an interrupted run, a full
disk or a power cut never leaves a half-written output behind: the path holds the old file, the new one, or nothing.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from ..names import VERSION
from .text import json_text, redact

if TYPE_CHECKING:  # torch and Pillow are imported lazily: `ldpclient --help` should not wait for them
    import torch
    from PIL import Image


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    atomic_write_lines(path, (text,))


def atomic_write_lines(path: Path, pieces: Iterable[str]) -> None:
    """Write ``pieces`` in order to ``path`` via a temporary file in the same directory, fsync and a rename."""
    def write(fd: int) -> None:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.writelines(pieces)
            fh.flush()
            os.fsync(fh.fileno())

    _atomic_write(path, write)


def atomic_write_bytes(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory, fsync and a rename. ``sync=False``:
    no fsync (whole or absent after a kill or a full disk, not necessarily after a power cut), for files written
    by the thousand that a re-run makes again at no cost (2 ms a file on this project's machines with it)."""
    def write(fd: int) -> None:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())

    _atomic_write(path, write, sync=sync)


def atomic_save_image(path: Path, image: "Image.Image", format: str = "PNG", *, sync: bool = True) -> None:
    """Save the Pillow ``image`` to ``path`` (as ``format``) atomically (:func:`atomic_write_bytes`)."""
    import io

    buffer = io.BytesIO()
    image.save(buffer, format=format)
    atomic_write_bytes(path, buffer.getvalue(), sync=sync)


def atomic_torch_save(path: Path, obj: object) -> None:
    """``torch.save`` ``obj`` to ``path`` via a temporary file in the same directory (readable by this user only,
    as ``mkstemp`` makes it), fsync and a rename: two writers at once each leave a whole file."""
    import torch

    def write(fd: int) -> None:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())

    _atomic_write(path, write)


def _atomic_write(path: Path, write: Callable[[int], None], *, sync: bool = True) -> None:
    """``write`` the open descriptor of a temporary file of this writer's own beside ``path``, then rename it to
    ``path``: two writers at once each leave a whole file, an interrupted one none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        write(fd)
        os.replace(tmp, path)
        if sync:
            fsync_folder(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: not every platform opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every form of each secret in ``text`` with ``***`` (:func:`ldpclient.io.text.redact`)."""
    return redact(text, secrets)


def _jsonable(obj: object) -> object:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    torch_mod = sys.modules.get("torch")  # no tensor can exist unless torch was imported
    if torch_mod is not None and isinstance(obj, torch_mod.Tensor):
        if obj.numel() != 1:
            raise TypeError("refusing to put a multi-element tensor into a report (reports hold no pixels)")
        return obj.item()
    if hasattr(obj, "as_dict"):
        return _jsonable(obj.as_dict())
    raise TypeError(f"cannot put {type(obj).__name__} into a JSON report")


def to_json(obj: object, *, secrets: Iterable[str | None] = (), indent: int | None = 2) -> str:
    """Serialise a report to JSON text (tensors of one element become numbers; others are refused), secrets scrubbed."""
    return json_text(
        scrub(json.dumps(_jsonable(obj), indent=indent, ensure_ascii=False, allow_nan=False), list(secrets))
    )


def write_json(path: str | os.PathLike[str], obj: object, *, secrets: Iterable[str | None] = ()) -> Path:
    """Write a JSON report atomically (see :func:`to_json`)."""
    out = Path(path)
    atomic_write_text(out, to_json(obj, secrets=secrets) + "\n")
    return out


def versions() -> dict[str, str]:
    """Versions of ldpclient, Python, torch and the libraries that shape results."""
    import numpy
    import PIL
    import torch

    return {
        "ldpclient": VERSION,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pillow": PIL.__version__,
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def preview_grid(rows: "Sequence[Sequence[torch.Tensor]]", *, scale: int = 4, pad: int = 2) -> "Image.Image":
    """A PNG-ready grid: one row per list (e.g. clean / noised / augmented), one cell per ``(C, H, W)`` tensor.

    Values are in ``[0, 1]`` units and clipped; cells are upscaled ``scale`` times with
    nearest neighbour so small images stay visible. Grey cells are shown as grey in an
    RGB grid. For the data owner's own eyes: ``ldpclient noise``'s preview and the audit's figure.
    """
    import torch
    from PIL import Image

    if not rows or not any(len(r) for r in rows):
        raise ValueError("preview grid needs at least one image")
    if scale < 1 or pad < 0:
        raise ValueError("scale must be >= 1 and pad >= 0")
    cells = [[c.detach().float() for c in row] for row in rows]
    h = max(c.shape[-2] for row in cells for c in row) * scale
    w = max(c.shape[-1] for row in cells for c in row) * scale
    ncols = max(len(row) for row in cells)
    grid = Image.new("RGB", (ncols * (w + pad) + pad, len(cells) * (h + pad) + pad), (255, 255, 255))
    for r, row in enumerate(cells):
        for k, cell in enumerate(row):
            if cell.dim() != 3 or cell.shape[0] not in (1, 3):
                raise ValueError(f"preview cells must be (C, H, W) with C in {{1, 3}}, got {tuple(cell.shape)}")
            rgb = cell.expand(3, -1, -1) if cell.shape[0] == 1 else cell
            arr = (rgb.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
            img = Image.fromarray(arr).resize((w, h), Image.Resampling.NEAREST)
            grid.paste(img, (pad + k * (w + pad), pad + r * (h + pad)))
    return grid
