"""Probe (issue 88, the default run's time): the student trained with a warm-up-then-cosine learning rate instead of
the library's constant one, so that fewer epochs might do; every other step is ``bench_adapt.py``'s.

The rate rises linearly to ``PEAK`` over the first tenth of the steps, then falls along a half cosine to 1 % of it.
Rows are keyed as ``bench_adapt.py``'s own (the schedule is not in the key): give them a file of their own.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_schedule.py 2e-3 -- --basis dct --seeds 3 --modes ldpkit \\
        --settings laplace:100:-:-:3:- --dataset digits mnist colour-digits \\
        --out benchmarks/results/default_run_schedule.jsonl
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from ldpclient.transfer import student as student_mod
from ldpclient.transfer.stages import train as train_mod

WARM = 0.1


def scheduled(peak: float) -> type[student_mod.Trainer]:
    """A :class:`~ldpclient.transfer.student.Trainer` whose optimiser steps the rate along the schedule above."""

    class ScheduledTrainer(student_mod.Trainer):
        def fit(self, make_stream: Any, labels: Any, *, steps_per_epoch: int | None = None) -> Any:
            total = max(1, int((steps_per_epoch or 1) * self.epochs))
            optimizer = self.optimizer
            assert isinstance(optimizer, student_mod.StudentAdam)

            def factor(step: int) -> float:
                t = min(step / total, 1.0)
                if t < WARM:
                    return max(t / WARM, 0.01)
                return 0.5 * (1 + math.cos(math.pi * (t - WARM) / (1 - WARM))) + 0.01

            step = optimizer.step
            done = [0]

            def stepped() -> None:
                optimizer.lr = peak * factor(done[0])
                step()
                done[0] += 1

            optimizer.step = stepped  # type: ignore[method-assign]
            return super().fit(make_stream, labels, steps_per_epoch=steps_per_epoch)

    return ScheduledTrainer


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] != "--":
        raise SystemExit("usage: probe_schedule.py PEAK -- <bench_adapt.py arguments>")
    train_mod.Trainer = scheduled(float(argv[0]))  # type: ignore[misc]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_adapt

    bench_adapt.main(argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
