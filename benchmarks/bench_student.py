"""Student training throughput (images/s) of each zoo model on this machine's CPU threads.

Trains each model for a few Adam steps on random 28x28 (and 8x8) single-channel
batches after one warm-up step, and prints images/s. Ratios to small_cnn are
within one run.

    nice -n 10 .venv/bin/python benchmarks/bench_student.py --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch

from ldpclient.transfer.student import STUDENTS, build_student


def throughput(name: str, size: int, batch: int, steps: int) -> float:
    torch.manual_seed(0)
    model = build_student(name, num_classes=10, in_channels=1, image_size=size).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(batch, 1, size, size)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # warm-up
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - t)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[28, 8])
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads} batch={args.batch} steps={args.steps}")
    print("| model | image | images/s | vs small_cnn |")
    print("|---|---|---|---|")
    for size in args.sizes:
        base = None
        for name in STUDENTS:
            ips = throughput(name, size, args.batch, args.steps)
            base = base or ips
            print(f"| {name} | {size}x{size} | {ips:.0f} | {ips / base:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
