"""Adaptation methods compared on the same trained students (issue 20, item 3).

For each dataset and seed, one label run trains a student exactly as ``bench_adapt.py`` does
(library defaults, in-process teacher); at the adaptation step :class:`AdaptOnCopies` takes the trained student,
the clean private records and the teacher-labelled anchor batches, and runs **every** adaptation
variant on its own copy of that student. So the variants differ only in how they adapt, not in the
student they start from. Two starting points per seed: a private run (``--eps`` per record) and a
data-free run (blank queries at ``--free-eps``).

Variants:

* ``self-training``: the library's default (:class:`ldpclient.transfer.adapt.SelfTrainingAdapter`:
  class-balanced curriculum 50/80/100 %, ±5° and ±1 pixel, teacher anchors);
* ``self-training-size``: the same curriculum with geometry scaled by the image's size (±10°, shifts of
  10 % of the side);
* ``fixmatch-0.95`` / ``fixmatch-0.8``: FixMatch (Sohn et al., NeurIPS 2020): per batch of clean
  records, pseudo-labels from a weakly augmented view (±5°, ±1 pixel) where the student's confidence
  is at least the threshold, cross-entropy on a strongly augmented view (torchvision ``RandAugment``,
  2 ops, magnitude 9), plus a batch of teacher anchors; the same number of passes over the records
  as the default curriculum makes (7 epochs).

Results append to a JSONL file (resumable by key); ``--table`` prints mean ± std over seeds::

    .venv/bin/python benchmarks/bench_adapters.py --dataset digits mnist --seeds 3 --out adapters.jsonl
    .venv/bin/python benchmarks/bench_adapters.py --table --out adapters.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import bench_adapt
import torch
from torch import nn

from ldpclient.io.records import RecordSource, as_record_source
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import adapt as adapt_module
from ldpclient.transfer.adapt import AdaptHistory, SelfTrainingAdapter, weak_augmentation
from ldpclient.transfer.student import predict_proba

Anchor = Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]


def size_augmentation(image_size: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Rotation ±10° and shifts of 10 % of the side: geometry that scales with the image."""
    if image_size < adapt_module.MIN_AUGMENT_SIDE:
        return None
    from torchvision.transforms import v2

    return v2.RandomAffine(degrees=10.0, translate=(0.1, 0.1), interpolation=v2.InterpolationMode.BILINEAR)


class FixMatchAdapter:
    """FixMatch on the clean records with teacher anchors (see the module doc)."""

    schedule = (1.0,)

    def __init__(self, *, threshold: float, epochs: int = 7, batch_size: int = 64, lr: float = 3e-4,
                 seed: int = 0) -> None:
        self.threshold, self.epochs, self.batch_size, self.lr, self.seed = threshold, epochs, batch_size, lr, seed

    def adapt(self, model: nn.Module, records: Any, anchor: Anchor | None = None,
              probs: torch.Tensor | None = None, prior: torch.Tensor | None = None) -> AdaptHistory:
        """FixMatch on ``records``; ``prior`` is not used (it learns the outputs as they are)."""
        from torchvision.transforms import v2

        hist = AdaptHistory()
        t0 = time.perf_counter()
        source: RecordSource = as_record_source(records)
        weak = weak_augmentation(int(source.record_shape[-1])) or (lambda x: x)
        strong = v2.RandAugment(num_ops=2, magnitude=9)
        before = probs if probs is not None else predict_proba(model, source, device="cpu")
        optimizer = torch.optim.Adam(model.parameters(), lr=self.lr)
        loss_fn = nn.CrossEntropyLoss()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            for epoch in range(self.epochs):
                anchors = anchor(epoch) if anchor is not None else None
                order = torch.randperm(len(source))
                total, seen, kept = 0.0, 0, 0
                for s in range(0, len(order), self.batch_size):
                    idx = order[s : s + self.batch_size]
                    batch = source.read(idx.numpy())
                    model.eval()
                    with torch.no_grad():
                        p = torch.softmax(model(weak(batch)), dim=1)
                    conf, target = p.max(1)
                    mask = conf >= self.threshold
                    model.train()
                    optimizer.zero_grad(set_to_none=True)
                    loss = torch.zeros(())
                    if bool(mask.any()):
                        views = torch.stack([strong(x) for x in batch[mask]])
                        loss = loss + loss_fn(model(views), target[mask])
                    extra = adapt_module._next_anchor(anchors, len(idx))
                    if extra is not None:
                        loss = loss + loss_fn(model(extra[0].float()), extra[1])
                    if loss.requires_grad:
                        loss.backward()
                        optimizer.step()
                    total += float(loss.detach()) * len(idx)
                    seen += len(idx)
                    kept += int(mask.sum())
                hist.selected.append(kept)
                hist.loss.append(total / max(1, seen))
        model.eval()
        hist.probs = predict_proba(model, source, device="cpu")
        hist.changed.append(float((hist.probs.argmax(1) != before.argmax(1)).float().mean()))
        hist.seconds = time.perf_counter() - t0
        return hist


def variants(seed: int) -> dict[str, Any]:
    return {
        "self-training": SelfTrainingAdapter(seed=seed),
        "self-training-size": SelfTrainingAdapter(seed=seed, augmentation=size_augmentation),
        "fixmatch-0.95": FixMatchAdapter(threshold=0.95, seed=seed),
        "fixmatch-0.8": FixMatchAdapter(threshold=0.8, seed=seed),
    }


class AdaptOnCopies:
    """Stands in for the pipeline's adapter: runs each of ``variants`` (name -> adapter) on its own copy of the
    trained student, scores each against ``truth``, then adapts the run's own student with ``final``, whose result
    the pipeline goes on with (so the run finishes as it would with ``final``). ``bench_adapt_variants.py`` uses it
    too. After :meth:`adapt`: ``unadapted`` (the trained student's accuracy, in [0, 1]), ``scores`` (name ->
    ``(accuracy, seconds)``) and ``final_seconds`` (the run's own adaptation's seconds)."""

    def __init__(self, truth: torch.Tensor, variants: dict[str, Any], final: Any) -> None:
        self.truth, self.variants, self.final = truth, variants, final
        self.schedule = final.schedule  # the pipeline's progress bar counts its rounds
        self.unadapted = float("nan")
        self.scores: dict[str, tuple[float, float]] = {}
        self.final_seconds = float("nan")

    def accuracy(self, probs: torch.Tensor) -> float:
        return float((probs.argmax(1) == self.truth).float().mean())

    def inspect(self, model: nn.Module, source: RecordSource) -> None:
        """Called with the trained student before any variant runs (nothing here; subclasses record more)."""

    def adapt(self, model: nn.Module, records: Any, anchor: Anchor | None = None,
              probs: torch.Tensor | None = None, on_round: Callable[[int], None] | None = None,
              prior: torch.Tensor | None = None) -> AdaptHistory:
        source = as_record_source(records)
        before = probs if probs is not None else predict_proba(model, source, device="cpu")
        self.unadapted = self.accuracy(before)
        self.inspect(model, source)
        for name, adapter in self.variants.items():
            hist = adapter.adapt(copy.deepcopy(model), source, anchor, probs=before, prior=prior)
            assert hist.probs is not None
            self.scores[name] = (self.accuracy(hist.probs), round(hist.seconds, 1))
            print(f"    {name:20s} {100 * self.scores[name][0]:.1f} ({hist.seconds:.0f} s)", flush=True)
        hist = self.final.adapt(model, source, anchor, probs=before, on_round=on_round, prior=prior)
        self.final_seconds = round(hist.seconds, 1)
        return hist


def recorded(copies: AdaptOnCopies) -> dict[str, dict[str, float]]:
    """This script's row: ``{name: {"accuracy", "seconds"}}``, the unadapted student's first."""
    return {"unadapted": {"accuracy": copies.unadapted, "seconds": 0.0},
            **{name: {"accuracy": acc, "seconds": s} for name, (acc, s) in copies.scores.items()}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["digits", "mnist"], choices=bench_adapt.DATASETS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--eps", type=float, default=50.0, help="per-record epsilon of the private starting point")
    p.add_argument("--free-eps", type=float, default=10.0, help="noise level of the data-free starting point")
    p.add_argument("--variants", nargs="+", default=list(variants(0)))
    p.add_argument("--out", type=Path, default=Path("bench_adapters.jsonl"))
    p.add_argument("--table", action="store_true")
    args = p.parse_args(argv)
    if args.table:
        table(args.out)
        return
    torch.set_num_threads(1)
    done = set()
    if args.out.exists():
        done = {json.loads(line)["key"] for line in args.out.read_text().splitlines()}
    for name in args.dataset:
        label, tx, ty, px, py = bench_adapt.load_dataset(name, 28)
        model = bench_adapt.cached_teacher(label, tx, ty)
        teacher = LocalTeacher(model, tuple(px.shape[1:]), 10, name=label)
        base = bench_adapt.resolve(bench_adapt.parse_setting("-:-:-:-:-:-"), tuple(px.shape[1:]), len(px))
        for seed in range(args.seeds):
            for mode, eps in (("ldpkit", args.eps), ("data-free", args.free_eps)):
                key = json.dumps({"dataset": label, "seed": seed, "mode": mode, "eps": eps,
                                  "variants": sorted(args.variants)}, sort_keys=True)
                if key in done:
                    continue
                print(f"{label} seed={seed} {mode} eps={eps:g}", flush=True)
                chosen = {k: v for k, v in variants(seed).items() if k in args.variants}
                # the run's own student: one cheap round (the pipeline needs a result)
                copies = AdaptOnCopies(py, chosen, SelfTrainingAdapter(seed=seed, schedule=(1.0,), epochs=1))
                bench_adapt.run_one(teacher, px, py, {**base, "eps_record": eps}, seed, mode, True, adapter=copies)
                with args.out.open("a") as fh:
                    fh.write(json.dumps({"key": key, "dataset": label, "seed": seed, "mode": mode, "eps": eps,
                                         "results": recorded(copies)}) + "\n")


def table(path: Path) -> None:
    rows: dict[tuple[str, str, float], dict[str, list[float]]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        d = rows.setdefault((r["dataset"], r["mode"], r["eps"]), {})
        for name, res in r["results"].items():
            d.setdefault(name, []).append(res["accuracy"])
    names = ["unadapted", *variants(0)]
    print("| dataset | start | seeds | " + " | ".join(names) + " |")
    print("|" + "---|" * (3 + len(names)))
    for (dataset, mode, eps), d in sorted(rows.items()):
        cells = []
        for n in names:
            v = d.get(n, [])
            cells.append("-" if not v else f"{100 * statistics.mean(v):.1f} ± "
                         f"{100 * (statistics.stdev(v) if len(v) > 1 else 0.0):.1f}")
        start = f"private {eps:g}" if mode == "ldpkit" else f"data-free at {eps:g}"
        print(f"| {dataset} | {start} | {len(d.get('unadapted', []))} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
