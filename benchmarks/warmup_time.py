"""Time of the rotation warm-up (BENCHMARKS.md, "Self-supervised warm-up"): in one process, one thread, the default
CIFAR-10 run (1,000 photos, seed 0, the small CNN teacher) without and then with ``--warmup 60``; prints each
run's accuracy against the truth and its wall seconds, so the ratio is measured in one run.

    cd benchmarks && ../.venv/bin/python warmup_time.py
"""

from __future__ import annotations

import bench_adapt
import torch

from ldpclient.teachers.local import LocalTeacher


def main() -> None:
    torch.set_num_threads(1)
    label, tx, ty, px, py = bench_adapt.load_dataset("cifar10", 0)
    teacher = LocalTeacher(bench_adapt.cached_teacher(label, tx, ty), tuple(px.shape[1:]), 10, name=label)
    setting = bench_adapt.resolve(bench_adapt.parse_setting("laplace:100:-:-:-:-"), tuple(px.shape[1:]), len(px), "dct")
    basis = {"basis": "dct", "coefficients": None, "clip_norm": None}
    for warmup in (None, 60):
        r = bench_adapt.run_one(teacher, px, py, setting, 0, "ldpkit", True, basis=basis, warmup=warmup)
        print(f"warmup={warmup} accuracy={r['accuracy']:.3f} wall={r['wall_s']} s", flush=True)


if __name__ == "__main__":
    main()
