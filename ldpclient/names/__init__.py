"""The one list of names for each user-facing choice that has no registry of its own: CLI choices
and help, config validation, library checks, audit options and error messages derive from these
tuples. (Mechanism names come from their registry, :mod:`ldpclient.privacy.mechanisms.registry`;
teacher adapters from :mod:`ldpclient.teachers.registry`.)

Torch-free. The modules that implement the choices implement exactly these names
(``tests/test_names.py`` checks the pipeline, the CLI and the audit against them).
"""

from __future__ import annotations

from enum import Enum

#: This ldpclient's version (``ldpclient.__version__``, ``ldpclient --version``, every report's ``versions``).
VERSION = "0.1.0"


class Mode(str, Enum):
    """How a transfer gets its labels. ``LDPKIT``: the releases, expanded into queries (``--augment sup`` or
    ``rand``), labelled by the teacher, train a student that labels the clean records. ``SIDP``: the releases are
    sent as they are (``--augment none``) and the teacher's answers are the labels; no student. ``DATA_FREE``:
    the same pipeline on blank public input at the free noise level; no private record is released (epsilon 0,
    and the zero-privacy baseline beside a private run). A mode is its value wherever it is written
    (``str(Mode.SIDP) == "sidp"``) and compares equal to it."""

    LDPKIT = "ldpkit"
    SIDP = "sidp"
    DATA_FREE = "data-free"

    def __str__(self) -> str:
        return self.value


#: Query expansions, by the name ``--augment`` takes: Sup pairs, Rand second noise layer, none (= SIDP).
AUGMENTATIONS: tuple[str, ...] = ("sup", "rand", "none")
#: The query-plan kind (``ldpclient.transfer.augment.QueryPlan``) each augmentation builds.
PLAN_KINDS: dict[str, str] = {"sup": "sup", "rand": "rand", "none": "identity"}
#: What an epsilon counts: one released element, or a whole record (the sum over its elements).
EPSILON_UNITS: tuple[str, ...] = ("element", "record")
#: Release bases, by the name ``--basis`` takes: pixels average-pooled, low-frequency DCT coefficients
#: (:mod:`ldpclient.privacy.basis`), or the leading principal components of the public images
#: (:mod:`ldpclient.privacy.pca`).
BASES: tuple[str, ...] = ("pool", "dct", "pca")
#: What a run's free (public, epsilon 0) records are: blank images noised at the free level, or procedural images
#: sent as they are (:mod:`ldpclient.transfer.procedural`). The data-free run and mixed-in free queries use them.
FREE_IMAGES: tuple[str, ...] = ("blank", "procedural")
#: Whether a run sends its releases decoded into its public images (``--decode``,
#: :mod:`ldpclient.transfer.decoder`): when the teacher's answers on a check say it helps, never, or without the
#: check.
DECODINGS: tuple[str, ...] = ("auto", "none", "always")
#: The one of :data:`DECODINGS` that sends the releases as they are.
NO_DECODING = DECODINGS[1]
#: Student models, by the name ``--student`` takes (:data:`ldpclient.transfer.student.STUDENTS` builds each).
STUDENT_NAMES: tuple[str, ...] = ("small_cnn", "pooled_cnn", "small_resnet", "resnet18", "mobilenet_v2", "torchscript")
#: The students that start from a weights file (``--student-weights``); ``torchscript`` only from one.
PRETRAINED_STUDENTS: tuple[str, ...] = ("resnet18", "mobilenet_v2", "torchscript")

#: Changes of an image adaptation checks the student's labels under (:mod:`ldpclient.transfer.image_changes`), by
#: name, with the words the summary and the page use for an image so changed.
IMAGE_CHANGES: dict[str, str] = {
    "mirror": "mirrored",
    "channels": "with their colour channels reordered",
    "invert": "inverted",
    "grey": "in grey",
}

#: What a run's labels are worth, best first (``ldpclient.run.verdict`` decides; pages colour their bands by it).
VERDICT_LEVELS: tuple[str, ...] = ("usable", "doubtful", "not worth having")
#: What the privacy a run spent bought, set beside the data-free run on the same images (the verdict's
#: ``privacy_bought``): significantly better labels, nothing measurable, or significantly worse labels.
PRIVACY_BOUGHT: tuple[str, ...] = ("better labels", "nothing", "worse labels")
#: Why a teacher declined a query (an abstention), by kind: the key the report's ``queries.declined`` counts under,
#: and the words the summary and the page use. Chat models: "cannot tell" (any spelling), a refusal, a
#: content-policy error or content filter, an answer outside the class list, an answer cut off or unreadable;
#: Cloud Vision: no label that maps to a class, an image's own error entry.
DECLINE_KINDS: dict[str, str] = {
    "cannot_tell": "cannot tell",
    "refusal": "refused",
    "policy": "content-policy error",
    "off_list": "answer outside the class list",
    "unreadable": "answer cut off or unreadable",
    "unmapped": "no label that maps to a class",
    "image_error": "error on the image",
}


def choice_list(names: tuple[str, ...]) -> str:
    """``a, b or c``: a list of names for help texts and error messages."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


__all__ = [
    "AUGMENTATIONS",
    "Mode",
    "BASES",
    "DECODINGS",
    "NO_DECODING",
    "EPSILON_UNITS",
    "FREE_IMAGES",
    "PLAN_KINDS",
    "STUDENT_NAMES",
    "PRIVACY_BOUGHT",
    "DECLINE_KINDS",
    "IMAGE_CHANGES",
    "VERDICT_LEVELS",
    "VERSION",
    "choice_list",
]
