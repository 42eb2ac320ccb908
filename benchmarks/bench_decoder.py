"""How well the teacher reads a release, raw and decoded by a model trained on public images only (issue 75's
probe, one set at a time).

For each epsilon the private images are released once per seed with the run's default release (Laplace, per
record, 64 DCT coefficients, the default L1 clip); the teacher labels:

* ``raw``: the release's reconstruction (the inverse transform, clipped to [0, 1]: what is sent today);
* ``decoded, <public>``: the output of a decoder trained on the device on public images only. Each epoch the public
  images are released afresh with the same mechanism (same epsilon, clip, basis; a generator of their own), and an
  MLP (K coefficients -> 256 -> 256 -> image, sigmoid) learns to map those releases to the clean public images (mean
  squared error). Decoding is post-processing: it sees releases and public images, never a private image.

``<public>`` is the set's held-out part of the same distribution (``same``), or its images of classes 0-4 only
(``classes``: the decoder has never seen a 5-9), as many of each; the last two columns are the raw and the
``classes`` decoder's accuracy on the private images of classes 5-9 alone. Accuracy is against the truth, mean ±
std over ``--seeds`` (the release and the decoder's initialisation and noise change with the seed; the teacher is
the cached one)::

    .venv/bin/python benchmarks/bench_decoder.py --dataset digits --eps 20 50 100 --seeds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402

from ldpclient.privacy import laplace  # noqa: E402
from ldpclient.privacy.base import Mechanism  # noqa: E402


def train_decoder(mech: Mechanism, public: torch.Tensor, *, epochs: int, seed: int) -> nn.Module:
    """An MLP from a release's coefficients to its image, trained on fresh releases of ``public`` each epoch."""
    torch.manual_seed(seed)
    k = mech.release(public[:1], generator=torch.Generator().manual_seed(0)).values.shape[1]
    pixels = int(public[0].numel())
    model = nn.Sequential(nn.Linear(k, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, pixels),
                          nn.Sigmoid())
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    target = public.flatten(1)
    noise = torch.Generator().manual_seed(10_000 + seed)
    for _ in range(epochs):
        coef = mech.release(public, generator=noise).values.float()
        for idx in torch.randperm(len(public)).split(64):
            loss = nn.functional.mse_loss(model(coef[idx]), target[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return model.eval()


def accuracy(teacher: nn.Module, images: torch.Tensor, truth: torch.Tensor) -> float:
    with torch.no_grad():
        return float((teacher(images).argmax(1) == truth).float().mean())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["digits"], choices=bench_adapt.DATASETS)
    p.add_argument("--eps", type=float, nargs="+", default=[20.0, 50.0, 100.0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--public", type=int, default=None,
                   help="public images of each kind (default: as many as the set's held-out classes 0-4 hold)")
    p.add_argument("--epochs", type=int, default=150)
    p.add_argument("--teacher", choices=bench_adapt.TEACHERS, default="small_cnn", help="the cached teacher")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    for name in args.dataset:
        label, tx, ty, px, py = bench_adapt.load_dataset(name, 28)
        teacher = bench_adapt.cached_teacher(label, tx, ty, args.teacher)
        lower = bench_adapt.public_images(name, 28, args.public, shift="classes")
        publics = {"same": bench_adapt.public_images(name, 28, len(lower)), "classes": lower}
        print(f"\n{label}: {len(px)} private images; teacher on the clean ones {100 * accuracy(teacher, px, py):.1f} %;"
              f" public images: {', '.join(f'{k} {len(v)}' for k, v in publics.items())}")
        upper = py >= 5
        print("\n| epsilon per image | raw | " + " | ".join(f"decoded, {k}" for k in publics)
              + " | raw, on 5-9 | decoded, classes, on 5-9 |")
        print("|---|---|" + "---|" * len(publics) + "---|---|")
        for eps in args.eps:
            mech = laplace(eps, per="record", basis="dct", coefficients=64)
            rows: dict[str, list[float]] = {"raw": [], **{k: [] for k in publics}, "raw 5-9": [], "classes 5-9": []}
            t0 = time.perf_counter()
            for seed in range(args.seeds):
                release = mech.release(px, generator=torch.Generator().manual_seed(seed))
                raw = release.upsampled().values.clamp(0, 1)
                rows["raw"].append(accuracy(teacher, raw, py))
                rows["raw 5-9"].append(accuracy(teacher, raw[upper], py[upper]))
                for key, public in publics.items():
                    decoder = train_decoder(mech, public, epochs=args.epochs, seed=seed)
                    with torch.no_grad():
                        decoded = decoder(release.values.float()).reshape(px.shape)
                    rows[key].append(accuracy(teacher, decoded, py))
                    if key == "classes":
                        rows["classes 5-9"].append(accuracy(teacher, decoded[upper], py[upper]))
            cells = [f"{100 * statistics.mean(v):.1f} ± {100 * statistics.stdev(v):.1f}" if len(v) > 1
                     else f"{100 * v[0]:.1f}" for v in rows.values()]
            print(f"| {eps:g} | " + " | ".join(cells) + f" |  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
