"""Adaptation variants, each from the same trained student: what the on-device step could do on photos.

One label run per set and seed (``bench_adapt.run_one``, the library's defaults, the same seeds and releases as
``bench_adapt.py``) trains its student once; at the adaptation step an explorer takes over: it copies the
trained student, runs every variant below on a copy (the same clean records, the same teacher-labelled anchor
batches), scores each against the truth, then adapts the run's own student the library's way. So the variants
differ only in the adaptation and the unadapted accuracy is one number per run. (The design of
``bench_adapters.py``, issue 20's comparison on the grey sets with FixMatch proper; this one keeps the library's
adaptation as the run's own, takes public images and the residual teacher, and its variants are the photo ones.)

Variants (:class:`ldpclient.transfer.adapt.SelfTrainingAdapter` unless said; all but the last without the
library's check of image changes, ``changes=()``, as adaptation was before it):

* ``weak``: rotation ±5°, shift ±1 px (the adaptation before the check), labelled through the library's views
  (the one-pixel shifts); ``weak, one view``: the same labelled from the records as they are (the adaptation
  before the check and the views); ``kept changes, one view``: the library's without its views;
* ``weak+mirror``: the same with half the rows mirrored first;
* ``crop+mirror``: training's own augmentation instead (mirror, then a shift of up to an eighth of the side
  from an edge-padded copy, :func:`ldpclient.transfer.affine.flip_crop`);
* ``crop+mirror+cutout``: that, then a square of a quarter of the side set to 0 at a random place (a strong
  view, as FixMatch trains on);
* ``weak+mirror x2``, ``weak x2``: 6 epochs per round instead of 3;
* ``colour``, ``colour x2``: each row as it is or, a quarter each, with its channels in a random order, inverted
  or grey, then the weak transform (:func:`colour_changes`);
* ``mirror+cutout``: half the rows mirrored, half given a quarter-side square of the image's mean;
* ``5 rounds``: the curriculum in 5 rounds (20 % ... 100 %); ``lr 1e-3``: three times the step;
* ``average``, ``average x2``, ``colour average x2``, ``mirror average x2``: a moving average of the weights
  labels (:class:`AveragedAdapter`);
* ``kept changes, crop``, ``kept changes, crop and weak``: the library's adaptation with training's shift (up to
  an eighth of the side) instead of the weak transform, or before it;
* ``kept changes``: the library's adaptation (the changes its student keeps, with twice the epochs, and the
  labels of the records it is unsure of through their views and the one-pixel shifts); ``kept changes, every
  view``: the same with every record labelled through its views; ``kept changes, 5 epochs``: the library's with 5
  epochs a round where it keeps changes, not 6; ``kept changes, every anchor``: the library's with as many anchor
  rows per step as pseudo-labelled ones where it trains on kept changes, not half (:class:`EveryAnchorAdapter`;
  the rows of ``kept changes, fewer anchors`` in the result files are the library's now, and so are those of
  ``kept changes, mirror trained``: the library's, with half the anchor rows, training on a kept mirror too where it
  had been a label view only; ``kept changes, mirror trained, every anchor`` is ``kept changes, every anchor``).

It also reports, for a decision that needs no teacher, how often the unadapted student keeps its own label of
a clean private record under a mirror and under the mirror check's shift (``student_mirror`` /
``student_shift``, 200 records, :func:`ldpclient.transfer.mirror_check.mirror_check`'s copies).

    .venv/bin/python benchmarks/bench_adapt_variants.py --dataset cifar10 --public 5000 --seeds 3 \\
        --out benchmarks/results/adapt_variants.jsonl
    .venv/bin/python benchmarks/bench_adapt_variants.py --table --out benchmarks/results/adapt_variants.jsonl
    .venv/bin/python benchmarks/bench_adapt_variants.py --dataset colour-digits --seeds 3 --variants weak \
        "weak x2" colour "colour x2" "5 rounds" "lr 1e-3" weak+mirror --out benchmarks/results/adapt_kinds.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
from functools import partial
from pathlib import Path
from typing import Any, Callable

import bench_adapt
import numpy as np
import torch
from bench_adapters import AdaptOnCopies

from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.adapt import SelfTrainingAdapter, weak_augmentation
from ldpclient.transfer.affine import flip_crop

SETS = {"cifar10": 32, "colour-digits": 32, "fashion": 28, "mnist": 28, "digits": 28}


def crop(side: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Training's shift (:func:`ldpclient.transfer.defaults.train_crop` with public images: an eighth of the
    side): a window of an edge-padded copy (global RNG)."""
    return partial(flip_crop, pad=defaults.train_crop(side, True), flip=False)


def crop_weak(side: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """:func:`crop`, then the library's weak rotation and shift."""
    shift, weak = crop(side), weak_augmentation(side)
    return shift if weak is None else lambda images: weak(shift(images))


def crop_cutout(side: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """:func:`crop`, then a zero square of a quarter of the side at a random place of each image (global RNG)."""
    shift, size = crop(side), max(1, side // 4)

    def strong(images: torch.Tensor) -> torch.Tensor:
        out = shift(images).clone()
        n, _, h, w = out.shape
        rows = torch.randint(0, h - size + 1, (n,))
        cols = torch.randint(0, w - size + 1, (n,))
        for i in range(n):
            out[i, :, rows[i]:rows[i] + size, cols[i]:cols[i] + size] = 0.0
        return out

    return strong


def colour_changes(images: torch.Tensor) -> torch.Tensor:
    """Each colour image ``(N, 3, H, W)`` in [0, 1] as it is or, a quarter of them each, with its channels in a
    random order, inverted, or grey (the channels' mean); grey images as they are (global RNG)."""
    n, c = images.shape[:2]
    if c != 3:
        return images
    pick = torch.randint(0, 4, (n,))
    orders = torch.stack([torch.randperm(3) for _ in range(n)])
    shuffled = images[torch.arange(n)[:, None], orders]
    grey = images.mean(1, keepdim=True).expand_as(images)
    out = torch.where((pick == 1)[:, None, None, None], shuffled, images)
    out = torch.where((pick == 2)[:, None, None, None], 1.0 - images, out)
    return torch.where((pick == 3)[:, None, None, None], grey, out)


def mean_cutout(images: torch.Tensor) -> torch.Tensor:
    """Half the images with a square of a quarter of the side set to the image's mean at a random place."""
    n, _, h, w = images.shape
    size = max(1, h // 4)
    out = images.clone()
    cut = torch.rand(n) < 0.5
    rows = torch.randint(0, h - size + 1, (n,))
    cols = torch.randint(0, w - size + 1, (n,))
    for i in torch.nonzero(cut).flatten().tolist():
        out[i, :, rows[i]:rows[i] + size, cols[i]:cols[i] + size] = images[i].mean()
    return out


def then_weak(change: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[int], Callable]:
    """``change`` on every pseudo-labelled batch, then the library's weak rotation and shift."""

    def build(side: int) -> Callable[[torch.Tensor], torch.Tensor]:
        weak = weak_augmentation(side)
        return lambda images: change(images) if weak is None else weak(change(images))

    return build


class AveragedAdapter(SelfTrainingAdapter):
    """The library's adaptation with an exponential moving average of the weights (``decay`` per step, as in
    Mean Teacher, Tarvainen and Valpola 2017): the averaged model chooses each round's pseudo-labels and gives
    the labels; the optimiser steps the model as before."""

    def __init__(self, decay: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.decay = decay
        self.average: torch.nn.Module | None = None

    def adapt(self, model: torch.nn.Module, records: Any, anchor: Any = None, probs: Any = None,
              on_round: Any = None, prior: Any = None) -> Any:
        self.average = None
        return super().adapt(model, records, anchor, probs=probs, on_round=on_round, prior=prior)

    def _fit_round(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *rest: Any, **options: Any) -> float:
        if self.average is None:
            self.average = copy.deepcopy(model)
            step = optimizer.step

            def stepped(*args: Any, **kwargs: Any) -> Any:
                out = step(*args, **kwargs)
                with torch.no_grad():
                    assert self.average is not None
                    for a, p in zip(self.average.state_dict().values(), model.state_dict().values(), strict=True):
                        if a.dtype.is_floating_point:
                            a.mul_(self.decay).add_(p, alpha=1 - self.decay)
                        else:
                            a.copy_(p)
                return out

            optimizer.step = stepped  # type: ignore[method-assign]
        return super()._fit_round(model, optimizer, *rest, **options)

    def _predict(self, model: torch.nn.Module, records: Any, hist: Any) -> torch.Tensor:
        return super()._predict(model if self.average is None else self.average.eval(), records, hist)


def mirrored(images: torch.Tensor) -> torch.Tensor:
    """Half the images mirrored left to right (global RNG)."""
    return flip_crop(images, pad=0, flip=True)


def crop_mirror(side: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A mirror of half the images, then training's shift (:func:`crop`)."""
    shift = crop(side)
    return lambda images: shift(mirrored(images))


def crop_mirror_cutout(side: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A mirror of half the images, then :func:`crop_cutout`."""
    strong = crop_cutout(side)
    return lambda images: strong(mirrored(images))


class SingleViewAdapter(SelfTrainingAdapter):
    """The library's adaptation whose labels are its outputs on the records as they are (no views)."""

    def _predict_views(self, model: torch.nn.Module, records: Any, hist: Any) -> torch.Tensor:
        return self._predict(model, records, hist)


class EveryAnchorAdapter(SelfTrainingAdapter):
    """The library's adaptation whose steps take as many anchor rows as pseudo-labelled ones at any epochs (the
    library takes the share ``epochs / epochs_with_changes`` of them where it trains on kept changes)."""

    def _fit_round(self, *args: Any, **kwargs: Any) -> float:
        return super()._fit_round(*args, **{**kwargs, "anchor_share": 1.0})


class ViewsOnlyAdapter(SelfTrainingAdapter):
    """The library's check of image changes, with the changes its student keeps used only as label views: the rounds
    train with the weak transform at ``epochs``, as before the check."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(epochs_with_changes=3, **kwargs)

    def _augment(self, image_size: int, changes: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
        return self.augmentation(image_size)


def unchecked(**kwargs: Any) -> SelfTrainingAdapter:
    """The library's adapter without its check of image changes (the adaptation before it), with ``kwargs``."""
    return SelfTrainingAdapter(changes=(), **kwargs)


VARIANTS: dict[str, Callable[[int], SelfTrainingAdapter]] = {
    "weak": lambda seed: unchecked(seed=seed),
    "weak, one view": lambda seed: SingleViewAdapter(seed=seed, changes=()),
    "kept changes, one view": lambda seed: SingleViewAdapter(seed=seed),
    "weak+mirror": lambda seed: unchecked(seed=seed, augmentation=then_weak(mirrored)),
    "crop+mirror": lambda seed: unchecked(seed=seed, augmentation=crop_mirror),
    "crop+mirror+cutout": lambda seed: unchecked(seed=seed, augmentation=crop_mirror_cutout),
    "weak+mirror x2": lambda seed: unchecked(seed=seed, epochs=6, augmentation=then_weak(mirrored)),
    "weak x2": lambda seed: unchecked(seed=seed, epochs=6),
    "colour": lambda seed: unchecked(seed=seed, augmentation=then_weak(colour_changes)),
    "colour x2": lambda seed: unchecked(seed=seed, epochs=6, augmentation=then_weak(colour_changes)),
    "mirror+cutout": lambda seed: unchecked(seed=seed, augmentation=then_weak(lambda x: mean_cutout(mirrored(x)))),
    "5 rounds": lambda seed: unchecked(seed=seed, schedule=(0.2, 0.4, 0.6, 0.8, 1.0)),
    "lr 1e-3": lambda seed: unchecked(seed=seed, lr=1e-3),
    "average": lambda seed: AveragedAdapter(0.97, seed=seed, changes=()),
    "average x2": lambda seed: AveragedAdapter(0.98, seed=seed, changes=(), epochs=6),
    "colour average x2": lambda seed: AveragedAdapter(0.98, seed=seed, changes=(), epochs=6,
                                                      augmentation=then_weak(colour_changes)),
    "mirror average x2": lambda seed: AveragedAdapter(0.98, seed=seed, changes=(), epochs=6,
                                                      augmentation=then_weak(mirrored)),
    "kept changes": lambda seed: SelfTrainingAdapter(seed=seed),
    "kept changes, every view": lambda seed: SelfTrainingAdapter(seed=seed, unsure_below=math.inf),
    "kept changes, 5 epochs": lambda seed: SelfTrainingAdapter(seed=seed, epochs_with_changes=5),
    "kept changes, every anchor": lambda seed: EveryAnchorAdapter(seed=seed),
    "kept changes, 3 epochs": lambda seed: SelfTrainingAdapter(seed=seed, epochs_with_changes=3),
    "kept changes as views only": lambda seed: ViewsOnlyAdapter(seed=seed),
    "kept changes, crop": lambda seed: SelfTrainingAdapter(seed=seed, augmentation=crop),
    "kept changes, crop and weak": lambda seed: SelfTrainingAdapter(seed=seed, augmentation=crop_weak),
}


class Explorer(AdaptOnCopies):
    """Stands in for the adapter: every variant on a copy of the trained student, then the library's adaptation
    on the run's own; also the student's own mirror check."""

    def __init__(self, seed: int, truth: torch.Tensor, names: list[str]) -> None:
        super().__init__(truth, {name: VARIANTS[name](seed) for name in names},
                         SelfTrainingAdapter(seed=seed))
        self.seed = seed
        self.mirror: dict[str, float] = {}

    def inspect(self, model: torch.nn.Module, source: Any) -> None:
        """The mirror check with the student in the teacher's place, on the clean records (bench_adapt's)."""
        v = bench_adapt.mirror_verdict(model.eval(), source.read(np.arange(len(source))), seed=self.seed)
        self.mirror = {} if v is None else {"student_mirror": v.mirror_agreement, "student_shift": v.shift_agreement}

    @property
    def row(self) -> dict[str, float]:
        """This script's row: the unadapted accuracy, the mirror check's shares, each variant's accuracy and
        ``"<name> s"`` its seconds (``"library s"``: the library's adaptation of the run's own student)."""
        out = {"unadapted": self.unadapted, **self.mirror, "library s": self.final_seconds}
        for name, (acc, seconds) in self.scores.items():
            out.update({name: acc, f"{name} s": seconds})
        return out


def table(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["teacher_arch"], r["public"]), []).append(r)
    timed = [k[: -len(" s")] for r in rows for k in r if k.endswith(" s") and k[: -len(" s")] in r]
    names = ["unadapted", *dict.fromkeys(timed)]  # each variant in the rows, with or without this script's
    print("| set (teacher), public images | seeds | student mirror/shift | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))

    def ms(values: list[float]) -> str:
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{100 * statistics.mean(values):.1f} ± {100 * sd:.1f}"

    for (dataset, arch, public), rs in groups.items():
        ratio = [r["student_mirror"] / max(r["student_shift"], 1e-9) for r in rs if "student_mirror" in r]
        spread = f"{min(ratio):.2f}-{max(ratio):.2f}" if ratio else "-"
        cells = [ms([r[n] for r in rs]) if all(n in r for r in rs) else "-" for n in names]
        print(f"| {dataset} ({arch}), {public} | {len(rs)} | {spread} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", choices=sorted(SETS), default=["cifar10"])
    p.add_argument("--public", type=int, default=0, help="public images sent beside the queries (0: none)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--teacher", choices=bench_adapt.TEACHERS, default="small_cnn")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--out", type=Path, default=Path("adapt_variants.jsonl"))
    p.add_argument("--table", action="store_true")
    args = p.parse_args(argv)
    if args.table:
        table(args.out)
        return
    done = set()
    if args.out.exists():
        done = {(r["dataset"], r["teacher_arch"], r["public"], r["seed"])
                for r in map(json.loads, args.out.read_text().splitlines())}
    for name in args.dataset:
        size = SETS[name]
        label, tx, ty, px, py = bench_adapt.load_dataset(name, size)
        torch.set_num_threads(2 if args.teacher != "small_cnn" else 1)
        model = bench_adapt.cached_teacher(label, tx, ty, args.teacher)
        torch.set_num_threads(1)
        teacher = LocalTeacher(model, tuple(px.shape[1:]), 10, name=label)
        public = bench_adapt.public_images(name, size, args.public) if args.public else None
        verdict = bench_adapt.mirror_verdict(model, public)
        flip = verdict is not None and verdict.flip
        setting = bench_adapt.resolve(bench_adapt.parse_setting("laplace:100:-:-:-:-"), tuple(px.shape[1:]),
                                      len(px), "dct")
        basis = {"basis": "dct", "coefficients": None, "clip_norm": None}
        for seed in range(args.seeds):
            if (label, args.teacher, args.public, seed) in done:
                continue
            print(f"# {label} ({args.teacher}), public {args.public}, seed {seed}: flip {flip}", flush=True)
            explorer = Explorer(seed, py, args.variants)
            r = bench_adapt.run_one(teacher, px, py, setting, seed, "ldpkit", True, basis=basis, public=public,
                                    adapter=explorer)
            row = {"dataset": label, "teacher_arch": args.teacher, "public": args.public, "seed": seed,
                   "flip": flip, "library": r["accuracy"], "wall_s": r["wall_s"], **explorer.row}
            with args.out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
