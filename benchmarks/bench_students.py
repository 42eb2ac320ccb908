"""Several students on the same answers (issue 46, item 0): how far apart are one release's students, and their mean?

For each set, seed and mode, ``bench_adapt.run_one`` runs ``K`` times on the same plan, release and teacher answers
(the run's ``seed``), each time with the student's draws of member ``k`` (``TrainingSettings.student_seed`` =
:func:`ldpclient.transfer.defaults.member_seed` of the seed: its initial weights, rows, held-out share and
adaptation). Each row is one member: ``single`` (the accuracy of that student's labels, adapted) and ``ensemble`` (the
accuracy of the argmax of the mean adapted output of members 0 to ``k - 1``). The ensemble of the first ``k`` members
is what ``label --students k`` (``TrainingSettings.students``) writes: ``tests/transfer/test_students.py`` checks
it exactly on
a small run, and ``bench_adapt.py --students 3`` gave the same 94.7 % on MNIST seed 0. Defaults otherwise (Laplace at
100 per image on the DCT basis, 20 Sup queries per image, ``small_cnn``, adaptation; the data-free run's blanks at 20).

    .venv/bin/python benchmarks/bench_students.py --dataset colour-digits --seeds 3 --members 3 \\
        --modes ldpkit data-free --out benchmarks/results/students_colour.jsonl
    .venv/bin/python benchmarks/bench_students.py --table --out benchmarks/results/students_colour.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import bench_adapt
import torch

from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults

SIDES = {"cifar10": 32, "colour-digits": 32, "mnist": 28, "digits": 28}


class _Kept:
    """The last run's adapted outputs (float ``(N, K)``), taken from its result."""

    probs: torch.Tensor | None = None


def _keeping(base: type) -> type:
    """``base`` (KnowledgeTransfer) that keeps each run's adapted outputs in :class:`_Kept`."""

    class Keeping(base):  # type: ignore[valid-type,misc]
        def run(self, *args: Any, **kwargs: Any) -> Any:
            result = super().run(*args, **kwargs)
            _Kept.probs = result.adaptation.probs.clone()
            return result

    return Keeping


def _ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * sd:.1f}"


def table(path: Path) -> None:
    """Per set and mode: every single student, the first member alone (one student: the library's default run) and
    the ensemble of all members, over seeds."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:  # rows before --teacher: the small CNN
        teacher = r.get("teacher", "small_cnn")
        groups.setdefault((r["dataset"] + ("" if teacher == "small_cnn" else f" ({teacher} teacher)"), r["mode"]),
                          []).append(r)
    print("| set | mode | seeds | every single student (seeds x members) | one student (member 0) | "
          "mean of the members' outputs | members |")
    print("|---|---|---|---|---|---|---|")
    for (dataset, mode), rs in groups.items():
        members = max(r["k"] for r in rs)
        seeds = sorted({r["seed"] for r in rs if r["k"] == members})
        done = [r for r in rs if r["seed"] in seeds]
        singles = [r["single"] for r in done]
        first = [r["single"] for r in done if r["k"] == 1]
        whole = [r["ensemble"] for r in done if r["k"] == members]
        print(f"| {dataset} | {mode} | {len(seeds)} | {_ms(singles)} | {_ms(first)} | {_ms(whole)} | {members} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", choices=sorted(SIDES), default=["colour-digits"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--modes", nargs="+", choices=("ldpkit", "data-free"), default=["ldpkit"])
    p.add_argument("--teacher", choices=bench_adapt.TEACHERS, default="small_cnn",
                   help="the in-process teacher's architecture (bench_adapt.py --teacher)")
    p.add_argument("--out", type=Path, default=Path("students.jsonl"))
    p.add_argument("--table", action="store_true")
    args = p.parse_args(argv)
    if args.table:
        table(args.out)
        return
    bench_adapt.KnowledgeTransfer = _keeping(bench_adapt.KnowledgeTransfer)
    for name in args.dataset:
        side = SIDES[name]
        label, tx, ty, px, py = bench_adapt.load_dataset(name, side)
        model = bench_adapt.cached_teacher(label, tx, ty, args.teacher)
        torch.set_num_threads(1)
        teacher = LocalTeacher(model, tuple(px.shape[1:]), 10, name=label)
        base = bench_adapt.resolve(bench_adapt.parse_setting("laplace:100:-:-:-:-"), tuple(px.shape[1:]), len(px),
                                   "dct")
        basis = {"basis": "dct", "coefficients": None, "clip_norm": None}
        for seed in range(args.seeds):
            for mode in args.modes:
                setting = {**base, "eps_record": 20.0} if mode == "data-free" else base
                outputs: list[torch.Tensor] = []
                for member in range(args.members):
                    t = time.perf_counter()
                    # the run's seed draws the plan and the noise, the member's the student
                    r = bench_adapt.run_one(teacher, px, py, setting, seed, mode, True, basis=basis,
                                            student_seed=defaults.member_seed(seed, member))
                    assert _Kept.probs is not None
                    outputs.append(_Kept.probs)
                    mean = torch.stack(outputs).mean(0)
                    row = {"dataset": label, "teacher": args.teacher, "mode": mode, "seed": seed, "k": member + 1,
                           "single": r["accuracy"],
                           "ensemble": float((mean.argmax(1) == py).float().mean()),
                           "wall_s": round(time.perf_counter() - t, 1)}
                    print(row, flush=True)
                    with args.out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
