"""Near copies of private images (issues 45 and 64): does the ledger's perceptual fingerprint refuse copies of a private
image offered as public, and never a distinct public image?

The code measured is the ledger's own (``ldpclient.privacy.ledger.fingerprint``): every private image's stored
fingerprint (:func:`stored_prints`, as a release stores it), a public image's (:func:`query`), and the
two-stage search over the stored ones (:func:`nearest`, in an SQLite table like the ledger's). For each set:

* **false refusals**: the set's held-out public images (``bench_adapt.public_images``: digits 359, MNIST 500,
  colour digits 500, CIFAR-10 5,000), none of them a private image, against every private image; a public image
  whose nearest cosine reaches ``NEAR`` would be refused.
* **catches**: copies of 200 private images made the way a user (or an attacker) makes them, at the teacher's
  shape: JPEG at quality 90 and 60, a 2x upscale, centre crops of 1, 2 and 3 pixels a side, an off-centre crop
  (2 pixels off the top and left), a 2-pixel shift (down and right, with wrap-around), brighter (x1.15), darker
  (x0.8), a gamma of 0.8, mirrored, turned by 90 and 180 degrees, mirrored and shifted 2 pixels, inverted, turned
  by 3, 5 and 8 degrees and cut to the square without empty corners (a photo editor's "straighten"), and for colour
  sets channels swapped (a recolouring) and greyscale (PIL's luma); the share of each whose nearest cosine reaches
  ``NEAR``.
* **a fuller table** (``--crowded``): CIFAR-10 with 16,000 images stored (the 1,000 private ones and 15,000 of
  the teacher's part): false refusals, and the copies the search's shift-blind stage must pick from a fuller block.
* **time**: a ledger release of 10,000 28x28 images (fingerprints included) beside fingerprinting them alone,
  fingerprinting 10,000 32x32 colour images and searching 5,000 public images among 100,000 stored fingerprints
  (one run; the machine's 2 cores), and the bytes a private image adds to the ledger.

    .venv/bin/python benchmarks/bench_fingerprint.py --dataset digits mnist colour-digits cifar10 \\
        --out benchmarks/results/fingerprint.jsonl
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402

from ldpclient.privacy.ledger import fingerprint as fp  # noqa: E402

PUBLIC = {"digits": 359, "mnist": 500, "colour-digits": 500, "cifar10": 5000}
COPIES = 200
#: The copies measured again in a fuller table (``--crowded``).
CROWDED_KINDS = ("jpeg q60", "off-centre crop 2 px", "shift 2 px")


def _pil(x: torch.Tensor) -> Image.Image:
    a = x.clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).numpy()
    return Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a)


def _back(im: Image.Image, c: int, h: int, w: int) -> torch.Tensor:
    """A copy decoded back at the teacher's shape, as ``label`` decodes a file (bilinear resize)."""
    im = im.convert("L" if c == 1 else "RGB").resize((w, h), Image.BILINEAR)
    a = torch.from_numpy(np.asarray(im, dtype=np.float32) / 255.0)
    return a[None] if c == 1 else a.permute(2, 0, 1)


def _jpeg(quality: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def make(x: torch.Tensor) -> torch.Tensor:
        buf = io.BytesIO()
        _pil(x).save(buf, "JPEG", quality=quality)
        return _back(Image.open(buf), *x.shape)
    return make


def _crop(top: int, left: int, bottom: int, right: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def make(x: torch.Tensor) -> torch.Tensor:
        c, h, w = x.shape
        return _back(_pil(x).crop((left, top, w - right, h - bottom)), c, h, w)
    return make


def _turn_crop(degrees: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Turned about the centre (PIL, bilinear), cut to the centred square the turn leaves no corner empty in."""
    def make(x: torch.Tensor) -> torch.Tensor:
        c, h, w = x.shape
        turned = _pil(x).rotate(degrees, resample=Image.BILINEAR)
        t = math.radians(degrees)
        keep = 1 / (abs(math.cos(t)) + abs(math.sin(t)))
        top, left = math.ceil(h * (1 - keep) / 2), math.ceil(w * (1 - keep) / 2)
        return _back(turned.crop((left, top, w - left, h - top)), c, h, w)
    return make


def _greyscale(x: torch.Tensor) -> torch.Tensor:
    """As a photo editor's greyscale (PIL's ITU-R 601 luma), decoded back in colour."""
    return _back(_pil(x).convert("L").convert("RGB"), *x.shape)


COPY_KINDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "jpeg q90": _jpeg(90),
    "jpeg q60": _jpeg(60),
    "2x upscale": lambda x: _back(_pil(x).resize((2 * x.shape[2], 2 * x.shape[1]), Image.BICUBIC), *x.shape),
    "centre crop 1 px": _crop(1, 1, 1, 1),
    "centre crop 2 px": _crop(2, 2, 2, 2),
    "centre crop 3 px": _crop(3, 3, 3, 3),
    "off-centre crop 2 px": _crop(2, 2, 0, 0),
    "shift 2 px": lambda x: torch.roll(x, (2, 2), (1, 2)),
    "brighter x1.15": lambda x: (x * 1.15).clamp(0, 1),
    "darker x0.8": lambda x: x * 0.8,
    "gamma 0.8": lambda x: x.clamp(0, 1) ** 0.8,
    "channels swapped": lambda x: x.flip(0),
    "mirrored": lambda x: x.flip(2),
    "turned 90": lambda x: x.rot90(1, (1, 2)),
    "turned 180": lambda x: x.rot90(2, (1, 2)),
    "mirrored, shift 2 px": lambda x: torch.roll(x.flip(2), (2, 2), (1, 2)),
    "inverted": lambda x: 1 - x,
    "greyscale": _greyscale,
    "turned 3, cropped": _turn_crop(3),
    "turned 5, cropped": _turn_crop(5),
    "turned 8, cropped": _turn_crop(8),
}
#: Copies that only a colour image can be made into.
COLOUR_KINDS = ("channels swapped", "greyscale")


def _store(private: torch.Tensor) -> sqlite3.Connection:
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE fingerprints (source_key BLOB PRIMARY KEY, print BLOB NOT NULL)")
    fp.store(c, [k.to_bytes(8, "big") for k in range(len(private))], private)
    return c


def measure(name: str, stored: int | None = None) -> dict[str, Any]:
    """One set's row: false refusals of its public images and the copies caught. With ``stored``: that many images
    in the table, the 1,000 private ones and the teacher's part of the set (none of them public), and only
    :data:`CROWDED_KINDS` of copies (the ones the shift-blind stage must pick from a fuller block)."""
    label, teacher, _, px, _ = bench_adapt.load_dataset(name, 28)
    private = px[:1000] if name != "digits" else px
    table = private if stored is None else torch.cat([private, teacher[: stored - len(private)]])
    public = bench_adapt.public_images(name, 28, PUBLIC[name])
    c = _store(table)
    near_public = fp.nearest(fp.stored(c), fp.query(public))
    copies: dict[str, float] = {}
    for kind in COPY_KINDS if stored is None else CROWDED_KINDS:
        if kind in COLOUR_KINDS and private.shape[1] == 1:
            continue
        made = torch.stack([COPY_KINDS[kind](private[k]) for k in range(COPIES)])
        # each copy against every stored image: caught when its nearest reaches NEAR (its own image, or another)
        copies[kind] = float((fp.nearest(fp.stored(c), fp.query(made)) >= fp.NEAR).float().mean())
    return {
        "dataset": label, "private": len(table), "public": len(public), "near": fp.NEAR,
        "public_refused": int((near_public >= fp.NEAR).sum()), "public_max_cosine": float(near_public.max()),
        "public_p99_cosine": float(near_public.quantile(0.99)), "copies_caught": copies,
        **({"crowded": True} if stored is not None else {}),
    }


def _search_seconds(module: Any, stored: torch.Tensor, public: torch.Tensor) -> tuple[float, int]:
    """Seconds ``module`` (a fingerprint module: this one, or an earlier one's copy) takes to search ``public`` among
    ten copies of ``stored`` kept as its ledger keeps them, and the bytes it keeps per image."""
    blobs = module.stored_prints(stored)
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE fingerprints (source_key BLOB PRIMARY KEY, print BLOB NOT NULL)")
    for r in range(10):  # 100,000 stored fingerprints
        c.executemany("INSERT INTO fingerprints VALUES (?, ?)",
                      ((int(r * 10_000 + k).to_bytes(8, "big"), b) for k, b in enumerate(blobs)))
    t = time.perf_counter()
    module.nearest(module.stored(c) if hasattr(module, "stored") else c, module.query(public))  # earlier: (c, query)
    return time.perf_counter() - t, len(blobs[0])


def _module_from(path: Path) -> Any:
    """An earlier fingerprint module from a copy of its file (e.g. ``git show REV:ldpclient/privacy/ledger/
    fingerprint.py``), loaded inside the ledger's package, where its relative imports resolve."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ldpclient.privacy.ledger._earlier_fingerprint", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timing(earlier: Path | None = None) -> dict[str, Any]:
    import tempfile

    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import Ledger

    grey = torch.rand(10_000, 1, 28, 28)
    with tempfile.TemporaryDirectory() as d, Ledger(Path(d) / "ledger.sqlite") as ledger:
        t = time.perf_counter()
        # 100 per image: the default's epsilon
        ledger.release(laplace(100 / 49, reduction=4, per="element"), grey, scope="t")
        t_release = time.perf_counter() - t
    t = time.perf_counter()
    fp.stored_prints(grey)
    t_grey = time.perf_counter() - t
    images = torch.rand(10_000, 3, 32, 32)
    t = time.perf_counter()
    fp.stored_prints(images)
    t_store = time.perf_counter() - t
    public = torch.rand(5_000, 3, 32, 32)
    search, size = _search_seconds(fp, images, public)
    row = {"dataset": "timing", "release_10k_grey_s": t_release, "prints_10k_grey_s": t_grey,
           "stored_prints_per_10k_s": t_store, "search_5k_in_100k_s": search, "bytes_per_private_image": size}
    if earlier is not None:  # the same search by the earlier module, on the same images, in this run
        row["earlier_search_5k_in_100k_s"], row["earlier_bytes_per_private_image"] = _search_seconds(
            _module_from(earlier), images, public)
    return row


def table(rows: list[dict[str, Any]]) -> None:
    kinds = list(COPY_KINDS)
    print("| set | stored | public | public refused | public max cosine | " + " | ".join(kinds) + " |")
    print("|---" * (5 + len(kinds)) + "|")
    for r in rows:
        if r["dataset"] == "timing":
            continue
        cells = [f"{100 * r['copies_caught'][k]:.0f}%" if k in r["copies_caught"] else "-" for k in kinds]
        print(f"| {r['dataset']} | {r['private']} | {r['public']} | {r['public_refused']} | "
              f"{r['public_max_cosine']:.4f} | " + " | ".join(cells) + " |")
    for r in rows:
        if r["dataset"] == "timing":
            print(f"\na ledger release of 10,000 28x28 images {r['release_10k_grey_s']:.2f} s, of which their "
                  f"fingerprints {r['prints_10k_grey_s']:.2f} s")
            print(f"fingerprints of 10,000 32x32 images: {r['stored_prints_per_10k_s']:.2f} s; 5,000 public "
                  f"searched among 100,000 stored: {r['search_5k_in_100k_s']:.2f} s; "
                  f"{r['bytes_per_private_image']} bytes per private image")
            if "earlier_search_5k_in_100k_s" in r:
                print(f"the earlier module, the same search in the same run: {r['earlier_search_5k_in_100k_s']:.2f} s "
                      f"(now {r['search_5k_in_100k_s'] / r['earlier_search_5k_in_100k_s']:.1f} times as long); "
                      f"{r['earlier_bytes_per_private_image']} bytes per private image")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", nargs="+", default=list(PUBLIC), choices=list(PUBLIC))
    ap.add_argument("--out", type=Path, default=Path("fingerprint.jsonl"))
    ap.add_argument("--crowded", type=int, default=16_000, metavar="N",
                    help="also measure CIFAR-10 with N images stored (1,000 private, the rest the teacher's)")
    ap.add_argument("--earlier", type=Path, metavar="FILE",
                    help="also time the search of an earlier fingerprint module (a copy of its file) in the same run")
    ap.add_argument("--timing-only", action="store_true", help="measure the timing row alone (append it to --out)")
    ap.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = ap.parse_args()
    if args.timing_only:
        torch.set_num_threads(2)
        kept = [line for line in args.out.read_text().splitlines() if line.strip() and '"timing"' not in line] \
            if args.out.exists() else []
        args.out.write_text("".join(line + "\n" for line in kept) + json.dumps(timing(args.earlier)) + "\n")
        table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()])
        return
    if not args.table:
        torch.set_num_threads(2)
        rows = [measure(name) for name in args.dataset]
        rows += [measure("cifar10", args.crowded)] if "cifar10" in args.dataset and args.crowded > 1000 else []
        rows += [timing(args.earlier)]
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()])


if __name__ == "__main__":
    main()
