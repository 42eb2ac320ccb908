"""How much of its class a release keeps: a classifier trained on releases alone, against the teacher on decoded ones.

A teacher reading a decoded release is one way of guessing the record's class from the release. Any way of guessing
it is bounded by what the release holds. This measures that bound from below, without a teacher: a network is
trained to name the class of releases of the set's labelled images of the same distribution (its teacher part,
released afresh each epoch with the run's mechanism, so the network never sees the same noise twice), and is scored
on the releases of the private images (the ones ``bench_decode_check.py`` scores the teacher on, the same seeds).
Beside it, the posterior's class: the library's decoder (``fit_decoder``) made from the same labelled images, each
release's posterior weight summed per true label, the heaviest label taken; with ever more images this tends to the
best possible guess. Where neither names the class of X % of the releases, no decoder is likely to make a teacher
read them at X %: the release lacks the information, and the lever is the release (epsilon, basis, clip).

The release is the default one (Laplace per record; DCT: 64 coefficients, colour 64 + 16 + 16; ``--basis pca``: 16
principal components of the set's public images, colour 16 + 4 + 4, as ``label --basis pca`` fits them). The
network: the release's coefficients, over the noise's scale, into two hidden layers of 512 (ReLU), Adam, 200 epochs::

    .venv/bin/python benchmarks/bench_release_information.py --dataset mnist colour-digits --basis dct pca --seeds 3
    .venv/bin/python benchmarks/bench_release_information.py --dataset colour-digits --recolour 6 --seeds 1

``--recolour N`` (colour digits): train on the teacher part's grey digits drawn in colour N times, with N colourings
(``bench_adapt.colour_photos`` seeds 1..N; seed 1 is the set's own teacher part), to see whether more labelled images
find more in the same releases.
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
from bench_decode_check import release_mechanism  # noqa: E402

from ldpclient.transfer.decoder import fit_decoder  # noqa: E402

EPOCHS = 200
BATCH = 256


def release_accuracy(mech, train_x: torch.Tensor, train_y: torch.Tensor, test: torch.Tensor, py: torch.Tensor,
                     seed: int) -> float:
    """The share of the private releases ``test`` (their values) whose class ``py`` a network trained on fresh
    releases of ``train_x`` (labels ``train_y``; its draws from ``seed``) names."""
    test = test.flatten(1)
    scale = float(mech.release(train_x[:512], generator=torch.Generator().manual_seed(0), public=True).values.std())
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(test.shape[1], 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(10_000 + seed)
    for _ in range(EPOCHS):
        fresh = mech.release(train_x, generator=gen, public=True).values.flatten(1) / scale
        order = torch.randperm(len(train_y), generator=gen)
        for i in range(0, len(order), BATCH):
            idx = order[i : i + BATCH]
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(fresh[idx]), train_y[idx]).backward()
            opt.step()
    with torch.no_grad():
        return float((net(test / scale).argmax(1) == py).float().mean())


def posterior_accuracy(mech, train_x: torch.Tensor, train_y: torch.Tensor, test: torch.Tensor, py: torch.Tensor,
                       seed: int) -> float:
    """The share of the private releases ``test`` whose heaviest label, under the posterior over ``train_x`` (the
    decoder's noise drawn from ``seed``), is the truth ``py``."""
    decoder = fit_decoder(mech, train_x, seed=seed)
    onehot = nn.functional.one_hot(train_y, 10).to(torch.float64)
    votes = torch.cat([decoder.posterior(part) @ onehot for part in test.split(128)])
    return float((votes.argmax(1) == py).float().mean())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["mnist", "colour-digits"], choices=bench_adapt.DATASETS)
    p.add_argument("--basis", nargs="+", default=["dct", "pca"], choices=["dct", "pca"])
    p.add_argument("--eps", type=float, default=100.0, help="per-record epsilon (the default release's 100)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--recolour", type=int, default=1, help="colour digits: colourings of the teacher part trained on")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print("| set | labelled images | basis | epsilon | a network names the class of the private releases "
          "| the posterior's class |")
    print("|---|---|---|---|---|---|")
    for name in args.dataset:
        _, tx, ty, px, py = bench_adapt.load_dataset(name, 28)
        if name == "colour-digits" and args.recolour > 1:
            _, grey, ty, _, _ = bench_adapt.load_dataset("mnist", 28)
            tx = torch.cat([bench_adapt.colour_photos(grey, seed=s) for s in range(1, args.recolour + 1)])
            ty = ty.repeat(args.recolour)
        public = bench_adapt.public_images(name, 28, None)
        for basis in args.basis:
            t0 = time.perf_counter()
            mech = release_mechanism(basis, args.eps, public)
            net, post = [], []
            for seed in range(args.seeds):  # the private releases bench_decode_check.one scores the teacher on
                test = mech.release(px, generator=torch.Generator().manual_seed(seed)).values
                net.append(release_accuracy(mech, tx, ty.long(), test, py.long(), seed))
                post.append(posterior_accuracy(mech, tx, ty.long(), test, py.long(), seed))
            print(f"| {name} | {len(ty)} | {basis} | {args.eps:g} | {_ms(net)} | {_ms(post)} |  "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)


def _ms(values: list[float]) -> str:
    spread = f" ± {100 * statistics.stdev(values):.1f}" if len(values) > 1 else ""
    return f"{100 * statistics.mean(values):.1f}{spread} ({', '.join(f'{100 * v:.1f}' for v in values)})"


if __name__ == "__main__":
    main()
