"""The verdict on a label run's labels: usable, doubtful or not worth having, with the reasons in words.

Every run ends with one (the summary, ``--json``, the report's ``verdict`` section, the top of the page,
``LabelResult.verdict``). It is computed from what the run already has, at no privacy cost and with no query:

* **the check set** (``--check LABELS.csv``): a few private images the user labelled by hand. Their labels
  are read on this device only, never sent, and used for nothing but the score; the images themselves went
  through the run like every other private image, so the accuracy on them estimates the accuracy of the labels
  written. With 30 check images or more the estimate is adjusted by the student's confidences of all labels
  (:mod:`ldpclient.run.check_estimate`: unbiased, worth 3-29 % more check images at the defaults), with its 95 %
  interval (Wilson's, at the check images it is worth). The data-free baseline's labels are scored on them too.
* **collapse**: the labels' class shares against the teacher's answers and the number of classes (one
  class taking most labels; classes the teacher often answered never given).
* **worth of the private data** (``--baseline``): how often the labels differ from the data-free run's, and
  on the check set whether they are better.
* **held-out public images** (``--public`` with 100 images or more: a tenth of them, at most 500, are kept out
  of training and adaptation; ``ldpclient.transfer.defaults.public_held_out``): the final student's agreement
  with the teacher's labels of these clean, unseen images, with its 95 % Wilson interval. It is agreement with
  the teacher, not accuracy: it measures how well the student copies the teacher on images like the public
  ones.
* **agreement on held-out noised queries** (the student's validation accuracy): how well the student learned
  the teacher's answers to *noised* queries, set beside always answering the teacher's most frequent class.
  It is not an accuracy on the clean images.

The rules, in order (``chance`` = 1 / classes; ``floor`` = chance + 10 % of the way to 100 %: 19 % for 10
classes, 55 % for 2):

1. With a check set, its evidence decides the accuracy: the labels are **not worth having** when their
   accuracy on it is below ``floor`` (at chance); **doubtful** when the interval reaches below ``floor`` (too
   few check images to tell), when it reaches below 50 % (most labels are or may be wrong: a run measured at
   54 % on 100 images, 47 % true, was called usable before 2026-11-27), or when, on the same
   images, they are significantly worse than the data-free
   run's (two-sided sign test at 5 % on the images where exactly one of the two is right: its labels are
   better and spent no privacy). No significant gain over it is said in the reasons (the privacy spent bought
   nothing measurable) without lowering the level: the labels are as good as their accuracy.
2. A collapse is **not worth having** (one class holds 80 % of the labels or more, with 3 classes or more,
   while the teacher gave that class at most half as often) and a partial one **doubtful** (one class holds
   half the labels or more and at least twice its share of the teacher's answers and of chance; or half the
   classes the teacher gave often never appear; or one class holds 80 % of the labels and of the teacher's
   answers: the teacher collapsed too, and its answers carry little) -- unless the check set shows the labels
   right (its interval's bottom above ``floor``: a folder may really hold one class).
3. Without a check set, the held-out public images judge the student as the check set would, against the
   teacher's labels: agreement below ``floor`` is **not worth having**; an interval reaching below ``floor`` or
   below 50 % is **doubtful**. With a check set they are only reported.
4. Without a check set, a student that does no better on held-out noised queries than always answering the
   teacher's most frequent class is **doubtful**; a run whose labels are the data-free run's on 95 % of
   images or more says that the privacy spent bought nothing measurable.
5. Without a check set and without held-out public images nothing in the run tells right labels from wrong ones
   (a run whose labels are at chance reads the same): **doubtful**,
   "accuracy not measured". With held-out public images the reasons say the accuracy was not measured.
6. Otherwise **usable**; with a check set whose 95 % interval reaches more than 5 points either side, about how
   many check images would narrow it to 5.

Beside public images the private releases do not look like releases of (their coefficients' mean shifted beyond
what alike images reach, :mod:`ldpclient.transfer.release_shift`), the labels are **doubtful** without a check set
(a reason with one): the held-out public images, a decoder and a ``--basis pca`` rest on the two being alike.

Beside public images whose teacher answers seldom hold (under a quarter of a chance share: a teacher's few errors
on them do not count as holding a class) half or more of the classes the teacher often gave the queries (at least
half a chance share of them), a reason says so without lowering the level: such images are most of
the training rows and pull the labels towards their own classes (MNIST beside public
images of five of its ten classes lost 3.9 points against running without them).

Units: shares and accuracies in ``[0, 1]``; counts are images (labels) or queries (teacher answers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

from ..io.document import Document, JSONDict, number, section_or_none
from ..names import PRIVACY_BOUGHT, VERDICT_LEVELS
from ..report.notes import declined_words
from . import check_estimate
from .check_score import CheckEvidence, informative_floor, sign_test_p, wilson_interval

#: The levels, best first (their names: :data:`ldpclient.names.VERDICT_LEVELS`).
LEVELS = VERDICT_LEVELS
USABLE, DOUBTFUL, NOT_WORTH = LEVELS
#: One class holding this share of the labels or more is a collapse (3 classes or more) ...
COLLAPSE_SHARE = 0.8
#: ... and half of them a partial one (with the conditions of rule 2 above).
DOMINANT_SHARE = 0.5
#: Accuracy whose 95 % interval reaches below this share is doubtful whatever the chance level: most labels may be
#: wrong.
MOSTLY_RIGHT = 0.5
#: Share of the queries a teacher declined (abstentions) from which a run's labels are judged doubtful: the student
#: learnt from fewer than half the answers it paid for.
MOSTLY_ABSTAINED = 0.5
#: What to do when the privacy spent bought nothing measurable, in the reason that says so.
BOUGHT_NOTHING_ADVICE = ("use the data-free labels (--epsilon 0: no privacy spent), or add public images (--public) "
                         "or more queries (--queries) and compare again")
#: Labels equal to the data-free run's on this share of images or more: the privacy bought nothing measurable.
SAME_AS_FREE = 0.95
#: What the privacy spent bought, against the data-free run (``Verdict.privacy_bought``): significantly better
#: labels, nothing measurable, or significantly worse ones. None: the run was not compared with one.
BOUGHT_MORE, BOUGHT_NOTHING, BOUGHT_LESS = PRIVACY_BOUGHT
#: What the standing adds to ``usable`` when the privacy bought nothing: the one headline of summary, report and page.
NOTHING_BOUGHT_WORDS = "but the privacy bought nothing: the data-free labels are as good"
#: A check set whose 95 % interval is wider than this either side of its estimate gets a reason saying about how many
#: hand-labelled images would narrow it to this.
PRECISE = 0.05


@dataclass(frozen=True)
class Collapse:
    """The labels' class shares against the teacher's answers: ``top_class`` holds ``top_share`` of the labels
    and ``teacher_share`` of the teacher's answers; ``missing_classes``: classes the teacher answered at least
    half as often as chance that no image got; ``often_answered``: how many classes it answered that often."""

    top_class: int
    top_share: float
    teacher_share: float
    missing_classes: list[int]
    often_answered: int
    level: str

    @property
    def teacher_collapsed(self) -> bool:
        """Whether one class holds :data:`COLLAPSE_SHARE` of the labels and of the teacher's answers alike."""
        return self.top_share >= COLLAPSE_SHARE and self.teacher_share >= COLLAPSE_SHARE

    @classmethod
    def of(cls, label_counts: Sequence[int], answer_counts: Sequence[int]) -> "Collapse":
        k = len(label_counts)
        n, q = sum(label_counts), sum(answer_counts)
        top = max(range(k), key=lambda c: label_counts[c]) if k else 0
        share = label_counts[top] / n if n else 0.0
        teacher = answer_counts[top] / q if q and top < len(answer_counts) else 0.0
        often = _often_given(answer_counts, k)
        missing = [c for c in often if label_counts[c] == 0]
        found = cls(top, share, teacher, missing, len(often), USABLE)
        if k >= 3 and share >= COLLAPSE_SHARE and teacher <= share / 2:
            return dataclasses.replace(found, level=NOT_WORTH)
        if (k >= 3 and share >= DOMINANT_SHARE and share >= 2 * max(teacher, 1 / k)) or (
                len(often) >= 2 and len(missing) * 2 >= len(often)) or (k >= 3 and found.teacher_collapsed):
            return dataclasses.replace(found, level=DOUBTFUL)
        return found


@dataclass(frozen=True)
class Verdict:
    """The verdict: ``level`` (one of :data:`LEVELS`), ``reasons`` in words (the first is the one that decided),
    and the evidence it read (``check``: accuracy on the check set; ``collapse``; ``same_as_free``: share of
    labels equal to the data-free run's; ``held_out_agreement``: the student's agreement with the teacher on
    held-out noised queries, beside ``majority_answer_share``)."""

    level: str
    reasons: list[str]
    check: JSONDict | None = None
    collapse: JSONDict = field(default_factory=dict)
    same_as_free: float | None = None
    held_out_agreement: float | None = None
    majority_answer_share: float | None = None
    #: the final student against the teacher on the public images held out of training: ``images``, ``agree``,
    #: ``agreement``, ``low``, ``high`` (95 % Wilson interval); None without them
    public_held_out: JSONDict | None = None
    #: what the privacy spent bought against the data-free run: :data:`BOUGHT_MORE`, :data:`BOUGHT_NOTHING` or
    #: :data:`BOUGHT_LESS`; None when the run was not compared with one (no ``--baseline``)
    privacy_bought: str | None = None

    @property
    def standing(self) -> str:
        """The level in words, with what the privacy bought when it bought nothing and the labels are usable all the
        same ("usable, but the privacy bought nothing: ..."): what the summary, the report and the page open with."""
        if self.level == USABLE and self.privacy_bought == BOUGHT_NOTHING:
            return f"{self.level}, {NOTHING_BOUGHT_WORDS}"
        return self.level

    @property
    def headline(self) -> str:
        """One line: the standing and the deciding reason."""
        if not self.reasons:
            return self.standing
        return f"{self.standing}{': ' if self.standing == self.level else '; '}{self.reasons[0]}"

    def as_dict(self) -> JSONDict:
        return {"level": self.level, "standing": self.standing, "headline": self.headline, **asdict(self)}


def accuracy_words(verdict: Document | None) -> str | None:
    """The check set's score in words (with the data-free run's beside it), None without a check set: what a
    summary says where it would otherwise say that the accuracy was not measured."""
    check = section_or_none(verdict, "check") if verdict else None
    if not check:
        return None
    adjusted = (
        ", adjusted by the labels' confidences" if check.get("method") == check_estimate.CONFIDENCE_ADJUSTED else ""
    )
    words = (f"{_pct(number(check, 'accuracy'))} on the check set of {check['images']} hand-labelled images{adjusted} "
             f"(95% interval {_pct(number(check, 'low'))}-{_pct(number(check, 'high'))})")
    base = section_or_none(check, "baseline")
    return words + (f"; the data-free run {_pct(number(base, 'accuracy'))} on the same images" if base else "")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _name(c: int, class_names: Sequence[str] | None) -> str:
    return repr(str(class_names[c])[:40]) if class_names is not None and c < len(class_names) else f"class {c}"


def judge(
    *,
    num_classes: int,
    label_counts: Sequence[int],
    answer_counts: Sequence[int],
    check: CheckEvidence | None = None,
    same_as_free: float | None = None,
    held_out_agreement: float | None = None,
    public_held_out: tuple[int, int] | None = None,
    class_names: Sequence[str] | None = None,
    answers_apart: Mapping[str, Sequence[int]] | None = None,
    abstained: tuple[int, int] | None = None,
    declined: Mapping[str, int] | None = None,
    release_shift: tuple[float, float] | None = None,
) -> Verdict:
    """The verdict from the run's evidence (see the module doc for the rules). ``label_counts``: images per
    class in the labels written; ``answer_counts``: the teacher's answers per class over the run's queries;
    ``same_as_free``: share of images whose label equals the data-free run's (None without ``--baseline``);
    ``public_held_out``: ``(agree, images)``, the student against the teacher on held-out public images;
    ``answers_apart``: with public images, the teacher's answers per class to the queries (``queries``) and to the
    public images (``public``) apart; ``abstained``: ``(declined, answered)``, the queries the teacher declined to
    label among those it answered (a chat or vision API); ``declined``: of them, how many for each reason (keys of
    :data:`ldpclient.names.DECLINE_KINDS`), where the adapter said; ``release_shift``: ``(shift, limit)``, how far
    the private releases sit from releases of the public images and the most alike images reach
    (:mod:`ldpclient.transfer.release_shift`)."""
    floor = informative_floor(num_classes)
    found: list[tuple[str, str]] = []  # (level, reason) in the order of the rules
    check_dict, checked_right = (
        _check_findings(check, floor, num_classes, found) if check is not None else (None, False)
    )
    collapse = Collapse.of(label_counts, answer_counts)
    if collapse.level != USABLE:
        found.append(_collapse_finding(collapse, class_names, checked_right))
    public_dict = None
    if public_held_out is not None and public_held_out[1] > 0:
        public_dict, judged = _public_evidence(*public_held_out, floor=floor, decides=check is None)
        found.append(judged)
    if answers_apart is not None and (missed := _public_misses(answers_apart)) is not None:
        found.append((USABLE, missed))
    if release_shift is not None and release_shift[0] > release_shift[1]:
        found.append((DOUBTFUL if check is None else USABLE, _unlike_public(*release_shift)))
    if abstained is not None and abstained[0] and abstained[1]:
        found.append(_abstained_finding(*abstained, checked_right=checked_right, declined=declined))
    majority = max(answer_counts) / sum(answer_counts) if sum(answer_counts) else None
    if check is None:
        found += _unmeasured_findings(collapse, held_out_agreement, majority, public_dict is not None)
    bought = _privacy_bought(check, same_as_free)
    if same_as_free is not None and (check is None or check.baseline is None) and same_as_free >= SAME_AS_FREE:
        found.append((USABLE, f"{_pct(same_as_free)} of the labels are the data-free run's (no privacy spent): "
                              f"the privacy spent bought nothing measurable: {BOUGHT_NOTHING_ADVICE}"))
    level = max((lvl for lvl, _ in found), key=LEVELS.index, default=USABLE)
    reasons = [r for lvl, r in found if lvl == level] + [r for lvl, r in found if lvl != level]
    return Verdict(level, reasons, check_dict, asdict(collapse), same_as_free, held_out_agreement, majority,
                   public_dict, bought)


def _unlike_public(shift: float, limit: float) -> str:
    return (f"the private releases do not look like releases of the public images (shift {shift:.3g}; alike images "
            f"stay under {limit:.2g}): the public images are unlike the private ones, so what rests on them (the "
            "held-out public images' agreement, a decoder, a --basis pca fitted on them) may not hold for these labels")


def _privacy_bought(check: CheckEvidence | None, same_as_free: float | None) -> str | None:
    """What the privacy spent bought against the data-free run: on the check set, the sign test of
    :func:`_baseline_finding`; without one, nothing when the labels are the data-free run's on
    :data:`SAME_AS_FREE` of the images (else unknown: None, as without a data-free run)."""
    if check is not None and check.baseline is not None:
        significant = sign_test_p(check.wins, check.losses) < 0.05
        if significant and check.losses > check.wins:
            return BOUGHT_LESS
        return BOUGHT_MORE if significant and check.wins > check.losses else BOUGHT_NOTHING
    if same_as_free is not None and same_as_free >= SAME_AS_FREE:
        return BOUGHT_NOTHING
    return None


def _check_findings(
    check: CheckEvidence, floor: float, num_classes: int, found: list[tuple[str, str]]
) -> tuple[JSONDict, bool]:
    """What the check set says, appended to ``found``: the accuracy against chance and against mostly right, the
    data-free run's on the same images, how wide the interval is. Also the check's dict for the report, and
    whether the labels are surely better than chance."""
    s = check.score
    check_dict: JSONDict = {**asdict(s), "floor": floor, "missing": check.missing,
                  "baseline": asdict(check.baseline) if check.baseline is not None else None,
                  "wins_over_baseline": check.wins, "losses_to_baseline": check.losses}
    acc = f"{_pct(s.accuracy)} right on the check set ({s.words}; 95% interval {_pct(s.low)}-{_pct(s.high)})"
    if s.accuracy < floor:
        found.append((NOT_WORTH, f"{acc}: at chance (below {_pct(floor)} for {num_classes} classes)"))
    elif s.low < floor:
        found.append((DOUBTFUL, f"{acc}: too few check images to tell it from chance ({_pct(floor)})"))
    elif s.high < MOSTLY_RIGHT:
        found.append((DOUBTFUL, f"{acc}: better than chance, but most labels are wrong"))
    elif s.low < MOSTLY_RIGHT:
        found.append((DOUBTFUL, f"{acc}: better than chance, but most labels may be wrong (the interval reaches "
                                f"below {_pct(MOSTLY_RIGHT)})"))
    else:
        found.append((USABLE, acc))
    if check.baseline is not None:
        found.append(_baseline_finding(check))
    if (s.high - s.low) / 2 > PRECISE:
        found.append((USABLE, f"the check set's interval is {100 * (s.high - s.low) / 2:.1f} points either side: "
                              f"about {s.images_for(PRECISE)} hand-labelled images would narrow it to "
                              f"{100 * PRECISE:.0f}"))
    return check_dict, s.low >= floor


def _baseline_finding(check: CheckEvidence) -> tuple[str, str]:
    """The labels against the data-free run's on the check set (a sign test on where they differ)."""
    assert check.baseline is not None
    bought = _privacy_bought(check, None)
    versus = (f"the data-free run (no privacy spent) gets {_pct(check.baseline.accuracy)} on the same images; the "
              f"labels are right where it is wrong on {check.wins}, wrong where it is right on {check.losses}")
    if bought == BOUGHT_LESS:
        return (DOUBTFUL, f"worse than the data-free run: {versus}; its labels "
                          "(*.baseline.csv) are better and spent no privacy")
    if bought == BOUGHT_NOTHING:
        return (USABLE, f"no measurable gain over the data-free run: {versus}; the privacy spent "
                        f"bought nothing measurable: {BOUGHT_NOTHING_ADVICE}")
    return (USABLE, f"better than the data-free run: {versus}")


def _collapse_finding(collapse: Collapse, class_names: Sequence[str] | None, checked_right: bool) -> tuple[str, str]:
    """The labels' collapse in words (the check set, when it shows them right, outweighs it)."""
    top = _name(collapse.top_class, class_names)
    why = (f"{_pct(collapse.top_share)} of the labels are {top}, which the teacher gave to "
           f"{_pct(collapse.teacher_share)} of the queries")
    if collapse.teacher_collapsed:
        why += ": the teacher answered nearly every query with one class, so its answers carry little"
    if collapse.top_share < DOMINANT_SHARE:
        why = (f"{len(collapse.missing_classes)} of the {collapse.often_answered} classes the teacher often "
               f"answered never appear in the labels")
    if checked_right:
        return (USABLE, f"{why}; the check set shows the labels right all the same")
    return (collapse.level, f"the labels collapsed: {why}")


def _abstained_finding(declined_n: int, answered: int, *, checked_right: bool,
                       declined: Mapping[str, int] | None = None) -> tuple[str, str]:
    """The queries the teacher declined among those it answered: doubtful when most were declined."""
    share = declined_n / answered
    said = (f"the teacher declined {declined_n} of the {answered} queries ({_pct(share)}"
            f"{': ' + declined_words(declined) if declined else ''}), which were paid for where billed and never "
            "trained on")
    if share >= MOSTLY_ABSTAINED and not checked_right:
        return (DOUBTFUL, f"{said}: the student learnt from fewer than half the answers (a clearer prompt, "
                          "--class-names descriptions, or a higher --epsilon may help)")
    return (USABLE, said)


def _unmeasured_findings(
    collapse: Collapse, held_out_agreement: float | None, majority: float | None, public_judged: bool
) -> list[tuple[str, str]]:
    """Without a check set: whether the student learnt more than the teacher's most frequent class, and that the
    accuracy was not measured (doubtful unless held-out public images judged the student)."""
    found: list[tuple[str, str]] = []
    if held_out_agreement is not None and majority is not None and held_out_agreement <= majority + 0.02:
        found.append((DOUBTFUL, f"the student agrees with the teacher on {_pct(held_out_agreement)} of held-out "
                                f"noised queries, no better than always answering its most frequent class "
                                f"({_pct(majority)}): it learned little from the answers"))
    seen = "accuracy not measured" if collapse.level != USABLE else "no collapse seen, but accuracy not measured"
    measure = "give --check FILE with a few hand-labelled private images (read here only, never sent) to measure it"
    if public_judged:  # the held-out public images judged the student, against the teacher
        found.append((USABLE, f"{seen}: {measure}"))
    else:
        found.append((DOUBTFUL, f"{seen}: nothing in this run tells right labels from wrong ones (no check set, "
                                f"no held-out public images; labels at chance would read the same): {measure}"))
    return found


def _often_given(answer_counts: Sequence[int], classes: int) -> list[int]:
    """The classes (of the first ``classes``) the teacher gave often: at least half a chance share (``0.5 /
    classes``) of its answers ``answer_counts`` (answers per class); none when it gave no answer."""
    total = sum(answer_counts)
    return [c for c in range(min(classes, len(answer_counts))) if total and answer_counts[c] / total >= 0.5 / classes]


def _public_misses(answers: Mapping[str, Sequence[int]]) -> str | None:
    """The words for public images whose answers seldom hold (under a quarter of a chance share) half or more of the
    classes the queries' answers often give (at least half a chance share), else None."""
    queries, public = list(answers.get("queries", [])), list(answers.get("public", []))
    p, k = sum(public), len(queries)
    if not p:  # no answer to a public image counted: nothing to compare
        return None
    often = _often_given(queries, k)
    missed = [c for c in often if c >= len(public) or public[c] / p < 0.25 / k]
    if len(often) < 2 or len(missed) * 2 < len(often):
        return None
    return (f"the teacher seldom or never gave the public images {len(missed)} of the {len(often)} classes it often "
            "gave the queries: public images from another class mix are most of the training rows and pull the "
            "labels towards their own classes; compare a run without --public")


def _public_evidence(agree: int, images: int, *, floor: float, decides: bool) -> tuple[JSONDict, tuple[str, str]]:
    """The held-out public images' evidence and its (level, reason): rule 3 of the module doc when it
    ``decides`` (no check set), else a reason at the usable level (reported, deciding nothing)."""
    share = agree / images
    low, high = wilson_interval(agree, images)
    words = (f"the student agrees with the teacher on {_pct(share)} of {images} public images held out of "
             f"training (95% interval {_pct(low)}-{_pct(high)}; agreement with the teacher, not accuracy)")
    level = USABLE
    if decides and share < floor:
        level, words = NOT_WORTH, f"{words}: at chance (below {_pct(floor)})"
    elif decides and low < floor:
        level, words = DOUBTFUL, f"{words}: too few to tell it from chance ({_pct(floor)})"
    elif decides and high < MOSTLY_RIGHT:
        level, words = DOUBTFUL, f"{words}: it gives the teacher's label to fewer than half of them"
    elif decides and low < MOSTLY_RIGHT:
        level, words = DOUBTFUL, f"{words}: it may give the teacher's label to fewer than half of them"
    return {"images": images, "agree": agree, "agreement": share, "low": low, "high": high}, (level, words)


__all__ = ["BOUGHT_LESS", "BOUGHT_MORE", "BOUGHT_NOTHING", "LEVELS", "NOT_WORTH", "DOUBTFUL", "USABLE", "Collapse",
           "Verdict", "accuracy_words", "judge"]
