"""Utility study: what a label run buys per epsilon, beside the strongest data-free baseline.

Two real datasets, the same code:

* ``digits``: scikit-learn's digits (bundled) at ``--size`` (8x8 native, 28x28 upscaled), split
  0.4/0.4/0.2 (teacher/private/held out): 719 private records;
* ``mnist``: 5,000 real 28x28 MNIST digits (``benchmarks/mnist5k.py``: teacher 3,500, private 1,000);
* ``mnist-colour``: the same digits as 32x32 RGB images, each in a random colour on a random background
  (:func:`colourise`), with a 3-channel teacher;
* ``colour-digits``: the same digits as varied 32x32 colour photos (:func:`colour_photos`): either polarity,
  bright and dark backgrounds, shifted by up to 2 pixels, with sensor noise and a lighting gradient;
* ``cifar10``: 32x32 RGB photos (``benchmarks/cifar10.py``: private 1,000, teacher 16,000, public 5,000).
* ``fashion``: 28x28 grey Fashion-MNIST clothes (``benchmarks/fashion.py``: the same parts).

A CNN teacher is trained on the teacher part (cached in ``benchmarks/.cache``); the private part is
labelled by :class:`ldpclient.transfer.pipeline.KnowledgeTransfer` with an in-process
:class:`~ldpclient.teachers.local.LocalTeacher`, with the library's own defaults wherever a setting
field is ``-``. Every run reports, from the same trained student, the accuracy **before** and
**after** adaptation on the clean private records.

The baseline: ``data-free`` mode (blank records, epsilon 0) with the same query budget, training
and adaptation. Its blank queries cost no privacy, so their noise level is a free choice:
``--free-eps`` runs it at each level of a grid fixed in advance, and the table sets every private
row beside the **strongest** of them (the best mean over seeds, against ground truth).

Settings are ``mechanism:eps_record:reduce:queries:epochs:train_batch[:postprocess]`` (per-record
epsilon; Gaussian at delta = 1e-5 per record; ``-`` for the library default of a field; postprocess
with ``;`` for ``,``). Results are appended to a JSONL file (one line per run, resumable: finished
runs are skipped) and ``--table`` prints mean ± std over seeds as markdown::

    .venv/bin/python benchmarks/bench_adapt.py --dataset digits mnist --seeds 3 \\
        --settings laplace:50:-:-:-:- laplace:100:-:-:-:- --free-eps 10 30 100 300 --out study.jsonl
    .venv/bin/python benchmarks/bench_adapt.py --table --out study.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ldpclient.io.datasets import load_digits_images, split_indices
from ldpclient.names import BASES, FREE_IMAGES
from ldpclient.privacy import defaults as privacy_defaults
from ldpclient.privacy import fit_pca, make_mechanism
from ldpclient.privacy.guarantee import Domain
from ldpclient.privacy.public import public_release, public_seed
from ldpclient.run.plan import shape_settings
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.adapt import SelfTrainingAdapter
from ldpclient.transfer.mirror_check import MirrorVerdict, mirror_check
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings

DELTA = 1e-5
CACHE = Path(__file__).resolve().parent / ".cache"
DATASETS = ("digits", "mnist", "mnist-colour", "colour-digits", "cifar10", "fashion")
FIELDS = ("mechanism", "eps_record", "reduce", "queries", "epochs", "train_batch")


def train_teacher(x: torch.Tensor, y: torch.Tensor, *, epochs: int = 30, seed: int = 0) -> torch.nn.Module:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_reproduction import train_teacher as train

    return train(x, y, epochs=epochs, seed=seed)


def load_dataset(name: str, size: int) -> tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(label, teacher x, teacher y, private x, private y)``: float32 ``(N, 1, H, W)`` in [0, 1], int64 labels."""
    if name == "digits":
        x, y = load_digits_images(size)
        tr, pv, _ = split_indices(len(x), (0.4, 0.4, 0.2), seed=0)
        return f"digits{size}", x[tr], y[tr], x[pv], y[pv]
    if name in ("mnist", "mnist-colour", "colour-digits"):
        import mnist5k

        parts = mnist5k.split()

        def tensors(part: str) -> tuple[torch.Tensor, torch.Tensor]:
            images, labels = parts[part]
            return torch.from_numpy(images).float() / 255.0, torch.from_numpy(labels)

        (tx, ty), (px, py) = tensors("teacher"), tensors("private")
        if name == "mnist":
            return "mnist28", tx, ty, px, py
        if name == "colour-digits":
            return "colour-digits32", colour_photos(tx, seed=1), ty, colour_photos(px, seed=2), py
        return "mnist-colour32", colourise(tx, seed=1), ty, colourise(px, seed=2), py
    if name in ("cifar10", "fashion"):
        import cifar10
        import fashion

        parts = cifar10.split() if name == "cifar10" else fashion.split()
        (tx, ty), (px, py) = (parts[p] for p in ("teacher", "private"))
        return ("cifar10-32" if name == "cifar10" else "fashion28", torch.from_numpy(tx).float() / 255.0,
                torch.from_numpy(ty), torch.from_numpy(px).float() / 255.0, torch.from_numpy(py))
    raise SystemExit(f"unknown dataset {name!r} ({', '.join(DATASETS)})")


PUBLIC_SHIFTS = ("none", "classes", "scale")


def public_images(name: str, size: int, n: int | None, shift: str = "none") -> torch.Tensor:
    """``n`` images of the dataset that are neither the teacher's nor the private ones (its held-out part:
    digits 359, MNIST 500; CIFAR-10 and Fashion-MNIST: their public part, 5,000), for ``--public``: float
    ``(n, C, H, W)`` in [0, 1], like the private part.

    ``shift`` (``--public-shift``, issue 46 item 5) draws them from another distribution than the private
    images: ``classes``, only images of the lower half of the classes (0-4 of 10: the private images' other
    half is never seen in public); ``scale``, every image shrunk to :data:`SHIFT_SCALE` of its side, centred on
    its own border colour (the median of its edge pixels, per channel). ``n`` None: all of them."""
    if name in ("cifar10", "fashion"):
        import cifar10
        import fashion

        images, labels = (cifar10.split() if name == "cifar10" else fashion.split())["public"]
        part, classes = torch.from_numpy(images).float() / 255.0, torch.from_numpy(labels)
    elif name == "digits":
        x, y = load_digits_images(size)
        _, _, held = split_indices(len(x), (0.4, 0.4, 0.2), seed=0)
        part, classes = x[held], y[held]
    else:
        import mnist5k

        images, labels = mnist5k.split()["held_out"]
        part, classes = torch.from_numpy(images).float() / 255.0, torch.from_numpy(labels)
        if name == "mnist-colour":
            part = colourise(part, seed=3)
        elif name == "colour-digits":
            part = colour_photos(part, seed=3)
    if shift == "classes":
        part = part[classes < 5]
    elif shift == "scale":
        part = shrunk(part, SHIFT_SCALE)
    elif shift != "none":
        raise SystemExit(f"--public-shift {shift!r}: one of {', '.join(PUBLIC_SHIFTS)}")
    if n is not None and n > len(part):
        raise SystemExit(
            f"--public {n}: {name} has {len(part)} held-out images" + (f" ({shift})" if shift != "none" else "")
        )
    return part[:n]


SHIFT_SCALE = 0.6


def shrunk(images: torch.Tensor, scale: float) -> torch.Tensor:
    """``images`` (float ``(N, C, H, W)`` in [0, 1]) shrunk to ``scale`` of their side (bilinear, antialiased)
    and centred on a frame of each image's border colour (the median of its edge pixels, per channel)."""
    n, c, h, w = images.shape
    sh, sw = max(1, round(h * scale)), max(1, round(w * scale))
    small = torch.nn.functional.interpolate(images, size=(sh, sw), mode="bilinear", antialias=True,
                                            align_corners=False)
    edges = torch.cat([images[..., 0, :], images[..., -1, :], images[..., :, 0], images[..., :, -1]], dim=-1)
    out = edges.median(dim=-1).values[:, :, None, None].expand(n, c, h, w).clone()
    top, left = (h - sh) // 2, (w - sw) // 2
    out[..., top:top + sh, left:left + sw] = small
    return out.clamp(0.0, 1.0)


def colourise(grey: torch.Tensor, *, seed: int) -> torch.Tensor:
    """MNIST digits as 32x32 RGB images: each digit (padded by 2 pixels) in a random colour on a random
    background colour, the two at least 0.3 apart in luminance (BT.601), drawn from ``seed``.

    ``grey``: float ``(N, 1, 28, 28)`` in [0, 1]; returns float ``(N, 3, 32, 32)`` in [0, 1].
    """
    g = torch.Generator().manual_seed(seed)
    n = len(grey)
    luma = torch.tensor([0.299, 0.587, 0.114])
    fg, bg = torch.rand(n, 3, generator=g), torch.rand(n, 3, generator=g)
    while True:  # redraw the pairs too close in luminance to read
        close = ((fg - bg) @ luma).abs() < 0.3
        if not close.any():
            break
        fg[close], bg[close] = (
            torch.rand(int(close.sum()), 3, generator=g),
            torch.rand(int(close.sum()), 3, generator=g),
        )
    mask = torch.nn.functional.pad(grey, (2, 2, 2, 2))
    return bg[:, :, None, None] * (1 - mask) + fg[:, :, None, None] * mask


def colour_photos(grey: torch.Tensor, *, seed: int) -> torch.Tensor:
    """MNIST digits as varied 32x32 colour photos, drawn from ``seed``: :func:`colourise`'s colour pairs (ink
    and background at least 0.3 apart in BT.601 luminance, so either polarity, bright and dark backgrounds),
    the digit shifted by up to 2 pixels each way, a linear lighting gradient of up to ±0.15 across the frame,
    and Gaussian sensor noise of a standard deviation drawn per image in [0, 0.06]; clipped to [0, 1].

    ``grey``: float ``(N, 1, 28, 28)`` in [0, 1]; returns float ``(N, 3, 32, 32)`` in [0, 1].
    """
    g = torch.Generator().manual_seed(10_000 + seed)
    n = len(grey)
    framed = colourise(grey, seed=seed)
    dy, dx = torch.randint(-2, 3, (2, n), generator=g)
    rows = (torch.arange(32)[None, :] - dy[:, None]).clamp(0, 31)
    cols = (torch.arange(32)[None, :] - dx[:, None]).clamp(0, 31)
    shifted = framed[torch.arange(n)[:, None, None, None], torch.arange(3)[None, :, None, None],
                     rows[:, None, :, None], cols[:, None, None, :]]
    ramp = torch.linspace(-1.0, 1.0, 32)
    angle = torch.rand(n, generator=g) * 2 * torch.pi
    strength = torch.rand(n, generator=g) * 0.15
    light = strength[:, None, None] * (torch.cos(angle)[:, None, None] * ramp[None, None, :]
                                       + torch.sin(angle)[:, None, None] * ramp[None, :, None])
    sigma = torch.rand(n, generator=g) * 0.06
    noise = torch.randn(n, 3, 32, 32, generator=g) * sigma[:, None, None, None]
    return (shifted + light[:, None] + noise).clamp(0.0, 1.0)


#: ``--teacher`` choices: the small CNN every table so far used, and the mock server's ``--arch resnet``
#: (a small residual network trained 15 epochs with flip and crop augmentation: the stronger photo teacher).
TEACHERS = ("small_cnn", "resnet")
RESNET_EPOCHS = 15


def _teacher_recipe(arch: str, x: torch.Tensor, y: torch.Tensor) -> tuple[str, Any, Any]:
    """``(cache file suffix, build an untrained model, train one)`` for ``arch`` of :data:`TEACHERS`."""
    if arch == "resnet":
        from mock_server.teacher import _resnet, train_resnet

        return ("-resnet", lambda: _resnet(x.shape[1], 10),
                lambda: train_resnet(x, y, 10, epochs=RESNET_EPOCHS, seed=0))
    from ldpclient.transfer.student import small_cnn

    return ("", lambda: small_cnn(num_classes=10, in_channels=x.shape[1], image_size=x.shape[-1], width=32),
            lambda: train_teacher(x, y))


def cached_teacher(label: str, x: torch.Tensor, y: torch.Tensor, arch: str = "small_cnn") -> torch.nn.Module:
    """The ``arch`` teacher for ``label``, trained once and kept in ``benchmarks/.cache`` (same weights every
    run)."""
    suffix, build, train = _teacher_recipe(arch, x, y)
    path = CACHE / f"teacher-{label}{suffix}.pt"
    if path.exists():
        model = build()
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    t0 = time.perf_counter()
    model = train()
    print(f"# trained the {arch} teacher for {label} in {time.perf_counter() - t0:.0f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model.eval()


def mechanism(name: str, eps_record: float, reduce: int, basis: dict | None = None):
    """The setting's mechanism; ``basis``: ``{"basis": "dct", "coefficients": K, "clip_norm": C}`` (None: pool)."""
    opts = dict(basis or {})
    if name == "gaussian":
        opts["delta"] = DELTA
    return make_mechanism(name, epsilon=eps_record, per="record", reduction=reduce, **opts)


def resolve(setting: dict, shape: tuple[int, ...], n: int, basis: str = "pool") -> dict:
    """The setting with every ``-`` field replaced by the library default for records of ``shape``."""
    out = dict(setting)
    if out["mechanism"] is None:
        out["mechanism"] = privacy_defaults.mechanism()
    if out["eps_record"] is None:
        out["eps_record"] = privacy_defaults.epsilon()
    out["reduce"], post = shape_settings(
        shape, out["reduce"], out.get("postprocess") or None, basis, out["eps_record"], "record"
    )
    if out["queries"] is None:
        out["queries"] = defaults.num_queries(n, "sup")
    if out["epochs"] is None:
        out["epochs"] = defaults.epochs()
    if out["train_batch"] is None:
        out["train_batch"] = defaults.train_batch_size()
    out["postprocess"] = post
    return out


def run_one(teacher, records, truth, setting: dict, seed: int, mode: str, adapt: bool,
            selection_sample: int | None = None, val_fraction: float | None = None,
            blank: tuple[float, float] | None = None, max_per_round: int | None = None, adapter: Any = None,
            basis: dict | None = None, public: torch.Tensor | None = None, student: str | None = None,
            public_repeats: int | None = None, crop: int | None = None, flip: bool | None = None,
            student_width: int | None = None, adapt_changes: bool = True, warmup: int | None = None,
            augment: str = "sup", free_images: str = "blank", hold: str = "none", query_rounds: int | None = None,
            min_round_gain: float | None = None, students: int | None = None,
            student_seed: int | None = None, device: str = "cpu", decode: str | None = None,
            student_weights: str | None = None) -> dict:
    """One labelling run; ``blank``: ``(fraction, noise level)`` of public blank queries mixed into it;
    ``adapter``: the adaptation step's object (default: the library's, bounded by the two options before it);
    ``basis``: the release basis's options for :func:`mechanism` (None: pool); ``public``: images declared
    public, sent as they are beside the queries (``label --public``); ``student``: a student zoo name (None:
    the library's default); ``public_repeats``: times per epoch each public image is trained on (None: the
    library's default); ``flip``: mirror training rows (None: the library's mirror check decides);
    ``adapt_changes``: adaptation checks which image changes the student keeps and trains on them (the library's
    default; False: not, adaptation as before the check, ``SelfTrainingAdapter(changes=())``); ``warmup``: epochs of
    the rotation pretext on the clean records before training (``label --warmup``; None: none); ``augment``: the
    query expansion (``label --augment``: sup, rand); ``free_images``: the data-free run's and the mixed-in
    blank queries' records (``blank``: noised blanks; ``procedural``: procedural images sent as they are);
    ``hold``: what ``seed`` leaves alone, to tell where the spread over seeds comes from: ``data`` (the plan and
    the release noise are seed 0's, ``seed`` draws only the student's side: ``TrainingSettings.student_seed``),
    ``student`` (the student's draws are seed 0's, ``seed`` draws the plan and the noise), ``none``;
    ``query_rounds``, ``min_round_gain``: send the queries in rounds (``label --query-rounds``; None: the
    library's defaults); ``students``: students trained on the same answers, labels from their mean
    output (``label --students``; None: the library's default); ``student_seed``: the seed of the student's draws
    alone (``TrainingSettings.student_seed``), in place of the one ``hold`` gives; ``device``: where the student
    trains and labels (``TrainingSettings.device``: every table here is ``cpu``, one thread); ``decode``: send the
    releases decoded by a decoder learnt from the public images (``PlanSettings.decode``: auto, always, none);
    ``student_weights``: a weights file the student starts from (``label --student-weights``; None: random)."""
    run_seed, held_seed = {"none": (seed, None), "data": (0, seed), "student": (seed, 0)}[hold]
    student_seed = student_seed if student_seed is not None else held_seed
    mech = mechanism(setting["mechanism"], setting["eps_record"], setting["reduce"], basis)
    plan: dict = {"augment": augment, "num_queries": setting["queries"], "postprocess": setting["postprocess"]}
    training: dict = {"epochs": setting["epochs"], "batch_size": setting["train_batch"], "device": device}
    adaptation: dict = {"adapt": adapt}
    if blank is not None:
        plan["blank_fraction"] = blank[0]
        plan["blank_mechanism"] = mechanism(setting["mechanism"], blank[1], setting["reduce"], basis)
    if val_fraction is not None:
        training["val_fraction"] = val_fraction
    if adapter is not None:
        adaptation["adapter"] = adapter
    elif selection_sample is not None or max_per_round is not None or not adapt_changes:
        sample = selection_sample if selection_sample is not None else len(records)
        adaptation["adapter"] = SelfTrainingAdapter(seed=seed if student_seed is None else student_seed,
                                                    selection_sample=sample,
                                                    max_per_round=max_per_round or len(records),
                                                    **({} if adapt_changes else {"changes": ()}))
    given_plan = {"query_rounds": query_rounds, "min_round_gain": min_round_gain, "decode": decode}
    given_training = {"student": student, "public_repeats": public_repeats, "crop": crop, "flip": flip,
                      "student_seed": student_seed, "students": students, "student_weights": student_weights}
    plan.update({k: v for k, v in given_plan.items() if v is not None})  # None: the library's default
    training.update({k: v for k, v in given_training.items() if v is not None})
    if student_width is not None:
        training["student_kwargs"] = {"width": student_width}
    if warmup:
        training["warmup"] = warmup
    if free_images != "blank":
        plan["free_images"] = free_images
    kt = KnowledgeTransfer(
        teacher,
        mech,
        mode=mode,
        seed=run_seed,
        release_generator=torch.Generator().manual_seed(1000 + run_seed),
        plan=PlanSettings(**plan),
        training=TrainingSettings(**training),
        adaptation=AdaptationSettings(**adaptation),
    )
    t0 = time.perf_counter()
    res = kt.run(records, public=public)
    wall = time.perf_counter() - t0

    def accuracy(labels: torch.Tensor | None, default: float) -> float:
        return default if labels is None else float((labels == truth).float().mean())

    adapted = accuracy(res.labels, 0.0)
    return {**prior_variants(res, truth),
        "accuracy": adapted,
        "accuracy_unadapted": accuracy(res.unadapted_labels, adapted),
        "val_agreement": res.history.val_accuracy[-1] if res.history and res.history.val_accuracy else None,
        "queries_sent": res.counts["queries"],
        "rounds": [r.as_dict() for r in res.query_rounds],
        "decoding": res.decoding,
        "wall_s": round(wall, 2),
        "adapt_s": round(res.timings.get("adapt", 0.0), 2),
        "changes_checked": (res.adaptation.changes.as_dict()
                          if res.adaptation is not None and res.adaptation.changes is not None else None),
        "eps_element": res.guarantee.epsilon_element,
        "released_elements": res.guarantee.elements_per_record,
    }


def prior_variants(res: Any, truth: torch.Tensor) -> dict:
    """The adapted student's labels as trained (``accuracy_as_trained``: its outputs' argmax, which
    ``accuracy`` was before the pipeline balanced them) and re-weighted to another label prior
    (``ldpclient.transfer.prior``): ``accuracy_em`` (the records' prior estimated by EM), ``accuracy_balanced``
    (every class alike: the pipeline's labels since), with the largest class's share of the labels under each;
    empty when the run kept no outputs (no adaptation)."""
    from ldpclient.transfer.prior import em_prior, reweight, training_prior

    probs = res.adaptation.probs if res.adaptation is not None else None
    if probs is None or not res.teacher_label_histogram:
        return {}
    k = probs.shape[1]
    prior = training_prior(res.teacher_label_histogram, k)
    em, em_estimate = em_prior(probs, prior)
    balanced = reweight(probs, prior, torch.full((k,), 1.0 / k, dtype=torch.float64))

    def top(labels: torch.Tensor) -> float:
        return round(float(torch.bincount(labels, minlength=k).max()) / len(labels), 4)

    return {"accuracy_as_trained": float((probs.argmax(1) == truth).float().mean()),
            "accuracy_em": float((em.argmax(1) == truth).float().mean()),
            "accuracy_balanced": float((balanced.argmax(1) == truth).float().mean()),
            "top_share": top(probs.argmax(1)), "top_share_em": top(em.argmax(1)),
            "top_share_balanced": top(balanced.argmax(1)), "training_prior_top": round(float(prior.max()), 4),
            "top_share_unadapted": top(res.unadapted_labels) if res.unadapted_labels is not None else None,
            "em_prior_top": round(float(em_estimate.max()), 4)}


def long_tail(x: torch.Tensor, y: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``ratio ** (k / (K - 1))`` of each class ``k``'s records (in their order): an imbalanced private
    part, to see what a correction that assumes balanced classes costs there."""
    k = int(y.max()) + 1
    keep = torch.zeros(len(y), dtype=torch.bool)
    for c in range(k):
        idx = torch.nonzero(y == c).flatten()
        keep[idx[: max(1, round(len(idx) * ratio ** (c / (k - 1))))]] = True
    return x[keep], y[keep]


def parse_setting(text: str) -> dict:
    """``mechanism:eps_record:reduce:queries:epochs:train_batch[:postprocess]``; ``-``: the default."""
    *values, = text.split(":", 6)
    if len(values) < 6:
        raise SystemExit(f"setting {text!r}: give {':'.join(FIELDS)}[:postprocess]")
    kinds = (str, float, int, int, int, int)
    out: dict = {f: None if v == "-" else kind(v) for f, kind, v in zip(FIELDS, kinds, values, strict=False)}
    out["postprocess"] = values[6].replace(";", ",") if len(values) > 6 else None
    return out


def mirror_verdict(
    model: torch.nn.Module, public: torch.Tensor | None, seed: int | None = None
) -> MirrorVerdict | None:
    """What the library's mirror check (:mod:`ldpclient.transfer.mirror_check`) finds for the teacher ``model`` on
    the ``public`` images (float ``(N, C, H, W)`` in [0, 1]), with the sample and shifts drawn from ``seed`` (None:
    the ones a label run draws for them; None back: no public images, too few or too small to check): ``label
    --public`` without ``--flip``/``--no-flip`` trains with its ``flip``."""
    if public is None:
        return None
    release = public_release(public, Domain(0.0, 1.0))
    side = min(release.record_shape[-2:])
    check = mirror_check(release, public_seed(release.values) if seed is None else seed,
                         defaults.mirror_check_images(len(release), side), defaults.train_crop(side, True))
    if check is None:
        return None
    with torch.no_grad():
        original = model(release[torch.from_numpy(check.sample)].values).argmax(1).numpy()
        copies = model(check.images).argmax(1).numpy()
    return check.verdict(original, copies)


def key_of(dataset: str, setting: dict, seed: int, mode: str, variant: dict) -> str:
    return json.dumps({"dataset": dataset, **setting, "seed": seed, "mode": mode, **variant}, sort_keys=True)


def _read_runs(paths: list[Path]) -> list[dict]:
    """Runs from the JSONL files, first occurrence of each key kept (so files may be merged)."""
    runs: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            r.setdefault("dataset", f"digits{r.get('size', 28)}")  # files from before --dataset
            r.setdefault("postprocess", defaults.blur_postprocess((r.get("size", 28),) * 2))  # before lowpass
            runs.setdefault(r["key"], r)
    return list(runs.values())


def _ms(v: list[float] | None, scale: float = 100.0) -> str:
    if not v:
        return "-"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{scale * statistics.mean(v):.1f} ± {scale * sd:.1f}"


def _budget(r: dict) -> tuple:
    """What a private row and its data-free baselines share: dataset, queries, training, adaptation's bounds."""
    sample = r.get("selection_sample")
    if r.get("max_per_round"):
        sample = f"{sample or 'all'}/{r['max_per_round']} per round"
    return (r["dataset"], r["queries"], r["epochs"], r["train_batch"], sample, r.get("public") or 0,
            r.get("public_repeats"), r.get("teacher_arch") or "small_cnn", r.get("student") or "small_cnn",
            r.get("student_width"), r.get("crop") or 0, bool(r.get("flip")), bool(r.get("adapt_flip")),
            r.get("adapt_changes"),
            r.get("train_transform"), r.get("warmup") or 0, r.get("public_shift"),
            r.get("query_rounds") or 1, r.get("min_round_gain"), bool(r.get("confusion")), r.get("students") or 1)


def _public_label(r: dict) -> str:
    """``N public images``, their shift and, where recorded, ``xR`` (times per epoch each is trained on); ''
    without any."""
    if not r.get("public"):
        return ""
    shift = f" ({r['public_shift']} shifted)" if r.get("public_shift") else ""
    return f"{r['public']} public images{shift}" + (f" x{r['public_repeats']}" if r.get("public_repeats") else "")


def _variant(r: dict) -> str:
    """How a private run differs from the defaults (blank queries mixed in, the release basis), for the table."""
    parts = [f"blank {r['blank'][0]:g} at {r['blank'][1]:g}"] if r.get("blank") else []
    if r.get("teacher_arch"):
        parts.append(f"{r['teacher_arch']} teacher")
    if r.get("student"):
        parts.append(f"student {r['student']}" + (f" width {r['student_width']}" if r.get("student_width") else ""))
    if r.get("crop"):
        parts.append(f"shift {r['crop']} px")
    if r.get("train_transform"):  # photos_student_explore.jsonl: the exploration's own spelling
        parts.append(f"training transform {r['train_transform']}")
    if r.get("flip"):
        parts.append("flip" + (", mirrored adaptation" if r.get("adapt_flip") else ""))
    if r.get("adapt_changes") == "none":
        parts.append("adaptation without image changes")
    if r.get("public"):
        parts.append(_public_label(r))
    if r.get("warmup"):
        parts.append(f"rotation warm-up {r['warmup']} epochs")
    if r.get("long_tail"):
        parts.append(f"long tail {r['long_tail']:g}")
    if r.get("augment"):
        parts.append(f"{r['augment']} queries")
    if r.get("free_images"):
        parts.append(f"{r['free_images']} free images")
    if (r.get("query_rounds") or 1) > 1:
        parts.append(f"queries in {r['query_rounds']} rounds")
    if r.get("confusion"):
        parts.append("trained through the measured confusion")
    if (r.get("students") or 1) > 1:
        parts.append(f"{r['students']} students")
    if r.get("basis"):
        parts.append(" ".join([r["basis"], *(f"{k}={r[k]:g}" for k in ("coefficients", "clip_norm") if r.get(k))]))
    return ", ".join(parts) or "-"


def strongest_baselines(runs: list[dict]) -> dict[tuple, tuple[float, list[float]]]:
    """Per budget: ``(noise level, adapted accuracies per seed)`` of the best data-free grid level (best mean)."""
    levels: dict[tuple, dict[float, list[float]]] = {}
    for r in runs:
        if r["mode"] == "data-free":
            levels.setdefault(_budget(r), {}).setdefault(r["eps_record"], []).append(r["accuracy"])
    return {b: max(lv.items(), key=lambda kv: statistics.mean(kv[1])) for b, lv in levels.items()}


def prior_table(paths: list[Path]) -> None:
    """The label prior (``ldpclient.transfer.prior``): per set, mode and variant, the adapted labels as trained,
    re-weighted to equal class shares and to the EM estimate, the gain of equal shares seed by seed, and the
    largest class's share of the labels each way (runs recorded with ``accuracy_balanced`` only)."""
    groups: dict[tuple, list[dict]] = {}
    for r in _read_runs(paths):
        if "accuracy_balanced" in r:
            groups.setdefault((r["dataset"], r.get("teacher_arch") or "small_cnn", r["mode"], r["eps_record"],
                               _variant(r)), []).append(r)
    print("| set | teacher | mode | eps/record | variant | seeds | as trained | equal shares | gain, seed by seed | "
          "EM prior | largest class share (as trained, equal) |")
    print("|" + "---|" * 11)
    for (dataset, arch, mode, eps, variant), rs in sorted(groups.items()):
        def col(key: str, rs: list[dict] = rs) -> list[float]:
            return [r[key] for r in rs]

        trained = [r.get("accuracy_as_trained", r["accuracy"]) for r in rs]  # rows from before: accuracy
        gains = [r["accuracy_balanced"] - t for r, t in zip(rs, trained, strict=True)]
        print(f"| {dataset} | {arch} | {mode} | {eps:g} | {variant} | {len(rs)} | {_ms(trained)} | "
              f"{_ms(col('accuracy_balanced'))} | {_ms(gains)} | {_ms(col('accuracy_em'))} | "
              f"{_ms(col('top_share'))}, {_ms(col('top_share_balanced'))} |")


def table(paths: list[Path]) -> None:
    runs = _read_runs(paths)
    best = strongest_baselines(runs)
    print("| dataset | mechanism | eps/record | reduce | post-processing | variant | queries | sample | seeds | "
          "private, unadapted | private, adapted | strongest data-free (its level) | gain over it | "
          "wall s |")
    print("|" + "---|" * 14)
    rows: dict[tuple, dict[str, list[float]]] = {}
    for r in runs:
        if r["mode"] != "ldpkit":
            continue
        k = (*_budget(r)[:5], r["mechanism"], r["eps_record"], r["reduce"], r["postprocess"], _variant(r),
             _budget(r)[5:])
        d = rows.setdefault(k, {})
        for field_name in ("accuracy", "accuracy_unadapted", "wall_s"):
            d.setdefault(field_name, []).append(r[field_name])
    for k in sorted(rows, key=lambda k: (k[0], str(k[4] or ""), k[5], k[6], k[9])):
        d = rows[k]
        level, base = best.get((*k[:5], *k[10]), (None, []))
        gain = [a - statistics.mean(base) for a in d["accuracy"]] if base else []
        print(f"| {k[0]} | {k[5]} | {k[6]:g} | {k[7]} | {k[8]} | {k[9]} | {k[1]} | {k[4] or 'all'} | "
              f"{len(d['accuracy'])} | "
              f"{_ms(d['accuracy_unadapted'])} | {_ms(d['accuracy'])} | "
              f"{_ms(base)} ({level if level is None else f'{level:g}'}) | {_ms(gain)} | {_ms(d['wall_s'], 1.0)} |")
    print()
    print("| dataset | data-free noise level (eps/record of the blank queries) | variant | seeds | unadapted | "
          "adapted |")
    print("|---|---|---|---|---|---|")
    grid: dict[tuple, dict[str, list[float]]] = {}
    for r in runs:
        if r["mode"] == "data-free":
            d = grid.setdefault((r["dataset"], r["eps_record"], r.get("selection_sample"), _variant(r)), {})
            d.setdefault("a", []).append(r["accuracy"])
            d.setdefault("u", []).append(r["accuracy_unadapted"])
    for k in sorted(grid, key=lambda k: (k[0], k[1], k[3])):
        d = grid[k]
        print(f"| {k[0]} | {k[1]:g} | {k[3]} | {len(d['a'])} | {_ms(d['u'])} | {_ms(d['a'])} |")


def plot(paths: list[Path], png: Path) -> None:
    """Accuracy (adapted, mean ± std over seeds) against per-record epsilon, one panel per dataset and one line per
    release design run at two epsilons or more, with the strongest data-free baseline as a band; only rows at the
    default selection sample."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in _read_runs(paths)
            if not (r.get("selection_sample") or r.get("max_per_round") or r.get("no_adapt") or r.get("blank"))]
    best = strongest_baselines(runs)
    datasets = sorted({r["dataset"] for r in runs if r["mode"] == "ldpkit"})
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4), squeeze=False)
    for ax, name in zip(axes[0], datasets, strict=True):
        # one line per release design (basis and post-processing); a design run at one epsilon only is no curve
        # (and per budget: with public images a run is another curve, beside its own zero-privacy run)
        series: dict[str, dict[float, list[float]]] = {}
        budgets: dict[str, tuple] = {}
        for r in runs:
            if r["dataset"] == name and r["mode"] == "ldpkit":
                design = f"{r.get('basis') or 'pool'} (reduce {r['reduce']}, {r['postprocess']})"
                if r.get("public"):
                    design += f" + {_public_label(r)}"
                if (r.get("student") or "small_cnn") != "small_cnn" or r.get("crop") or r.get("flip"):
                    # another student or training: another curve (rows without these keys are small_cnn's)
                    design += ", " + " + ".join([r.get("student") or "small_cnn", *(["shift"] if r.get("crop") else []),
                                                 *(["mirror"] if r.get("flip") else [])])
                series.setdefault(design, {}).setdefault(r["eps_record"], []).append(100 * r["accuracy"])
                budgets[design] = _budget(r)
        ticks: set[float] = set()
        drawn: list[tuple] = []
        for design, by_eps in sorted(series.items()):
            if len(by_eps) < 2:
                continue
            xs = sorted(by_eps)
            ticks.update(xs)
            means = [statistics.mean(by_eps[x]) for x in xs]
            sds = [statistics.stdev(by_eps[x]) if len(by_eps[x]) > 1 else 0.0 for x in xs]
            line = ax.errorbar(xs, means, yerr=sds, marker="o", capsize=3, label=f"private, {design}")
            budget = budgets[design]
            if budget in best and budget not in drawn:
                drawn.append(budget)
                level, base = best[budget]
                m = 100 * statistics.mean(base)
                sd = 100 * statistics.stdev(base) if len(base) > 1 else 0.0
                colour = line[0].get_color()
                extra = f" + {budget[5]} public" if budget[5] else ""
                ax.axhspan(m - sd, m + sd, color=colour, alpha=0.12)
                ax.axhline(m, color=colour, ls="--", label=f"zero-privacy: blank queries at {level:g}{extra}")
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks), [f"{x:g}" for x in sorted(ticks)])
        ax.minorticks_off()
        ax.set_xlabel("per-record epsilon")
        ax.set_ylabel("label accuracy (%)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.3))  # below: the lines stay visible
    fig.tight_layout()
    fig.savefig(png, dpi=110, bbox_inches="tight")
    print(f"wrote {png}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["digits", "mnist"], choices=DATASETS)
    p.add_argument("--size", type=int, nargs="+", default=[28], help="digits: image sides to scale to")
    p.add_argument("--settings", nargs="+", default=["-:-:-:-:-:-"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed-from", type=int, default=0,
                   help="the first seed (runs seeds FROM .. FROM+SEEDS-1: one seed per process, in parallel)")
    p.add_argument("--device", default="cpu",
                   help="where students train (TrainingSettings.device: cpu, cuda, auto); rows off the cpu keyed apart")
    p.add_argument("--modes", nargs="+", default=["ldpkit", "data-free"])
    p.add_argument("--free-eps", type=float, nargs="*", default=None,
                   help="data-free runs at each of these noise levels (per-record eps of the blank queries) "
                        "instead of the setting's")
    p.add_argument("--selection-sample", type=int, default=None,
                   help="adaptation's selection rounds predict on a seeded sample of this many records")
    p.add_argument("--val-fraction", type=float, default=None,
                   help="share of teacher labels held out for validation (default: the library's)")
    p.add_argument("--blank", type=float, nargs=2, default=None, metavar=("FRACTION", "EPS"),
                   help="mix this fraction of public blank queries, noised at per-record EPS, into every run")
    p.add_argument("--max-per-round", type=int, default=None,
                   help="adaptation's most pseudo-labelled records per round (default: the library's)")
    p.add_argument("--basis", choices=BASES, default="pool",
                   help="release basis (dct, pca: reduce 1, postprocess clip; pca: fitted on the --public images)")
    p.add_argument("--coefficients", type=int, default=None, help="basis dct: luminance coefficients (default: size's)")
    p.add_argument("--clip-norm", type=float, default=None, help="basis dct: the clip bound C (default: size's)")
    p.add_argument("--no-adapt", action="store_true", help="measure without the adaptation stage (time only)")
    p.add_argument("--public", type=int, default=None,
                   help="send this many of the dataset's held-out images as public images (label --public)")
    p.add_argument("--public-shift", choices=PUBLIC_SHIFTS, default="none",
                   help="with --public: draw the public images from another distribution than the private ones "
                        "(classes: only classes 0-4; scale: shrunk to 0.6 of their side)")
    p.add_argument("--public-repeats", type=int, default=None,
                   help="with --public: times per epoch each public image is trained on (default: the library's)")
    p.add_argument("--crop", type=int, default=None,
                   help="pixels by which training shifts each row at random (default: the library's for the size)")
    p.add_argument("--flip", nargs="?", choices=("auto", "on", "off"), default="auto", const="on",
                   help="mirror training rows: on (label --flip; also --flip alone), off (--no-flip), or auto (the "
                        "default: the library's mirror check on the public images, made once before the runs)")
    p.add_argument("--adapt-changes", choices=("checked", "none"), default="checked",
                   help="image changes in adaptation: checked (the library's: those the student keeps) or none "
                        "(SelfTrainingAdapter(changes=()), adaptation as before the check)")
    p.add_argument("--warmup", type=int, default=None, metavar="EPOCHS",
                   help="warm the student up on the rotation pretext over the clean records for this many epochs "
                        "before training (label --warmup; BENCHMARKS.md, 'Self-supervised warm-up')")
    p.add_argument("--student-width", type=int, default=None, help="the student's width (default: its own)")
    p.add_argument("--student", default=None, help="the student's zoo name (default: the library's)")
    p.add_argument("--student-weights", default=None, metavar="FILE",
                   help="start the student from this weights file (label --student-weights; keyed by its digest)")
    p.add_argument("--teacher", choices=TEACHERS, default="small_cnn", help="the in-process teacher's architecture")
    p.add_argument("--long-tail", type=float, default=None, metavar="RATIO",
                   help="keep a long-tailed share of the private records: class k of K keeps RATIO ** (k / (K - 1)) "
                        "of its images (0.1: the last class a tenth of the first's)")
    p.add_argument("--classes", type=int, nargs="+", default=None, metavar="CLASS",
                   help="keep only the private records of these classes (the teacher still knows all ten): a "
                        "folder that holds a few of the teacher's classes, which equal class shares assume away")
    p.add_argument("--free-images", choices=FREE_IMAGES, default="blank",
                   help="the data-free run's and --blank's free records: noised blanks or procedural images")
    p.add_argument("--augment", choices=("sup", "rand"), default="sup", help="the query expansion (label --augment)")
    p.add_argument("--hold", choices=("none", "data", "student"), default="none",
                   help="what the seeds leave alone: data (plan and noise fixed, the student's draws vary), student "
                        "(the student's draws fixed, plan and noise vary), none (everything varies)")
    p.add_argument("--query-rounds", type=int, default=None, metavar="R",
                   help="send the queries in R doubling rounds, stopping where a round gains too little "
                        "(label --query-rounds; default: the library's)")
    p.add_argument("--min-round-gain", type=float, default=None, metavar="SHARE",
                   help="with --query-rounds: the least held-out agreement gain worth the next round")
    p.add_argument("--students", type=int, default=None, metavar="N",
                   help="students trained on the same answers, labels from their mean output (label --students)")
    p.add_argument("--decode", choices=("auto", "always"), default=None,
                   help="with --public and --basis dct or pca: send the releases decoded (label --decode; "
                        "default: none)")
    p.add_argument("--out", type=Path, default=Path("bench_adapt.jsonl"), help="JSONL file the runs go to")
    p.add_argument("--merge", type=Path, nargs="*", default=[], help="with --table: more JSONL files to include")
    p.add_argument("--table", action="store_true")
    p.add_argument("--prior", action="store_true", help="with --table: the label prior's table (prior_table)")
    p.add_argument("--plot", type=Path, default=None, help="with --table: also draw the curve to this PNG")
    args = p.parse_args(argv)
    if args.table and args.prior:
        prior_table([args.out, *args.merge])
        return
    if args.table:
        table([args.out, *args.merge])
        if args.plot is not None:
            plot([args.out, *args.merge], args.plot)
        return
    torch.set_num_threads(1)
    done = set()
    if args.out.exists():
        done = {json.loads(line)["key"] for line in args.out.read_text().splitlines()}
    variant = {k: v for k, v in (("selection_sample", args.selection_sample), ("no_adapt", args.no_adapt),
                                 ("val_fraction", args.val_fraction), ("blank", args.blank),
                                 ("max_per_round", args.max_per_round), ("public", args.public or None))
               if v is not None and v is not False}
    if args.teacher != "small_cnn":
        variant["teacher_arch"] = args.teacher
    if args.student is not None:
        variant["student"] = args.student
    if args.student_width is not None:
        variant["student_width"] = args.student_width
    if args.student_weights is not None:  # keyed apart: rows from before have no such key (random weights)
        from ldpclient.transfer.pretrained import weights_info

        info = weights_info(args.student_weights, args.student)
        variant["student_weights"] = f"{info.name}:{info.sha256[:12]}"
        variant["student"] = info.architecture
    if args.public_repeats is not None:
        variant["public_repeats"] = args.public_repeats
    if args.public_shift != "none":  # keyed apart: rows from before have no such key (the held-out images as they are)
        if not args.public:
            raise SystemExit("--public-shift needs --public N")
        variant["public_shift"] = args.public_shift
    if args.warmup:
        variant["warmup"] = args.warmup
    if args.decode is not None:  # keyed apart: rows from before have no such key (nothing decoded)
        variant["decode"] = args.decode
    if args.long_tail is not None:
        variant["long_tail"] = args.long_tail
    if args.classes is not None:
        variant["classes"] = sorted(args.classes)
    if args.augment != "sup":  # keyed apart: rows from before have no such key (Sup)
        variant["augment"] = args.augment
    if args.free_images != "blank":  # keyed apart: rows from before have no such key (noised blanks)
        variant["free_images"] = args.free_images
    # keyed apart: rows from before 2026-11-27 have no such key (rounds from the outputs as they are, labels
    # from balanced outputs after them)
    variant["adapt_rounds"] = "aligned-present"
    if args.hold != "none":  # keyed apart: rows from before have no such key (every draw from the seed)
        variant["hold"] = args.hold
    if args.query_rounds is not None:  # keyed apart: rows from before have no such key (every query at once)
        variant["query_rounds"] = args.query_rounds
    if args.min_round_gain is not None:
        variant["min_round_gain"] = args.min_round_gain
    if args.students is not None:  # keyed apart: rows from before have no such key (one student)
        variant["students"] = args.students
    if args.device != "cpu":  # keyed apart: rows from before have no such key (the cpu, one thread)
        variant["device"] = args.device
    basis = None
    if args.basis != "pool":
        basis = {"basis": args.basis, "coefficients": args.coefficients, "clip_norm": args.clip_norm}
        variant.update({k: v for k, v in basis.items() if v is not None})
    for name in args.dataset:
        for size in args.size if name == "digits" else [0]:
            label, tx, ty, px, py = load_dataset(name, size)
            if args.long_tail is not None:
                px, py = long_tail(px, py, args.long_tail)
            if args.classes is not None:
                keep = torch.isin(py, torch.tensor(args.classes))
                px, py = px[keep], py[keep]
            if args.teacher != "small_cnn":
                torch.set_num_threads(2)  # the teacher's training, once; the runs stay on one thread
            model = cached_teacher(label, tx, ty, args.teacher)
            torch.set_num_threads(1)
            teacher = LocalTeacher(model, tuple(px.shape[1:]), 10, name=label)
            public = public_images(name, size, args.public, args.public_shift) if args.public else None
            run_basis = basis
            if args.basis == "pca":  # label --basis pca: fitted on the public images
                if public is None:
                    raise SystemExit("--basis pca needs --public N")
                run_basis = {"basis": fit_pca(public, Domain(0.0, 1.0), args.coefficients), "clip_norm": args.clip_norm}
            with torch.no_grad():
                t_acc = float((model(px).argmax(1) == py).float().mean())
            print(f"# {label}: teacher on clean private records {t_acc:.3f}, n={len(px)}", flush=True)
            flip, checked = {"on": True, "off": False}.get(args.flip), None
            if flip is None:  # the library's mirror check, once: its verdict is what every run would reach
                checked = mirror_verdict(model, public)
                flip = checked is not None and checked.flip
                print(f"# {label}: mirror check {checked.as_dict() if checked else None}: flip {flip}", flush=True)
            for text in args.settings:
                base = resolve(parse_setting(text), tuple(px.shape[1:]), len(px), args.basis)
                if px.shape[-1] % base["reduce"]:
                    continue
                repeats = args.public_repeats
                setting_variant = dict(variant)
                if args.public and repeats is None:  # recorded, so that a later default tells its rows apart
                    repeats = defaults.public_repeats(base["queries"], args.public)
                    setting_variant["public_repeats"] = repeats
                # the student and the training shift, recorded even when they are the defaults (rows from before
                # they were chosen by shape have neither key: small_cnn, no shift)
                with_public = bool(args.public)
                setting_variant["crop"] = (args.crop if args.crop is not None
                                           else defaults.train_crop(px.shape[-1], with_public))
                if flip:  # keyed as --flip rows: the same run (the check's answers are never trained on)
                    setting_variant["flip"] = True
                if args.adapt_changes == "none":  # keyed apart: the library's adaptation has no such key
                    setting_variant["adapt_changes"] = "none"
                for seed in range(args.seed_from, args.seed_from + args.seeds):
                    for mode in args.modes:
                        levels = args.free_eps if mode == "data-free" and args.free_eps else [base["eps_record"]]
                        mode_variant = {"student": args.student or defaults.student(
                            tuple(px.shape[1:]), with_public, data_free=mode == "data-free"), **setting_variant}
                        for level in levels:
                            setting = {**base, "eps_record": level}
                            key = key_of(label, setting, seed, mode, mode_variant)
                            if key in done:
                                continue
                            r = run_one(teacher, px, py, setting, seed, mode, not args.no_adapt, args.selection_sample,
                                        args.val_fraction, tuple(args.blank) if args.blank else None,
                                        args.max_per_round, basis=run_basis, public=public, student=args.student,
                                        public_repeats=repeats, crop=args.crop, flip=flip,
                                        student_width=args.student_width,
                                        adapt_changes=args.adapt_changes == "checked", warmup=args.warmup,
                                        augment=args.augment, free_images=args.free_images, hold=args.hold,
                                        query_rounds=args.query_rounds, min_round_gain=args.min_round_gain,
                                        students=args.students, device=args.device,
                                        decode=args.decode, student_weights=args.student_weights)
                            r.update({"key": key, "dataset": label, **setting, "seed": seed, "mode": mode,
                                      "teacher": t_acc, **mode_variant, "flip_rule": args.flip})
                            if checked is not None:
                                r["mirror_check"] = checked.as_dict()
                            with args.out.open("a") as fh:
                                fh.write(json.dumps(r) + "\n")
                            done.add(key)
                            print(f"{label} {setting['mechanism']}:{level:g} seed={seed} {mode:9s} "
                                  f"unadapted={r['accuracy_unadapted']:.3f} adapted={r['accuracy']:.3f} "
                                  f"wall={r['wall_s']}s adapt={r['adapt_s']}s",
                                  flush=True)


if __name__ == "__main__":
    main()
