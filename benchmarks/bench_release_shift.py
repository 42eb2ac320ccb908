"""The release shift (:mod:`ldpclient.transfer.release_shift`): how far the private releases sit from releases of the
public images, beside public images of the same distribution, of classes 0-4 only, and of another source.

For each set, basis and kind of public images, the private images (the first 1,000) are released by the default
Laplace mechanism at 100 per image (``dct``: 64 coefficients, colour 64 + 16 + 16; ``pca``: fitted on the public
images, 16, colour 16 + 4 + 4) with 3 seeds, and the library's :func:`release_shift` compares them with the public
images, as a label run does. Columns: the shift (mean ± std over the seeds), the limit alike images stay under, how
many seeds called the public images unlike::

    .venv/bin/python benchmarks/bench_release_shift.py --dataset digits mnist colour-digits fashion cifar10
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402
from bench_decode_check import OTHER, release_mechanism  # noqa: E402

from ldpclient.privacy.public import public_seed  # noqa: E402
from ldpclient.transfer.release_shift import release_shift  # noqa: E402


def publics(name: str, shape: torch.Size) -> dict[str, torch.Tensor]:
    """The set's public images of the same distribution, of classes 0-4, and of another source (at its shape)."""
    out = {"same": bench_adapt.public_images(name, 28, None),
           "classes": bench_adapt.public_images(name, 28, None, shift="classes"),
           "other": bench_adapt.public_images(OTHER[name], 28, None)}
    for kind, images in out.items():
        if images.shape[1:] != shape:
            images = torch.nn.functional.interpolate(images, size=shape[-2:], mode="bilinear")
            out[kind] = images.expand(-1, shape[0], -1, -1).contiguous()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["digits", "mnist"], choices=sorted(OTHER))
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    print("| set | basis | public images | shift | alike stay under | called unlike |")
    print("|---|---|---|---|---|---|")
    for name in args.dataset:
        label, _, _, px, _ = bench_adapt.load_dataset(name, 28)
        px = px[:1000]
        for kind, public in publics(name, px.shape[1:]).items():
            for basis in ("dct", "pca"):
                mech = release_mechanism(basis, 100.0, public)
                releases = [mech.release(px, generator=torch.Generator().manual_seed(s)).values
                            for s in range(args.seeds)]
                found = [release_shift(mech, public, r, seed=public_seed(public)) for r in releases]
                shifts = [f.shift for f in found if f is not None]
                limit = found[0].limit if found[0] is not None else float("nan")
                print(f"| {label} | {basis} | {kind} ({len(public)}) | {statistics.mean(shifts):.3g} ± "
                      f"{statistics.stdev(shifts):.2g} | {limit:.2f} | {sum(f.unlike for f in found if f)} of "
                      f"{len(found)} |", flush=True)


if __name__ == "__main__":
    main()
