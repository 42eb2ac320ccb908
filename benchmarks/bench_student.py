"""Student training throughput (images/s) of each zoo model on this machine's CPU threads.

Trains each model for a few Adam steps on random batches of ``--channels`` x size x size images (after one
warm-up step), laid out as the trainer lays them out on the CPU (channels-last), each batch shifted at random
as training shifts it beside public images (``defaults.train_crop``; ``--no-shift``: not), with the optimiser the
students train with (``student.StudentAdam``), and prints images/s.
Ratios to
small_cnn are within one run; ``--rounds`` repeats the models in turn and keeps each one's best round, so that
a machine whose load changes during the run penalises every model alike.

    nice -n 10 .venv/bin/python benchmarks/bench_student.py --threads 2
    .venv/bin/python benchmarks/bench_student.py --threads 1 --channels 3 --sizes 32 --batch 32 \\
        --models small_cnn small_resnet small_resnet:32 --rounds 3
    .venv/bin/python benchmarks/bench_student.py --threads 2 --batch 32 --steps 200 --sizes 28 \\
        --models pooled_cnn small_cnn --rounds 3 --no-shift
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from ldpclient.transfer import defaults
from ldpclient.transfer.affine import flip_crop
from ldpclient.transfer.student import STUDENTS, StudentAdam, batch_in_layout, build_student, to_compute_layout


def throughput(spec: str, size: int, batch: int, steps: int, channels: int = 1, shift: bool = True) -> float:
    """Images/s of training ``spec`` (a zoo name, ``name:width`` for another width) on ``size`` px images."""
    name, _, width = spec.partition(":")
    torch.manual_seed(0)
    kwargs = {"width": int(width)} if width else {}
    model = to_compute_layout(build_student(name, num_classes=10, in_channels=channels, image_size=size, **kwargs),
                              "cpu").train()
    opt = StudentAdam(model.parameters(), 1e-3)
    x = torch.rand(batch, channels, size, size)
    y = torch.randint(0, 10, (batch,))
    pad = defaults.train_crop(size, public=True) if shift else 0
    augment = partial(flip_crop, pad=pad, flip=False) if pad else (lambda v: v)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(batch_in_layout(augment(x), "cpu")), y).backward()
        opt.step()

    step()  # warm-up
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - t)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[28, 8])
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--models", nargs="+", default=list(STUDENTS), help="zoo names, or name:width")
    p.add_argument("--rounds", type=int, default=1, help="measure every model this many times in turn; keep the best")
    p.add_argument("--no-shift", action="store_true", help="train on the batches as they are (no random shift)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads} batch={args.batch} steps={args.steps} channels={args.channels} "
          f"rounds={args.rounds} shift={not args.no_shift}")
    print("| model | image | images/s | vs first |")
    print("|---|---|---|---|")
    for size in args.sizes:
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for spec in args.models:
                ips = throughput(spec, size, args.batch, args.steps, args.channels, not args.no_shift)
                best[spec] = max(best.get(spec, 0.0), ips)
        base = best[args.models[0]]
        for spec in args.models:
            print(f"| {spec} | {args.channels}x{size}x{size} | {best[spec]:.0f} | {best[spec] / base:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
