"""The mirror check's verdict on the development sets (``label --public`` without ``--flip``/``--no-flip``).

For each set, the cached benchmark teacher (``bench_adapt.cached_teacher``) labels the public images that
``bench_adapt.py --public`` sends, then the check's mirrored and shifted copies of a sample of them
(:func:`ldpclient.transfer.mirror_check.mirror_check`, :data:`~ldpclient.transfer.defaults.MIRROR_CHECK_IMAGES`
images): the share of the sample whose label the mirror kept, the share the shift kept, and the verdict
(:func:`ldpclient.transfer.mirror_check.flip`). ``run`` is the sample a label run draws (seeded by the images'
values); the other rows draw the sample from seeds 0, 1, ... to show how much the shares move with it::

    .venv/bin/python benchmarks/bench_mirror.py --seeds 5
    .venv/bin/python benchmarks/bench_mirror.py --dataset cifar10 --teacher resnet
"""

from __future__ import annotations

import argparse
import statistics

import bench_adapt
import torch

from ldpclient.transfer.mirror_check import MirrorVerdict

#: (dataset, image side, public images): the ``--public`` counts BENCHMARKS.md's runs use.
SETS = {"cifar10": (32, 5000), "colour-digits": (32, 500), "mnist": (28, 500), "digits": (28, 359)}


def verdicts(name: str, seeds: int, arch: str) -> tuple[str, list[tuple[str, MirrorVerdict]]]:
    """The set's label and its verdicts: the label run's sample first, then ``seeds`` other samples."""
    size, n = SETS[name]
    label, tx, ty, _, _ = bench_adapt.load_dataset(name, size)
    model = bench_adapt.cached_teacher(label, tx, ty, arch).eval()
    public = bench_adapt.public_images(name, size, n)
    out = []
    for tag, seed in [("run", None), *((str(s), s) for s in range(seeds))]:
        verdict = bench_adapt.mirror_verdict(model, public, seed)
        assert verdict is not None
        out.append((tag, verdict))
    return label, out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", choices=sorted(SETS), default=list(SETS))
    p.add_argument("--seeds", type=int, default=5, help="other samples beside the label run's")
    p.add_argument("--teacher", choices=bench_adapt.TEACHERS, default="small_cnn")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print("| set (teacher) | images checked | mirror kept the label, % (label run's sample; mean ± std of the others) "
          "| shift kept it, % | ratio | verdict: flip |")
    print("|---|---|---|---|---|---|")
    for name in args.dataset:
        label, found = verdicts(name, args.seeds, args.teacher)
        run, others = found[0][1], [v for _, v in found[1:]]

        def spread(values: list[float]) -> str:
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{100 * statistics.mean(values):.1f} ± {100 * sd:.1f}"

        mirror = [v.mirror_agreement for v in others]
        shift = [v.shift_agreement for v in others]
        ratios = [v.mirror_agreement / v.shift_agreement for _, v in found]
        flips = sorted({str(v.flip).lower() for _, v in found})
        print(f"| {label} ({args.teacher}) | {run.images} | {100 * run.mirror_agreement:.1f} ({spread(mirror)}) | "
              f"{100 * run.shift_agreement:.1f} ({spread(shift)}) | {min(ratios):.2f}-{max(ratios):.2f} | "
              f"{' / '.join(flips)} |", flush=True)


if __name__ == "__main__":
    main()
