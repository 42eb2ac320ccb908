"""Whether a run sends its releases decoded (``label --decode auto``), asked of the teacher.

A decoder (:mod:`.decoder`) helps when the public images it decodes into look like the private ones, and poisons
the labels when they do not: one made from digits 0-4 draws every digit as one it knows. So the teacher decides,
from what it answers to four sets of queries (money, no privacy):

- ``images`` public images the decoder does not hold (the check's images), each released through the run's
  mechanism (``public=True``), sent as the run sends releases today (``raw``) and decoded;
- the first ``records`` private releases of the run (already released: sending them again costs no privacy),
  raw and decoded.

The teacher's answers to the check's images sent clean are the truth. The decoder is chosen when, on the check's
images, its answers agree with the clean ones clearly more often than the raw answers do (a gain of at least
:data:`MIN_GAIN` and of two standard errors of the paired difference), no class the teacher answered on the clean
images loses agreement beyond two of its standard errors, and on the private releases the decoder behaves as on
the public ones:

- no class among the raw answers to the private releases (:data:`MIN_CLASS_ANSWERS` or more of them) is answered
  less than a fifth as often after decoding (a decoder from other classes erases them);
- the decoded answers keep the raw answer about as often on the private releases as on the public images (not
  lower by more than three standard errors of the difference): public images from another source are decoded
  into something else.

The thresholds were set on scikit-learn digits with a network decoder learnt from public images (the first one
measured, benchmarks/decoder.md). One made from classes 0-4 gave classes 5 and 7 none of the 19 and 36 private
releases the raw answers gave them; one made from all classes left each class at least 36 % of its raw count, as
the noise draws raw answers to a few classes and the decoder spreads them back. Decoded, the answers kept the raw
one on 36 % of the private releases against 57 % of the public images for digits 0-4, and 44 % against 54 %
(within the spread) for all digits.

A data-free run has no private releases: its check is the public images' alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..io.document import integer_or_none, text

#: Least gain in agreement with the clean answers (a share) for the decoder to be chosen.
MIN_GAIN = 0.02
#: Raw answers of a class among the private releases below which its loss is not judged (too few to tell).
MIN_CLASS_ANSWERS = 10


@dataclass(frozen=True)
class DecodeVerdict:
    """What the check found: ``chosen``, ``reason`` (words, numbers only: no peer's text), the shares of the
    ``images`` checked whose decoded and raw answers agree with the clean ones (``decoded_agreement``,
    ``raw_agreement``, in [0, 1]) and, over the ``records`` private releases checked, how often the decoded answer
    kept the raw one (``private_kept``; None without private releases) beside the same on the public images
    (``public_kept``)."""

    chosen: bool
    reason: str
    images: int
    raw_agreement: float
    decoded_agreement: float
    records: int
    public_kept: float
    private_kept: float | None

    def as_dict(self) -> dict[str, object]:
        return {"chosen": self.chosen, "reason": self.reason, "images": self.images, "records": self.records,
                "raw_agreement": round(self.raw_agreement, 4), "decoded_agreement": round(self.decoded_agreement, 4),
                "public_kept": round(self.public_kept, 4),
                "private_kept": None if self.private_kept is None else round(self.private_kept, 4)}


def _paired_gain(truth: np.ndarray, raw: np.ndarray, decoded: np.ndarray) -> tuple[float, float]:
    """The decoded answers' gain in agreement with ``truth`` over the raw ones, and its standard error (from the
    discordant pairs, as McNemar's test)."""
    n = len(truth)
    won = int(np.sum((decoded == truth) & (raw != truth)))
    lost = int(np.sum((raw == truth) & (decoded != truth)))
    return (won - lost) / n, math.sqrt(won + lost) / n


def _lost_class(raw: np.ndarray, decoded: np.ndarray) -> int | None:
    """A class the raw answers hold :data:`MIN_CLASS_ANSWERS` times or more and the decoded ones less than a fifth
    as often (None: none)."""
    for c in np.unique(raw[raw >= 0]):
        before, after = int(np.sum(raw == c)), int(np.sum(decoded == c))
        if before >= MIN_CLASS_ANSWERS and 5 * after < before:
            return int(c)
    return None


def _private_reasons(public_kept: float, images: int, raw: np.ndarray, decoded: np.ndarray) -> list[str]:
    """Why the decoder behaves otherwise on the private releases' ``raw`` and ``decoded`` labels than on the
    check's ``images`` public images, where it kept the raw answer ``public_kept`` of the time (empty: it does
    not)."""
    reasons = []
    lost = _lost_class(raw, decoded)
    if lost is not None:
        reasons.append(f"after decoding the teacher gave class {lost} to less than a fifth as many private "
                       "releases: the public images do not hold it as the private ones do")
    kept = float(np.mean((decoded == raw) & (raw >= 0)))
    spread = 3 * math.sqrt(public_kept * (1 - public_kept) / images + kept * (1 - kept) / len(raw))
    if kept < public_kept - max(spread, 1e-9):
        reasons.append(f"decoding kept the raw answer for {100 * kept:.0f}% of the private releases against "
                       f"{100 * public_kept:.0f}% of the public images: the public images do not look like the "
                       "private ones")
    return reasons


def _labels(*arrays: np.ndarray | None) -> list[np.ndarray]:
    """Label arrays as 1-D int64 of one length (ValueError otherwise)."""
    out = [np.asarray(a, dtype=np.int64) for a in arrays if a is not None]
    if any(a.ndim != 1 or a.shape != out[0].shape for a in out):
        raise ValueError(f"need as many labels of each kind, got shapes {[a.shape for a in out]}")
    return out


def decode_verdict(clean: np.ndarray, raw: np.ndarray, decoded: np.ndarray,
                   private_raw: np.ndarray | None = None, private_decoded: np.ndarray | None = None) -> DecodeVerdict:
    """The decision (module doc) from the teacher's labels of the check's images sent ``clean``, ``raw`` and
    ``decoded`` (each ``(K,)``, in the same order) and of the private releases sent raw and decoded (each ``(M,)``;
    None: a data-free run). An unanswered query (label < 0) agrees with nothing."""
    clean, raw, decoded = _labels(clean, raw, decoded)
    if len(clean) < 1:
        raise ValueError("a decoder check needs public images")
    truth = np.where(clean >= 0, clean, -2)  # an unanswered clean image matches no answer
    k = len(clean)
    raw_agreement, decoded_agreement = float(np.mean(raw == truth)), float(np.mean(decoded == truth))
    public_kept = float(np.mean((decoded == raw) & (raw >= 0)))
    gain, se = _paired_gain(truth, raw, decoded)
    figures = (f"decoded, {100 * decoded_agreement:.0f}% of {k} public images kept their clean answer against "
               f"{100 * raw_agreement:.0f}% raw")
    reasons = [] if gain >= max(MIN_GAIN, 2 * se) else [figures + ": not clearly more"]
    for c in np.unique(truth[truth >= 0]):
        on = truth == c
        g, s = _paired_gain(truth[on], raw[on], decoded[on])
        if g < -2 * s:
            reasons.append(f"decoding lost agreement on class {int(c)} of the public images ({100 * g:+.0f} points)")
            break
    m, private_kept = 0, None
    if private_raw is not None and private_decoded is not None:
        p_raw, p_dec = _labels(private_raw, private_decoded)
        m = len(p_raw)
        if m:
            private_kept = float(np.mean((p_dec == p_raw) & (p_raw >= 0)))
            reasons += _private_reasons(public_kept, k, p_raw, p_dec)
    return DecodeVerdict(not reasons, reasons[0] if reasons else figures, k, raw_agreement, decoded_agreement, m,
                         public_kept, private_kept)


def decoding_note(decoding: Mapping[str, object], done: str = "sent") -> str:
    """Whether a run sent (or ``done``: wrote) its releases decoded and why, in words (the terminal summary and the
    page), from the result's ``decoding`` (numbers and the verdict's own words only, none from a peer's text)."""
    reason = text(decoding, "reason")
    if not decoding.get("chosen"):
        return f"releases {done} as they are, not decoded: {reason}"
    prior = integer_or_none(decoding, "public_images")
    return f"releases {done} decoded into {prior} public images: {reason}"


__all__ = ["decoding_note", "DecodeVerdict", "MIN_CLASS_ANSWERS", "MIN_GAIN", "decode_verdict"]
