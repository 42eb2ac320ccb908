"""The teacher's confusion on noised queries, measured on public images, and the forward-corrected loss.

What the teacher answers to a noised query is not the class of the image behind it: at 100 per image it names a
member of a Sup pair in about a quarter of its answers. Trained with the plain loss, the
student learns the teacher's answers to noise ("noise means 8"), not the images' classes. Public images tell us the
teacher's confusion for free (no privacy: they are public; only money, for the queries): each is labelled clean
(its class ``c``, as the teacher names it) and, released through the run's own mechanism and expanded by the run's
own plan, noised (the answer ``a``). The confusion ``M[c, a]`` (``K x K``, rows sum to 1) is the share of answers
``a`` to queries made from images of class ``c``:

* Rand and identity queries come from one image: ``M`` is the row-normalised count of ``(c, a)``;
* a Sup query superimposes two images of classes ``c`` and ``c'``; the teacher is modelled as answering from one
  member, either with equal chance (the mixture :mod:`.evidence` uses): ``P(a | c, c') = 1/2 M[c, a] + 1/2 M[c', a]``,
  fitted by EM with the members' classes known.

Every row is smoothed towards the teacher's overall answer shares (``prior_strength`` pseudo-answers), so a class
with few public images keeps a row that says little rather than one that says something wrong.

**Forward correction** (Patrini et al. 2017, "Making deep neural networks robust to label noise: a loss correction
approach"): the student's softmax ``p`` is read as the class of the images behind a query, and its loss on the
teacher's answer ``a`` is ``-log (p M)[a]``. The noise's share of the answers is carried by ``M``, so the student's
own outputs, which label the clean images, learn the classes. Queries made of clean public images are answered
without noise and keep the plain loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: EM iterations of :func:`estimate_confusion` for Sup pairs (the log-likelihood changes by under 1e-6 per answer
#: after about 30 on the benchmarks' answers).
EM_ITERATIONS = 50


@dataclass(frozen=True)
class Confusion:
    """The teacher's confusion on noised queries: ``matrix`` float64 ``(K, K)``, ``matrix[c, a]`` the share of
    answers ``a`` to queries made from images of class ``c`` (rows sum to 1); ``queries`` the answers it was
    measured on; ``images`` per class (how many public images of each class the queries were made from)."""

    matrix: np.ndarray
    queries: int
    images: list[int]

    @property
    def informativeness(self) -> float:
        """Mean over the classes present of ``M[c, c]`` minus the share of answers ``c`` overall: how much more
        often the teacher names an image's class than it answers that class anyway (0: its answers say nothing)."""
        present = np.asarray(self.images) > 0
        if not present.any():
            return 0.0
        overall = self.matrix[present].mean(axis=0)
        return float(np.mean(np.diag(self.matrix)[present] - overall[present]))

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the matrix rounded to 4 decimals, the queries, the images per class, the informativeness."""
        return {"matrix": np.round(self.matrix, 4).tolist(), "queries": self.queries, "images": self.images,
                "informativeness": round(self.informativeness, 4)}


def _normalised(counts: np.ndarray, prior: np.ndarray, strength: float) -> np.ndarray:
    """Rows of ``counts`` plus ``strength`` pseudo-answers spread as ``prior``, summing to 1 (a row with nothing
    in it: ``prior``)."""
    smoothed = counts + strength * prior[None, :]
    totals = smoothed.sum(axis=1, keepdims=True)
    return np.where(totals > 0, smoothed / np.where(totals > 0, totals, 1.0), prior[None, :])


def estimate_confusion(
    classes: int,
    answers: np.ndarray,
    first: np.ndarray,
    second: np.ndarray | None = None,
    *,
    prior_strength: float = 1.0,
) -> np.ndarray:
    """``M`` (float64 ``(classes, classes)``, rows sum to 1) from the teacher's ``answers`` (int ``(Q,)``) to
    queries made from images of class ``first`` (int ``(Q,)``) or, for Sup pairs, of classes ``first`` and
    ``second``. Rows are smoothed by ``prior_strength`` pseudo-answers spread like the answers overall (plus one
    answer per class, so no entry is 0)."""
    answers = np.asarray(answers, dtype=np.int64)
    first = np.asarray(first, dtype=np.int64)
    if answers.shape != first.shape or (second is not None and np.shape(second) != answers.shape):
        raise ValueError("answers and the images' classes differ in length")
    for name, values in (("answers", answers), ("classes", first), ("classes", second)):
        if values is not None and len(values) and (np.min(values) < 0 or np.max(values) >= classes):
            raise ValueError(f"{name} out of range [0, {classes})")
    overall = np.bincount(answers, minlength=classes).astype(np.float64) + 1.0
    prior = overall / overall.sum()
    counts = np.zeros((classes, classes))
    if second is None:
        np.add.at(counts, (first, answers), 1.0)
        return _normalised(counts, prior, prior_strength)
    second = np.asarray(second, dtype=np.int64)
    np.add.at(counts, (first, answers), 0.5)  # start: each member takes half of every answer
    np.add.at(counts, (second, answers), 0.5)
    matrix = _normalised(counts, prior, prior_strength)
    for _ in range(EM_ITERATIONS):  # E: which member the answer came from; M: the counts it gives
        own, other = matrix[first, answers], matrix[second, answers]
        share = own / (own + other)
        counts = np.zeros((classes, classes))
        np.add.at(counts, (first, answers), share)
        np.add.at(counts, (second, answers), 1.0 - share)
        matrix = _normalised(counts, prior, prior_strength)
    return matrix


def forward_corrected_log_probs(log_probs: torch.Tensor, log_matrix: torch.Tensor) -> torch.Tensor:
    """``log (p M)``: the log-probabilities of the teacher's answers, float ``(B, K)``, from the student's
    ``log_probs`` ``log p`` ``(B, K)`` (its log-softmax) and ``log M`` ``(K, K)`` (in log space: no 0 inside a log)."""
    return torch.logsumexp(log_probs.unsqueeze(2) + log_matrix.to(log_probs.dtype).unsqueeze(0), dim=1)


__all__ = ["EM_ITERATIONS", "Confusion", "estimate_confusion", "forward_corrected_log_probs"]
