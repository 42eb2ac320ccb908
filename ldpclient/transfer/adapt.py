"""On-device adaptation: fine-tune the student on the clean private records it will label.

The clean records never leave the device, so learning from them costs no privacy:
nothing more is sent. The method is self-training with a class-balanced confidence
curriculum (Cascante-Bonilla et al., "Curriculum Labeling", AAAI 2021; class-wise
selection as in FlexMatch, Zhang et al. 2021), anchored to the teacher:

* each round, the current student labels the clean records; per predicted class the
  most confident fraction (``schedule``, e.g. 50% then 80% then all) becomes the
  pseudo-labelled set, so no class is crowded out by an easy one;
* the student is fine-tuned (not retrained: retraining from scratch on its own labels
  was measured to lose accuracy) on weakly augmented pseudo-labelled records
  (:class:`~ldpclient.transfer.affine.RandomRotateShift`, torchvision's ``RandomAffine`` for a
  batch: ±5° and ±1 pixel, images of 16 px and more), and every step also takes a batch of
  teacher-labelled queries with their hard labels, so the student does not drift from the
  teacher (without them, measured, it did);
* before the rounds, the student is asked which larger changes of an image keep its label (a mirror, the
  colour channels' order, inversion, grey: :mod:`~ldpclient.transfer.image_changes`); where it keeps some,
  each pseudo-labelled record is shown as it is or under one of them, and each round runs ``epochs_with_changes``
  epochs instead of ``epochs`` (the changed views need the passes: measured on colour digits, the changes with 3
  epochs gained 1.8 points, with 6 epochs 3.6), its steps taking anchor rows in the share
  ``epochs / epochs_with_changes`` of their pseudo-labelled ones, so that a round trains on as many
  teacher-labelled rows as at ``epochs`` (measured, 3 seeds: colour digits +0.6 and CIFAR-10 +0.5 against every
  anchor row, in three quarters of the time);
* the adapted student's outputs, from which the records are labelled, are, for each record it is unsure of (top
  output below ``unsure_below``), its mean softmax over the record as it is, under the one-pixel shifts and under
  each kept change (test-time views, one prediction pass each over those records:
  :mod:`~ldpclient.transfer.label_views`); for the others, its output on the record as it is.

What this means for privacy: the adapted student has seen the clean private records.
It never leaves the device and is not covered by the LDP guarantee (no model is); the
labels it writes are local outputs, and the queries and teacher answers keep their
meaning. The clean records are read in batches from a
:class:`~ldpclient.io.records.RecordSource`: memory O(n x classes) for the predictions plus
O(batch x record). Work per round is bounded: at most ``max_per_round x epochs`` fine-tuning samples
(``max_per_round`` pseudo-labelled records at ``epochs`` epochs, proportionally fewer at
``epochs_with_changes``: a seeded random subset of the confident ones) per round, and the rounds choose them
from a seeded sample of at most ``selection_sample`` records (50,000: enough that the per-class
confidence ranking is stable), so only the final labelling pass reads every record (and each view's pass the
records the student is unsure of). Folders
at or below the sample size are unaffected: every record is in the sample, in order, and no
random number is drawn for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from ..io.records import RecordSource, SubsetRecords, as_record_source
from .affine import MIN_AUGMENT_SIDE, RandomRotateShift
from .image_changes import CHANGES, CHECK_IMAGES, KeptChanges, candidates, check_changes, known
from .label_views import UNSURE_BELOW, ViewedRecords, label_views, unsure
from .prior import aligned, target_shares
from .student import StudentAdam, batch_in_layout, predict_proba, to_compute_layout

#: Pseudo-label fraction per class in each round (the curriculum): one default, measured.
DEFAULT_SCHEDULE: tuple[float, ...] = (0.5, 0.8, 1.0)
#: Most pseudo-labelled records per round at the default 3 epochs: a compute bound (9 x this many fine-tuning samples
#: per run at the default schedule, with or without image changes: at 6 epochs half as many records); folders up to
#: half this size are unaffected.
DEFAULT_MAX_PER_ROUND = 10_000
#: Most records a selection round predicts on (a seeded sample when there are more); the last pass reads all.
DEFAULT_SELECTION_SAMPLE = 50_000

AnchorBatches = Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]
"""``anchor(round)`` yields ``(queries, teacher labels)`` batches: float ``(B, C, H, W)``, int64 ``(B,)``."""


@dataclass
class AdaptHistory:
    """What adaptation did: per round the pseudo-labelled count, mean loss and the share of labels changed.

    ``probs``: the adapted model's softmax outputs on the records (float32 ``(N, K)``: for the ``viewed`` records the
    model was unsure of, the mean over each one's views, :func:`~ldpclient.transfer.label_views.label_views`), so the
    caller labels them without another pass.
    """

    selected: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    changed: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: seconds spent in prediction passes and the records they predicted (all of them counted)
    predict_seconds: float = 0.0
    predicted: int = 0
    probs: torch.Tensor | None = field(default=None, repr=False)
    #: the changes the student was found to keep (None: not checked)
    changes: KeptChanges | None = None
    #: views of an unsure record ``probs`` is the mean over, the record as it is included (1: that one alone)
    views: int = 1
    #: records labelled through their views (those the adapted model was unsure of; 0 where ``views`` is 1)
    viewed: int = 0


def weak_augmentation(image_size: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Weak augmentation for a batch ``(B, C, H, W)``: random rotation (±5°) and shift (±1 pixel), bilinear;
    one draw per image (the values torchvision's ``v2.RandomAffine`` gives image by image).

    ``None`` (no augmentation) for images smaller than :data:`MIN_AUGMENT_SIDE` pixels.
    """
    if image_size < MIN_AUGMENT_SIDE:
        return None
    return RandomRotateShift(degrees=5.0, translate=1.0 / image_size)


def select_confident(probs: torch.Tensor, fraction: float) -> torch.Tensor:
    """Indices of the ``fraction`` most confident records within each predicted class (at least one per class seen).

    ``probs``: float ``(N, K)`` softmax outputs. Class-wise quantiles keep the pseudo-labelled
    set balanced the way the student's predictions are, instead of favouring easy classes.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    conf, pred = probs.max(dim=1)
    chosen = []
    for c in torch.unique(pred):
        idx = torch.nonzero(pred == c).flatten()
        k = max(1, int(round(fraction * len(idx))))
        chosen.append(idx[torch.argsort(conf[idx], descending=True)[:k]])
    return torch.sort(torch.cat(chosen)).values


class SelfTrainingAdapter:
    """Fine-tunes a trained student on its confident labels of the clean records, anchored to teacher labels.

    ``schedule``: per-class pseudo-label fraction for each round (one round per entry).
    ``epochs``: passes over the pseudo-labelled set per round. ``batch_size``: pseudo-labelled
    records per step (the anchor batch is re-split to the same size). ``lr``: Adam step (a
    fine-tune: lower than training's). ``seed``: augmentation and order (a private generator;
    the caller's global RNG is left untouched). ``max_per_round``: most pseudo-labelled records
    trained on per round at ``epochs`` epochs (at ``epochs_with_changes`` proportionally fewer, so that a round's
    fine-tuning samples stay within ``max_per_round x epochs``; a compute bound for large folders; None: no
    bound). ``selection_sample``:
    most records the rounds predict on and choose from (a sample seeded by ``seed``; None: all).
    ``augmentation``: the image side (pixels) -> the transform of a batch of pseudo-labelled records
    ``(B, C, H, W)`` (None: none); default :func:`weak_augmentation`. ``changes``: the candidate changes
    (:data:`~ldpclient.transfer.image_changes.CHANGES`' names) checked before the rounds; those the student keeps
    are applied before ``augmentation`` and are label views, the rounds then running ``epochs_with_changes`` epochs
    (empty: no check, ``epochs``). ``unsure_below``: the adapted model's top output (in [0, 1]) below which a
    record is labelled through its views (0: none is; above 1: every record is).
    """

    def __init__(
        self,
        *,
        schedule: Sequence[float] = DEFAULT_SCHEDULE,
        epochs: int = 3,
        batch_size: int = 64,
        lr: float = 3e-4,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_per_round: int | None = DEFAULT_MAX_PER_ROUND,
        selection_sample: int | None = DEFAULT_SELECTION_SAMPLE,
        augmentation: Callable[[int], Callable[[torch.Tensor], torch.Tensor] | None] | None = None,
        changes: Sequence[str] = tuple(CHANGES),
        epochs_with_changes: int = 6,
        predictor: Callable[[nn.Module, RecordSource], torch.Tensor] | None = None,
        unsure_below: float = UNSURE_BELOW,
    ) -> None:
        if not schedule or any(not 0.0 < f <= 1.0 for f in schedule):
            raise ValueError(f"schedule must be fractions in (0, 1], got {list(schedule)}")
        if epochs < 1 or epochs_with_changes < 1 or batch_size < 1 or not lr > 0:
            raise ValueError("epochs, epochs_with_changes and batch_size must be >= 1 and lr > 0")
        if max_per_round is not None and max_per_round < 1:
            raise ValueError(f"max_per_round must be >= 1 or None, got {max_per_round}")
        if selection_sample is not None and selection_sample < 1:
            raise ValueError(f"selection_sample must be >= 1 or None, got {selection_sample}")
        self.max_per_round = max_per_round
        self.selection_sample = selection_sample
        self.augmentation = augmentation or weak_augmentation
        self.changes = known(changes)
        self.epochs_with_changes = epochs_with_changes
        self.unsure_below = float(unsure_below)
        self.schedule = tuple(float(f) for f in schedule)
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.seed = int(seed)
        self.device = torch.device(device)
        #: the softmax of a model on records, where it runs (None: :func:`~.student.predict_proba` here)
        self.predictor = predictor

    def adapt(
        self,
        model: nn.Module,
        records: torch.Tensor | RecordSource,
        anchor: AnchorBatches | None = None,
        probs: torch.Tensor | None = None,
        on_round: Callable[[int], None] | None = None,
        prior: torch.Tensor | None = None,
    ) -> AdaptHistory:
        """Adapt ``model`` in place on ``records`` (float ``(N, C, H, W)``, the values it will label;
        a tensor or a :class:`~ldpclient.io.records.RecordSource`). On the CPU ``model`` is left in
        :func:`~ldpclient.transfer.student.compute_layout` (channels-last; values unchanged by it). ``probs``: the
        model's softmax outputs on ``records`` before adaptation, when the caller has them (saves a pass; without,
        above ``selection_sample`` records only the sample is predicted before the rounds). ``on_round(k)`` is called
        after round ``k`` (1-based) is done (a progress bar). ``prior``: the label prior ``model`` learnt its outputs
        under (float64 ``(K,)`` shares: :func:`~ldpclient.transfer.prior.training_prior`, the teacher's answers).
        Given, the rounds learn equal class shares instead of that prior's: before the first round the classes
        present in the records are found once from the outputs re-weighted from ``prior`` to equal shares
        (:func:`~ldpclient.transfer.prior.target_shares`), and every round aligns its outputs to equal shares over
        them before choosing and labelling (:func:`~ldpclient.transfer.prior.aligned`, which reads the bias from
        the current outputs, so a model that learnt aligned labels is not corrected twice); None: as they are.
        ``AdaptHistory.probs`` are the adapted outputs as they are (not aligned), averaged over each record's views."""
        hist = AdaptHistory()
        t0 = time.perf_counter()
        records = as_record_source(records)
        to_compute_layout(model, self.device)  # in place, before the optimiser takes its parameters
        optimizer = StudentAdam(model.parameters(), self.lr)
        sample = self._sample(len(records))  # None: every record, in order
        pool = records if sample is None else SubsetRecords(records, sample)
        if probs is None:
            probs = self._predict(model, pool, hist)
        elif sample is not None:
            probs = probs[sample]
        previous = probs.argmax(1)  # on the pool: what "changed" is measured on
        shares = target_shares(probs, prior) if prior is not None else None
        hist.changes = self._check_changes(model, pool, previous, hist)
        augment = self._augment(int(records.record_shape[-1]), hist.changes)
        epochs = self.epochs_with_changes if hist.changes.kept else self.epochs
        most = None if self.max_per_round is None else max(1, self.max_per_round * self.epochs // epochs)
        with torch.random.fork_rng(devices=[]):  # the augmentation draws from the global RNG: keep it local
            torch.manual_seed(self.seed)
            for rnd, fraction in enumerate(self.schedule):
                if rnd > 0:  # round 0 labels with the model as it came in
                    probs = self._predict(model, pool, hist)
                view = probs if shares is None else aligned(probs, shares)
                chosen = select_confident(view, fraction)
                if most is not None and len(chosen) > most:
                    chosen = torch.sort(chosen[torch.randperm(len(chosen))[:most]]).values
                anchors = anchor(rnd) if anchor is not None else None
                hist.selected.append(len(chosen))
                hist.loss.append(self._fit_round(model, optimizer, pool, chosen, view.argmax(1), anchors, augment,
                                                 epochs, anchor_share=self.epochs / epochs))
                if on_round is not None:
                    on_round(rnd + 1)
        model.eval()
        hist.probs = self._predict_views(model, records, hist)
        final = hist.probs if sample is None else hist.probs[sample]
        hist.changed.append(float((final.argmax(1) != previous).float().mean()))
        hist.seconds = time.perf_counter() - t0
        return hist

    def _fit_round(
        self, model: nn.Module, optimizer: StudentAdam, pool: RecordSource, chosen: torch.Tensor,
        targets: torch.Tensor, anchors: Iterator[tuple[torch.Tensor, torch.Tensor]] | None,
        augment: Callable[[torch.Tensor], torch.Tensor] | None, epochs: int, anchor_share: float = 1.0,
    ) -> float:
        """One round's ``epochs`` over the ``chosen`` records of ``pool`` with their pseudo-labels ``targets``, each
        batch beside ``anchor_share`` (in (0, 1]) as many anchor rows (at least one); the round's mean loss per row."""
        loss_fn = nn.CrossEntropyLoss()
        total, seen = 0.0, 0
        model.train()
        for _ in range(epochs):
            order = chosen[torch.randperm(len(chosen))]
            for s in range(0, len(order), self.batch_size):
                idx = order[s : s + self.batch_size]
                batch = pool.read(idx.numpy())
                xb = batch if augment is None else augment(batch)
                yb = targets[idx]
                extra = _next_anchor(anchors, max(1, round(len(idx) * anchor_share)))
                if extra is not None:
                    xb, yb = torch.cat([xb, extra[0].float()]), torch.cat([yb, extra[1]])
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(batch_in_layout(xb.to(self.device), self.device)), yb.to(self.device))
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(yb)
                seen += len(yb)
        return total / max(1, seen)

    def _augment(
        self, image_size: int, changes: KeptChanges
    ) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The transform of a pseudo-labelled batch: ``augmentation``'s, after the kept ``changes`` (both draw from
        the global RNG, which :meth:`adapt` forks)."""
        weak = self.augmentation(image_size)
        change = changes.transform()
        if change is None:
            return weak
        return change if weak is None else lambda images: weak(change(images))

    def _check_changes(
        self, model: nn.Module, pool: RecordSource, labels: torch.Tensor, hist: AdaptHistory
    ) -> KeptChanges:
        """Which of :attr:`changes` the student keeps on a sample of ``pool`` whose labels as they are are
        ``labels`` (:func:`~ldpclient.transfer.image_changes.check_changes`; a generator of its own, seeded by
        ``seed``)."""
        c, h, w = (int(v) for v in pool.record_shape)
        names = candidates(self.changes, c, min(h, w))
        if not names:
            return KeptChanges((), {}, 0.0, 0)
        g = torch.Generator().manual_seed(self.seed)
        sample = torch.sort(torch.randperm(len(pool), generator=g)[:CHECK_IMAGES]).values
        images = pool.read(sample.numpy()).float()

        def labels_of(batch: torch.Tensor) -> torch.Tensor:
            return self._predict(model, as_record_source(batch), hist).argmax(1)

        return check_changes(labels_of, images, labels[sample], names, self.seed)

    def _predict_views(self, model: nn.Module, records: RecordSource, hist: AdaptHistory) -> torch.Tensor:
        """The softmax of ``model`` over ``records`` as they are; for those it is unsure of, the mean with their
        :func:`~ldpclient.transfer.label_views.label_views` (each view of a record fixed by its position in
        ``records``)."""
        kept = hist.changes.kept if hist.changes is not None else ()
        views = label_views(kept, min(int(v) for v in records.record_shape[-2:]))
        probs = self._predict(model, records, hist)
        hist.views = 1 + len(views)
        if not views:
            return probs
        chosen = unsure(probs, self.unsure_below)
        hist.viewed = len(chosen)
        if len(chosen):
            total = probs[chosen]
            for view in views:
                total += self._predict(model, SubsetRecords(ViewedRecords(records, view), chosen), hist)
            probs[chosen] = total / hist.views
        return probs

    def _predict(self, model: nn.Module, records: RecordSource, hist: AdaptHistory) -> torch.Tensor:
        t = time.perf_counter()
        if self.predictor is not None:
            probs = self.predictor(model, records)
        else:
            probs = predict_proba(model, records, device=str(self.device))
        hist.predict_seconds += time.perf_counter() - t
        hist.predicted += len(records)
        return probs

    def samples(self, n: int) -> bool:
        """Whether the rounds work on a sample of ``n`` records (more than ``selection_sample``)."""
        return self.selection_sample is not None and n > self.selection_sample

    def _sample(self, n: int) -> torch.Tensor | None:
        """Sorted positions of the records the rounds choose from (None: all ``n``), seeded by ``seed``
        from a generator of its own (the rounds' random stream is the same with or without a sample)."""
        if not self.samples(n):
            return None
        g = torch.Generator().manual_seed(self.seed)
        return torch.sort(torch.randperm(n, generator=g)[: self.selection_sample]).values


def _next_anchor(
    anchors: Iterator[tuple[torch.Tensor, torch.Tensor]] | None, size: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Up to ``size`` teacher-labelled queries from the anchor stream (None when absent or exhausted)."""
    if anchors is None:
        return None
    xs, ys, have = [], [], 0
    for x, y in anchors:
        xs.append(x)
        ys.append(y)
        have += len(y)
        if have >= size:
            break
    if not have:
        return None
    return torch.cat(xs)[:size], torch.cat(ys)[:size]


__all__ = [
    "DEFAULT_SCHEDULE",
    "DEFAULT_SELECTION_SAMPLE",
    "AdaptHistory",
    "SelfTrainingAdapter",
    "select_confident",
    "weak_augmentation",
]
