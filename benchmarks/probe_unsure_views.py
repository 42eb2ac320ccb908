"""Which records need their views: the library's adapted student, its outputs on each record as it is and under
each view kept apart, so that the labels through views can be scored for every threshold of the top output below
which a record is labelled through them (:data:`ldpclient.transfer.label_views.UNSURE_BELOW`).

One label run per set and seed (``bench_adapt_variants.py``'s explorer with no variant: the library's adaptation
of the run's own student, the same seeds and releases); its final labelling pass is replaced by one that keeps the
outputs per view. A row per set, seed and threshold: the accuracy of the labels (in [0, 1]) and the share of the
records below the threshold (the work of the views' passes, as a share of every record). With ``--time N`` it
also times the library's final labelling on the adapted student, every record through its views against the unsure
ones only, N times each, interleaved (rows with ``seconds``)::

    .venv/bin/python benchmarks/probe_unsure_views.py --dataset digits --out benchmarks/results/unsure_views.jsonl
    .venv/bin/python benchmarks/probe_unsure_views.py --dataset colour-digits --seeds 1 --time 5 \
        --out benchmarks/results/unsure_views_time.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import bench_adapt_variants as variants
import torch

from ldpclient.transfer.adapt import AdaptHistory, SelfTrainingAdapter
from ldpclient.transfer.label_views import UNSURE_BELOW, ViewedRecords, label_views

#: Thresholds of the top output (above 1: every record through its views; 0: none).
THRESHOLDS = (1.01, 0.999, 0.99, 0.95, 0.9, 0.8, 0.7, 0.5, 0.0)


class KeptApart(SelfTrainingAdapter):
    """The library's adaptation whose final pass keeps each view's outputs (``kept``) besides returning their mean
    over every record."""

    kept: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
    #: times to time the library's final labelling each way (0: not timed) and the rows timed
    repeats = 0
    timed: list[dict[str, Any]] = []

    def _predict_views(self, model: torch.nn.Module, records: Any, hist: Any) -> torch.Tensor:
        for _ in range(KeptApart.repeats):
            for below in (math.inf, UNSURE_BELOW):
                library = SelfTrainingAdapter(unsure_below=below)
                timed = AdaptHistory(changes=hist.changes)
                start = time.perf_counter()
                library._predict_views(model, records, timed)
                KeptApart.timed.append({"run": len(KeptApart.kept), "below": "every record" if below > 1 else below,
                                        "views": timed.views, "viewed": timed.viewed, "n": len(records),
                                        "seconds": round(time.perf_counter() - start, 3)})
        views = label_views(hist.changes.kept if hist.changes else (), min(int(v) for v in records.record_shape[-2:]))
        first = self._predict(model, records, hist)
        each = [self._predict(model, ViewedRecords(records, view), hist) for view in views]
        KeptApart.kept.append((first, each))
        hist.views, hist.viewed = 1 + len(views), len(first)
        return (first + sum(each)) / hist.views


class Explorer(variants.Explorer):
    """The explorer with no variant, adapting the run's student with :class:`KeptApart`."""

    def __init__(self, seed: int, truth: torch.Tensor, names: list[str]) -> None:
        variants.AdaptOnCopies.__init__(self, truth, {}, KeptApart(seed=seed))
        self.seed, self.mirror = seed, {}
        self.truth = truth

    def inspect(self, model: torch.nn.Module, source: Any) -> None:
        """Nothing: the mirror check is not this probe's."""


def rows(truth: torch.Tensor, first: torch.Tensor, each: list[torch.Tensor]) -> list[dict[str, float]]:
    """Per threshold, the labels' accuracy and the share of the records labelled through their views."""
    mean = (first + sum(each)) / (1 + len(each))
    top = first.max(1).values
    out = []
    for below in THRESHOLDS:
        unsure = top < below
        labels = torch.where(unsure[:, None], mean, first).argmax(1)
        out.append({"below": below, "accuracy": float((labels == truth).float().mean()),
                    "share_viewed": float(unsure.float().mean()), "views": 1 + len(each)})
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, choices=sorted(variants.SETS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--time", type=int, default=0, help="time the final labelling each way this many times")
    args = p.parse_args(argv)
    KeptApart.repeats = args.time
    truths: list[torch.Tensor] = []

    class Recorded(Explorer):
        def __init__(self, seed: int, truth: torch.Tensor, names: list[str]) -> None:
            super().__init__(seed, truth, names)
            truths.append(truth)

    variants.Explorer = Recorded  # type: ignore[misc]
    scratch = args.out.with_suffix(".runs.jsonl")
    scratch.unlink(missing_ok=True)
    variants.main(["--dataset", args.dataset, "--seeds", str(args.seeds), "--variants", "weak", "--out", str(scratch)])
    runs = [json.loads(line) for line in scratch.read_text().splitlines()[-len(KeptApart.kept):]]
    scratch.unlink()
    with args.out.open("a") as fh:
        if args.time:
            for row in KeptApart.timed:
                run = runs[row.pop("run")]
                fh.write(json.dumps({"dataset": run["dataset"], "seed": run["seed"], **row}) + "\n")
            return
        for run, truth, (first, each) in zip(runs, truths, KeptApart.kept, strict=True):
            for row in rows(torch.as_tensor(truth), first, each):
                fh.write(json.dumps({"dataset": run["dataset"], "seed": run["seed"], **row}) + "\n")
    print(f"wrote {len(KeptApart.kept) * len(THRESHOLDS)} rows to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
