"""Calibration of the verdict (issue 44): does every run's verdict say what its labels are worth?

Each run is the library's front door, ``ldpclient.label`` (the whole ``label`` command: defaults, ledger,
journal, verdict), on a real set's private part with an in-process teacher (``bench_adapt``'s cached
teachers), given a **check set** of ``--check`` random private images with their true labels. It records the
verdict (level, reasons), the check set's estimate and 95 % interval, and the **true** accuracy of the labels
written over every private image, so a table can set the estimate beside the truth.

Settings: ``defaults`` (the library's, with ``--baseline``), ``public`` (the defaults beside the set's held-out
images given as public ones, a tenth of which the run holds out to score the student against the teacher) and
deliberately poor ones: ``docs-example`` (the
first example of docs/cli.md: Laplace at epsilon 4 per element on 4x4 averages, 400 queries), ``few-queries``
(100 queries), ``tiny-epsilon`` (epsilon 1 per image). Results are appended to a JSONL file (finished runs are
skipped); ``--table`` prints them::

    .venv/bin/python benchmarks/bench_verdict.py --dataset digits mnist colour-digits cifar10 --seeds 3 \\
        --out benchmarks/results/verdict.jsonl
    .venv/bin/python benchmarks/bench_verdict.py --dataset cifar10 --teacher resnet --settings defaults \\
        --seeds 3 --out benchmarks/results/verdict.jsonl
    .venv/bin/python benchmarks/bench_verdict.py --table --out benchmarks/results/verdict.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402

import ldpclient  # noqa: E402
from ldpclient.report.label_files import read_labels  # noqa: E402
from ldpclient.teachers.local import LocalTeacher  # noqa: E402

#: Options of each setting (``ldpclient.label`` keywords on top of the defaults).
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {"baseline": True},
    "docs-example": {"epsilon": 4.0, "epsilon_unit": "element", "reduce": 4, "queries": 400},
    "few-queries": {"queries": 100},
    "tiny-epsilon": {"epsilon": 1.0},
    # the defaults beside the set's held-out images as public ones (digits 359, MNIST and colour digits 500,
    # CIFAR-10 5,000): a tenth of them is held out of training and scores the student against the teacher
    "public": {},
}
#: Public images given in the ``public`` setting (all of each set's held-out part).
PUBLIC_IMAGES = {"digits": 359, "mnist": 500, "mnist-colour": 500, "colour-digits": 500, "cifar10": 5000}


def run_one(data: tuple, teacher_arch: str, setting: str, seed: int, check_size: int,
            dataset: str = "") -> dict[str, Any]:
    """One label run on ``data`` (``bench_adapt.load_dataset``'s tuple of ``dataset``) with ``setting``; the row it
    records."""
    label, tx, ty, px, py = data
    options = dict(SETTINGS[setting])
    if setting == "public":
        options["public"] = bench_adapt.public_images(dataset, 28, PUBLIC_IMAGES[dataset])
    model = bench_adapt.cached_teacher(label, tx, ty, teacher_arch)
    teacher = LocalTeacher(model, tuple(px.shape[1:]), 10, name=f"{label}-{teacher_arch}")
    with torch.no_grad():
        teacher_acc = float((model(px).argmax(1) == py).float().mean())
    picked = torch.randperm(len(px), generator=torch.Generator().manual_seed(1000 + seed))[:check_size]
    check = {str(int(k)): int(py[k]) for k in picked}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as state:
        output = Path(state) / "labels.csv"
        result = ldpclient.label(px, teacher, state_dir=state, seed=seed, check=check, output=output, **options)
        # the data-free run's labels of every private image (written beside the labels with ``baseline``)
        free_true = _csv_accuracy(output.with_name("labels.baseline.csv"), py) if options.get("baseline") else None
    verdict = result.verdict
    assert verdict.check is not None
    return {
        "dataset": label, "teacher": teacher_arch, "teacher_accuracy": teacher_acc, "setting": setting,
        "seed": seed, "check_size": check_size, "level": verdict.level, "reasons": verdict.reasons,
        "estimate": verdict.check["accuracy"], "low": verdict.check["low"], "high": verdict.check["high"],
        # the check set's share alone (the estimate before 2026-11-27), beside the confidence-adjusted one
        "share": verdict.check["correct"] / verdict.check["images"], "method": verdict.check.get("method"),
        "effective_images": verdict.check.get("effective_images"),
        "true_accuracy": float((result.labels == py).float().mean()), "top_share": verdict.collapse["top_share"],
        "baseline_estimate": verdict.check["baseline"]["accuracy"] if verdict.check["baseline"] else None,
        "baseline_true_accuracy": free_true,
        "same_as_free": verdict.same_as_free, "epsilon_record": result.guarantee.epsilon_record,
        "public_held_out": verdict.public_held_out, "seconds": time.perf_counter() - t0,
    }


def _csv_accuracy(path: Path, truth: torch.Tensor) -> float:
    """The share of the rows of a label file (``path``: each image's index) equal to ``truth``."""
    rows = read_labels(path)
    assert len(rows) == len(truth), (path, len(rows))
    return sum(r.label == int(truth[int(r.path)]) for r in rows) / len(truth)


def _key(r: dict[str, Any]) -> tuple:
    return (r["dataset"], r["teacher"], r["setting"], r["seed"], r["check_size"])


def grouped(path: Path, *keys: str) -> dict[tuple, list[dict[str, Any]]]:
    """The rows of the JSONL file ``path`` grouped by the values of ``keys``."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return groups


def table(path: Path) -> None:
    groups = grouped(path, "dataset", "teacher", "setting")
    print("| set (teacher, its accuracy) | setting | verdicts | check estimate | true accuracy | |estimate - true| "
          "max | the check set's share alone: |share - true| max | inside the 95% interval | data-free on the check "
          "set (true, all private images) | labels equal to the data-free run's | held-out public: agreement with "
          "the teacher (images) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (ds, arch, setting), rs in sorted(groups.items()):
        counts = {lvl: sum(r["level"] == lvl for r in rs) for lvl in ("usable", "doubtful", "not worth having")}
        level_s = " / ".join(f"{n} {lvl}" for lvl, n in counts.items() if n)
        est = [100 * r["estimate"] for r in rs]
        true = [100 * r["true_accuracy"] for r in rs]
        err = max(abs(e - t) for e, t in zip(est, true, strict=True))
        shares = [100 * r["share"] for r in rs if "share" in r]
        share_err = (
            f"{max(abs(s - t) for s, t in zip(shares, true, strict=True)):.1f}" if len(shares) == len(rs) else "-"
        )
        inside = sum(r["low"] <= r["true_accuracy"] <= r["high"] for r in rs)
        free = [100 * r["baseline_estimate"] for r in rs if r.get("baseline_estimate") is not None]
        free_true = [100 * r["baseline_true_accuracy"] for r in rs if r.get("baseline_true_accuracy") is not None]
        same = [100 * r["same_as_free"] for r in rs if r.get("same_as_free") is not None]
        held = [r["public_held_out"] for r in rs if r.get("public_held_out")]
        public = f"{_ms([100 * h['agreement'] for h in held])} ({held[0]['images']})" if held else "-"
        print(f"| {ds} ({arch}, {100 * rs[0]['teacher_accuracy']:.1f}%) | {setting} | {level_s} | {_ms(est)} | "
              f"{_ms(true)} | {err:.1f} | {share_err} | {inside} of {len(rs)} | {_ms(free) if free else '-'}"
              f"{f' (true {_ms(free_true)})' if free_true else ''} | "
              f"{_ms(same) if same else '-'} | {public} |")


def _ms(v: list[float]) -> str:
    return f"{statistics.mean(v):.1f} ± {statistics.stdev(v):.1f}" if len(v) > 1 else f"{v[0]:.1f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", nargs="+", default=["digits"], choices=bench_adapt.DATASETS)
    ap.add_argument("--teacher", default="small_cnn", choices=bench_adapt.TEACHERS)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--check", type=int, default=100, help="images in the check set (default 100)")
    ap.add_argument("--out", type=Path, default=Path("verdict.jsonl"))
    ap.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = ap.parse_args(argv)
    if args.table:
        table(args.out)
        return
    done = set()
    if args.out.exists():
        done = {_key(json.loads(line)) for line in args.out.read_text().splitlines() if line.strip()}
    for dataset in args.dataset:
        data = bench_adapt.load_dataset(dataset, 28)
        for setting in args.settings:
            for seed in range(args.seeds):
                if (data[0], args.teacher, setting, seed, args.check) in done:
                    continue
                row = run_one(data, args.teacher, setting, seed, args.check, dataset)
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps({k: v for k, v in row.items() if k != "reasons"}), flush=True)


if __name__ == "__main__":
    main()
