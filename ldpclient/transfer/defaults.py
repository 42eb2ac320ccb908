"""One function per default of the transfer (queries, post-processing, the student and its training): the CLI, the
config file, the demo and the library all call these. The privacy defaults are :mod:`ldpclient.privacy.defaults`.

The values were chosen by measurement (``benchmarks/bench_adapt.py`` and the other benchmarks) and hold no
dataset-specific constant.
"""

from __future__ import annotations

from typing import Sequence

from ..names import NO_DECODING
from ..privacy.defaults import MIN_RELEASED_SIDE
from .affine import MIN_AUGMENT_SIDE

#: Smallest side (pixels) of the grey images the default student averages over 2x2 pixels (:func:`student`).
MIN_POOLED_SIDE = 24

#: Teacher queries per private record when the user gives no ``--queries``.
QUERIES_PER_RECORD = 20
#: Fewest queries a run plans (a student needs a few hundred labels to learn anything).
MIN_QUERIES = 500
#: Largest teacher batch the client sends unless told otherwise (requests stay small and retries cheap).
MAX_QUERY_BATCH = 256


def augment() -> str:
    """The query expansion a run uses unless told otherwise (a name of ``ldpclient.names.AUGMENTATIONS``): Sup pairs."""
    return "sup"


def student(record_shape: Sequence[int], public: bool, data_free: bool = False) -> str:
    """The student model a run trains unless told otherwise, for records of ``record_shape`` ``(C, H, W)``, with
    or without ``public`` images (``label --public``), in a ``data_free`` run or not (a name of
    ``ldpclient.transfer.student.STUDENTS``): ``small_resnet`` for colour images (3 channels or more) of at least
    :data:`MIN_AUGMENT_SIDE` pixels a side when public images are given; ``pooled_cnn`` for grey images of at
    least :data:`MIN_POOLED_SIDE` pixels a side trained on noised private queries alone; else ``small_cnn``.

    Measured (3 seeds): with public images the residual student learned
    more of the teacher (CIFAR-10 with 5,000 public photos 60.3 ± 0.6 % against 55.8 ± 1.7 %, colour digits
    with 500 public 92.2 ± 0.9 against 86.5 ± 2.2), at 1.9x (one thread) to 2.5x (two, end to end) the small
    CNN's training time. Trained on the noised queries alone it lost on colour digits (61.7 ± 8.8 against 67.9 ±
    2.2): its batch normalisation learns the statistics of noise and meets clean images when it labels.

    The pooled student on grey 28x28 images (the default release keeps their 64 lowest DCT frequencies, which a
    14x14 image holds): MNIST 94.7 ± 0.5 against 94.0 ± 0.5, scikit-learn digits 92.7 ± 0.6 against 91.9 ± 1.1,
    Fashion-MNIST 71.1 ± 3.3 against 70.6 ± 2.2, in 0.45-0.63 of the time of the code it replaced (whose
    adaptation had made it slower than the defaults a few changes before). It lost where the run leans on
    adaptation to clean images: colour digits at 32x32 (67.3 and 61.2 against 85.2 and 82.9) and the data-free
    runs (digits 84.4 ± 0.4 against 88.9 ± 2.0, MNIST 92.8 ± 1.4 against 94.5 ± 1.0, Fashion-MNIST 63.9 ± 3.0
    against 65.9 ± 1.4), which keep ``small_cnn``, as the data-free baseline beside a run does.
    """
    c = int(record_shape[-3]) if len(record_shape) >= 3 else 1
    side = min(int(record_shape[-2]), int(record_shape[-1]))
    if public and c >= 3 and side >= MIN_AUGMENT_SIDE:
        return "small_resnet"
    return "pooled_cnn" if c == 1 and side >= MIN_POOLED_SIDE and not public and not data_free else "small_cnn"


def train_crop(image_size: int, public: bool) -> int:
    """Pixels by which training shifts each row at random (a crop of the row padded by its edge values), with or
    without ``public`` images: with them an eighth of ``image_size`` (the smaller side; 28 -> 3, 32 -> 4),
    without them, or below :data:`MIN_AUGMENT_SIDE`, 0.

    With public images every row the student trains on (noised queries and public images alike) is shifted
    anew each time it is read; the labels stay the teacher's answers to the unshifted rows. Measured (3 seeds): with
    public images no set lost (MNIST 96.7 ± 0.5 against 96.5 ±
    0.3, digits at 28x28 96.4 ± 0.4 against 95.7 ± 0.6) and the photos gained beside the residual student; on
    the noised queries alone it cost MNIST 11 points (80.8 ± 1.3 against 91.4 ± 0.8) and digits 2.
    """
    return int(image_size) // 8 if public and int(image_size) >= MIN_AUGMENT_SIDE else 0


#: Most public images whose mirrored and shifted copies the teacher labels to decide
#: :func:`~ldpclient.transfer.mirror_check.flip` (twice as many queries): enough that the two agreements' sampling
#: error (about 3 points each at 200) is far below the gap between photos and digits measured below.
MIRROR_CHECK_IMAGES = 200
#: Fewest public images the check decides on; with fewer, runs do not mirror. From the binomial error of the two
#: shares measured below (as independent): at 100 images scikit-learn digits (the closest set, mirror 44 % against
#: shift 82 %) would pass the rule by sampling chance about once in 800 runs, CIFAR-10 (72 / 71 %) fail it about
#: once in 3,000; at 50 images about once in 60 and in 130.
MIRROR_CHECK_MIN_IMAGES = 100


def mirror_check_images(public_images: int, image_size: int) -> int:
    """Public images a run checks under a mirror and a shift to decide :func:`~ldpclient.transfer.mirror_check.flip`
    (``label --public`` without ``--flip``/``--no-flip``): up to :data:`MIRROR_CHECK_IMAGES` of them; none (and no
    mirrored rows) with fewer than :data:`MIRROR_CHECK_MIN_IMAGES` public images or below :data:`MIN_AUGMENT_SIDE`
    pixels a side (no training shift to compare the mirror with)."""
    if int(image_size) < MIN_AUGMENT_SIDE or int(public_images) < MIRROR_CHECK_MIN_IMAGES:
        return 0
    return min(int(public_images), MIRROR_CHECK_IMAGES)


def blur_postprocess(input_shape: tuple[int, ...]) -> str:
    """A Gaussian blur of ``max(H, W) / (2 * MIN_RELEASED_SIDE)`` input pixels, then clipping to the domain.

    The blur is half a cell of the coarsest grid the default reduction releases
    (``MIN_RELEASED_SIDE`` pixels per side): 28x28 -> 2 px (= half the 4x4 pooling cell), 8x8 ->
    0.571 px, 224x224 -> 16 px. Relative to the image, not a fixed number of pixels: a fixed blur
    measured well on 28x28 and badly on 8x8, this one well on both.
    """
    sigma = max(int(input_shape[-2]), int(input_shape[-1])) / (2 * MIN_RELEASED_SIDE)
    return f"blur:{sigma:.3g},clip"


#: Per-element epsilon (nats) from which a release of every pixel is post-processed by the DCT band's projection
#: instead of the blur: Laplace noise of at most half the domain's width. Measured at 28x28 (3 seeds each): at 2 the
#: projection won on MNIST and digits, at 1 it won on MNIST and lost on digits, at 0.128 it lost or tied on both.
LOWPASS_MIN_EPSILON_ELEMENT = 2.0


#: Post-processing of a ``dct`` release when none is given: its reconstruction is band-limited already
#: (no blur), and is clipped to the domain.
DCT_POSTPROCESS = "clip"


def postprocess(
    input_shape: tuple[int, ...], reduce: int, epsilon_element: float | None = None, basis: str = "pool"
) -> str:
    """Default post-processing of releases in ``basis`` of records of ``input_shape`` (..., H, W): for a
    coefficient basis (``dct``, ``pca``) :data:`DCT_POSTPROCESS`; for pooled releases (``pool``) at pooling
    factor ``reduce``, each released element at ``epsilon_element`` (nats; None: not known), as follows.

    A release of every pixel (``reduce`` 1) of a channel with more pixels than
    :data:`~ldpclient.privacy.basis.DEFAULT_COEFFICIENTS`, at a per-element epsilon of at least
    :data:`LOWPASS_MIN_EPSILON_ELEMENT`, is projected onto that many lowest-frequency DCT basis images per
    channel, then clipped (``lowpass:64,clip``): the band a ``dct`` release keeps. At the paper's setting (2 per
    pixel, 28x28) it labelled MNIST 92.8 ± 0.8 % against 79.6 ± 1.5 % with the blur, and digits 93.5 ± 1.2 %
    against 92.9 ± 0.6 %; at 1 per pixel MNIST gained and digits lost about 6 points, and at 0.128 per pixel
    the blur was as good or better on both (3 seeds each). Otherwise (more
    noise, an unknown epsilon, a pooled release, or a channel of at most that many pixels, such as 8x8, where
    the projection would keep everything): :func:`blur_postprocess`.
    """
    from ..privacy.basis import DEFAULT_COEFFICIENTS

    if basis != "pool":
        return DCT_POSTPROCESS
    h, w = int(input_shape[-2]), int(input_shape[-1])
    if (
        int(reduce) == 1
        and h * w > DEFAULT_COEFFICIENTS
        and epsilon_element is not None
        and epsilon_element >= LOWPASS_MIN_EPSILON_ELEMENT
    ):
        return f"lowpass:{DEFAULT_COEFFICIENTS},clip"
    return blur_postprocess(input_shape)


def num_queries(n_records: int, augmentation: str) -> int | None:
    """Default query budget for ``n_records`` private records.

    ``QUERIES_PER_RECORD`` per record, at least ``MIN_QUERIES``, and for ``sup`` at most the
    ``n(n-1)/2`` distinct pairs; ``None`` for ``none`` (SIDP sends each release once).
    """
    if augmentation in ("none", "identity"):
        return None
    q = max(QUERIES_PER_RECORD * n_records, MIN_QUERIES)
    if augmentation == "sup":
        q = min(q, n_records * (n_records - 1) // 2)
    return q


def query_batch_size(teacher_max: int | None, batch_api: bool = False) -> int:
    """Queries per teacher request: the teacher's declared maximum, at most ``MAX_QUERY_BATCH``; for a teacher
    answering through a batch API (one job per batch, answered within hours), its maximum."""
    if batch_api and teacher_max:
        return int(teacher_max)
    return min(teacher_max or MAX_QUERY_BATCH, MAX_QUERY_BATCH)


def train_batch_size() -> int:
    """Student training batch (rows per optimiser step), CLI and library alike.

    32: at 100 per record, 3 seeds, it labelled better than 128 on both image sizes measured
    (28x28: 93.2 vs 91.7 %; 8x8: 92.7 vs 91.2 %) and in less time than 10 epochs or twice the
    queries, which reach the same accuracy.
    """
    return 32


def public_repeats(n_queries: int, n_public: int) -> int:
    """How many times per training epoch the student sees each public image (``label --public``) beside
    ``n_queries`` private (or blank) queries: as many as make the public images about three quarters of what it
    trains on, at least once: ``max(1, round(3 * n_queries / n_public))``.

    Public images are clean images of the kind the student will label, each with the teacher's answer; the
    noised queries are many more. Measured at three shares, 3 seeds each, private releases / zero-privacy (blank
    queries), adapted accuracy:

    * once per epoch: CIFAR-10 (5,000 public photos beside 20,000 queries) 32.5 / 43.3 %, MNIST 94.7 / 95.5 %,
      scikit-learn's digits 92.9 / 91.0 %;
    * half of the rows (``round(q / p)``): CIFAR-10 51.9 / 53.0, colour digits 84.2 / 85.4, MNIST 96.5 / 96.4,
      digits 94.8 / 93.6 %;
    * three quarters (this rule): CIFAR-10 55.8 / 56.0, colour digits 86.5 / 84.6, MNIST 96.5 / 96.8, digits
      95.7 / 95.5 %: no set loses, the photos gain 4 points. It costs about 1.5x the training time of half.
    """
    if n_public < 1:
        raise ValueError(f"n_public must be >= 1, got {n_public}")
    return max(1, round(3 * int(n_queries) / int(n_public)))


#: Most public images held out of training to score the student against the teacher (``label --public``).
PUBLIC_HELD_OUT_MAX = 500
#: Fewest public images a run holds some out of: with fewer, every one trains the student.
PUBLIC_HELD_OUT_MIN_IMAGES = 100


def public_held_out(n_public: int) -> int:
    """Public images held out of training and adaptation (``label --public``): a tenth of them, at most
    :data:`PUBLIC_HELD_OUT_MAX`, none below :data:`PUBLIC_HELD_OUT_MIN_IMAGES`. The teacher labels them with the
    others (no extra query); the student's agreement with those labels on these unseen clean images is evidence
    for the verdict (:mod:`ldpclient.run.verdict`). A tenth keeps what the student learns from public images
    nearly whole (they carry the labels on photos); 500 measure an agreement to about +-4 points (95 %)."""
    n = int(n_public)
    return 0 if n < PUBLIC_HELD_OUT_MIN_IMAGES else min(PUBLIC_HELD_OUT_MAX, n // 10)


#: Most public images the decoder check holds out of the decoder (``--decode auto``), and fewest public images a
#: decoder is made from at all: the check's images are a quarter of them, 50 at the least.
DECODE_CHECK_IMAGES = 200
DECODE_MIN_PUBLIC = 200
#: Most private releases the decoder check sends raw and decoded (twice as many queries; no privacy cost).
DECODE_CHECK_RECORDS = 200


def decode_check_images(public_images: int) -> int:
    """Public images the decoder check holds out of the decoder and sends raw and decoded: a quarter of
    them, at most :data:`DECODE_CHECK_IMAGES`; none (no decoder) below :data:`DECODE_MIN_PUBLIC`. With 200 the
    two agreements it compares are measured to about +-7 points each (95 %); the paired test it decides by is
    tighter, as most images agree both ways."""
    n = int(public_images)
    return 0 if n < DECODE_MIN_PUBLIC else min(DECODE_CHECK_IMAGES, n // 4)


def decode_check_records(records: int) -> int:
    """Private releases the decoder check sends raw and decoded: all, up to :data:`DECODE_CHECK_RECORDS`."""
    return min(int(records), DECODE_CHECK_RECORDS)


#: Seeds run from 0 to ``MAX_SEED - 1`` = 2**63 - 1 (what torch, numpy and the query plan all accept): ``--seed``
#: and ``TrainingSettings.student_seed`` are checked against it before anything is paid.
MAX_SEED = 2**63


def adapt() -> bool:
    """Whether the student is fine-tuned on the clean private records before it labels them (``--adapt``): yes."""
    return True


def decode() -> str:
    """Whether the releases are sent decoded into the public images (``--decode``, a name of
    :data:`~ldpclient.names.DECODINGS`): ``none``, as they are."""
    return NO_DECODING


def warmup() -> int:
    """Epochs of the rotation pretext on the clean records before training (``--warmup``): 0, none."""
    return 0


def device() -> str:
    """Where the student trains and labels: ``auto`` (:func:`~ldpclient.transfer.student.select_device`)."""
    return "auto"


def epochs() -> int:
    """Student training epochs over the query plan."""
    return 5


def query_rounds() -> int:
    """Rounds the plan's queries are sent in (:mod:`ldpclient.transfer.rounds`; ``--query-rounds``): 1, every
    query at once. Measured at 40 per image in 3 rounds on digits and MNIST, the labels still rose from 20 to 40 per
    image, the rule stopped once in 9 runs (half the money, 2.3 points lost) and each round costs a student's
    training: at the default budget rounds have little to save."""
    return 1


def students() -> int:
    """Students a run trains on the same answers and labels with the mean of (``--students``;
    ``TrainingSettings.students``): 1. Three brought the spread over seeds of the labels to 0.2-1.8 points on digits,
    MNIST, colour digits and CIFAR-10 (one: 0.7-2.0) and raised them 0.8-1.5 points, at three times the training and
    adaptation time, which the speed targets of "Speed and memory at scale" leave no room for; so the default is one
    student."""
    return 1


def member_seed(student_seed: int, member: int) -> int:
    """The seed of member ``member`` (0-based) of a run's students: ``student_seed`` for member 0 (so that one
    student is the run it always was), then steps of 7,919 (a prime), within ``[0, MAX_SEED)``."""
    return (int(student_seed) + 7919 * int(member)) % MAX_SEED


def min_round_gain() -> float:
    """Least rise of the student's held-out agreement with the teacher (a share in [0, 1]) for which a query
    round is worth the next one: 1 point; a smaller rise is within the spread of a few hundred held-out queries."""
    return 0.01


#: Most query rounds a run accepts (``--query-rounds``): the first of 8 doubling rounds is 1/128 of the plan.
MAX_QUERY_ROUNDS = 8


#: Most queries per private image a run accepts (``--queries``): 50 times the default; a query is paid, labelled
#: and trained on, so a typo's extra zeros would cost money and time without end.
MAX_QUERIES_PER_RECORD = 1000
#: Most training epochs a run accepts (``--epochs``): 200 times the default; the measured studies used
#: at most 40. An option is bounded so that a typo cannot turn into work without end after the run has paid.
MAX_EPOCHS = 1000
#: Most warm-up epochs a run accepts (``--warmup``): the measured studies used 30 and 60.
MAX_WARMUP_EPOCHS = 200
#: Most students a run accepts (``--students``): each is a full training and adaptation.
MAX_STUDENTS = 16
#: Largest training batch (``--train-batch-size``): 65,536 rows of a 224x224 colour image are 39 GB.
MAX_TRAIN_BATCH = 65536


__all__ = [
    "adapt",
    "augment",
    "decode",
    "device",
    "warmup",
    "decode_check_images",
    "decode_check_records",
    "MAX_EPOCHS",
    "MAX_TRAIN_BATCH",
    "MAX_QUERIES_PER_RECORD",
    "MAX_QUERY_BATCH",
    "PUBLIC_HELD_OUT_MAX",
    "PUBLIC_HELD_OUT_MIN_IMAGES",
    "public_held_out",
    "MAX_WARMUP_EPOCHS",
    "MAX_STUDENTS",
    "member_seed",
    "students",
    "MAX_QUERY_ROUNDS",
    "MIN_QUERIES",
    "min_round_gain",
    "QUERIES_PER_RECORD",
    "epochs",
    "num_queries",
    "postprocess",
    "public_repeats",
    "query_batch_size",
    "query_rounds",
    "train_batch_size",
    "DCT_POSTPROCESS",
    "MIN_AUGMENT_SIDE",
    "student",
    "train_crop",
]
