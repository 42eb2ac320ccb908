"""How close the check set's estimate comes to the true accuracy: its share alone against the confidence-adjusted one.

A verdict run (``bench_verdict.py``) draws one check set per run, so three runs say little about how often an
estimate misses. Here each label run (the library's front door, ``ldpclient.label``, on a set's private part with
an in-process teacher: ``bench_adapt``'s cached ones) is made once and its labels, confidences and the truth are
kept (``--cache``, one ``.npz`` per run); then ``--draws`` check sets of each ``--sizes`` are drawn from its private
images, and both estimates of :mod:`ldpclient.run.check_estimate` are set against the true accuracy: root mean
square error, the share of draws missing it by more than 5 points, and how often the 95 % interval holds it::

    .venv/bin/python benchmarks/bench_check_estimate.py --dataset digits mnist colour-digits cifar10 \\
        --settings defaults docs-example --seeds 3 --out benchmarks/results/check_estimate.jsonl
    .venv/bin/python benchmarks/bench_check_estimate.py --table --out benchmarks/results/check_estimate.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402
import bench_verdict  # noqa: E402

import ldpclient  # noqa: E402
from ldpclient.run.check_estimate import estimate_accuracy  # noqa: E402
from ldpclient.run.check_score import Z95  # noqa: E402
from ldpclient.teachers.local import LocalTeacher  # noqa: E402


def labelled(dataset: str, setting: str, seed: int, cache: Path) -> dict[str, np.ndarray] | None:
    """The run's ``labels``, ``conf`` (confidences) and ``truth`` over the private images, made once into ``cache``;
    None when the library refuses the setting on this set (docs-example above the epsilon ceiling on colour)."""
    path = cache / f"{dataset}-{setting}-{seed}.npz"
    if not path.exists():
        label, tx, ty, px, py = bench_adapt.load_dataset(dataset, 28)
        model = bench_adapt.cached_teacher(label, tx, ty, "small_cnn")
        teacher = LocalTeacher(model, tuple(px.shape[1:]), 10, name=label)
        options = {k: v for k, v in bench_verdict.SETTINGS[setting].items() if k != "baseline"}
        t0 = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory() as state:
                r = ldpclient.label(px, teacher, state_dir=state, seed=seed, **options)
        except ValueError as exc:
            print(f"{dataset} {setting}: {exc}", flush=True)
            return None
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, labels=r.labels.numpy(), conf=r.confidences.numpy(), truth=py.numpy())
        print(f"{dataset} {setting} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    with np.load(path) as d:
        return {k: d[k] for k in ("labels", "conf", "truth")}


def simulate(run: dict[str, np.ndarray], size: int, draws: int, seed: int) -> dict[str, Any]:
    """Both estimates over ``draws`` check sets of ``size`` images drawn without replacement."""
    right = (run["labels"] == run["truth"]).tolist()
    conf = run["conf"].astype(float).tolist()
    truth = sum(right) / len(right)
    rng = random.Random(seed)
    found: dict[str, list[tuple[float, float, float]]] = {"share": [], "adjusted": []}
    for _ in range(draws):
        idx = rng.sample(range(len(right)), size)
        r, c = [right[k] for k in idx], [conf[k] for k in idx]
        for name, e in (
            ("share", estimate_accuracy(r, None, None, Z95)),
            ("adjusted", estimate_accuracy(r, c, conf, Z95)),
        ):
            found[name].append((e.accuracy, e.low, e.high))
    out: dict[str, Any] = {"true_accuracy": truth, "size": size, "draws": draws,
                           "confidence_correlation": float(np.corrcoef(np.array(right, float), conf)[0, 1])}
    for name, rows in found.items():
        err = [a - truth for a, _, _ in rows]
        out[name] = {"rmse": math.sqrt(statistics.fmean(e * e for e in err)), "bias": statistics.fmean(err),
                     "miss_5": statistics.fmean(abs(e) > 0.05 for e in err),
                     "inside": statistics.fmean(lo <= truth <= hi for _, lo, hi in rows),
                     "width": statistics.fmean(hi - lo for _, lo, hi in rows)}
    return out


def table(path: Path) -> None:
    groups = bench_verdict.grouped(path, "dataset", "setting", "size")
    print("| set | setting | check images | true accuracy (runs) | correlation | rmse: share / adjusted | "
          "misses > 5 points: share / adjusted | inside the 95% interval: share / adjusted |")
    print("|---|---|---|---|---|---|---|---|")
    for (ds, setting, size), rs in sorted(groups.items()):
        def both(key: str, digits: int = 1, rs: list[dict[str, Any]] = rs) -> str:
            return " / ".join(
                f"{100 * statistics.fmean(r[m][key] for r in rs):.{digits}f}" for m in ("share", "adjusted")
            )

        truth = statistics.fmean(100 * r["true_accuracy"] for r in rs)
        rho = statistics.fmean(r["confidence_correlation"] for r in rs)
        print(f"| {ds} | {setting} | {size} | {truth:.1f} ({len(rs)}) | {rho:.2f} | {both('rmse', digits=2)} | "
              f"{both('miss_5')} % | {both('inside')} % |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", nargs="+", default=["digits"], choices=bench_adapt.DATASETS)
    ap.add_argument("--settings", nargs="+", default=["defaults"],
                    choices=[s for s in bench_verdict.SETTINGS if s != "public"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[30, 50, 100, 200])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--cache", type=Path, default=Path("benchmarks/.cache/check_estimate"),
                    help="folder of the runs' labels, confidences and truth (one .npz per run)")
    ap.add_argument("--out", type=Path, default=Path("check_estimate.jsonl"))
    ap.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = ap.parse_args(argv)
    if args.table:
        table(args.out)
        return
    torch.set_num_threads(1)
    for dataset in args.dataset:
        for setting in args.settings:
            for seed in range(args.seeds):
                run = labelled(dataset, setting, seed, args.cache)
                if run is None:
                    break
                for size in args.sizes:
                    row = {"dataset": dataset, "setting": setting, "seed": seed,
                           **simulate(run, size, args.draws, seed=seed)}
                    with args.out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
