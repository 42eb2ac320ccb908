"""What one ``ldpclient label`` run will do, resolved once: :func:`resolve_plan` turns the options, the teacher's
facts and the number of images into a :class:`RunPlan`, and every stage of the run reads the plan and
resolves nothing itself. ``label --dry-run`` prints :meth:`RunPlan.describe` (nothing noised, sent or
charged) and the run report keeps it as its ``run_plan`` section.

The resolution steps are the functions below :func:`resolve_plan` (the basis, the shape defaults, the
mechanism, the data-free baseline's blank-query mechanism); ``noise`` and ``audit`` use the same ones. They
call only leaves: :mod:`ldpclient.transfer.defaults` (one function per default) and
:mod:`ldpclient.run.mechanism` (the one mechanism builder).

Units: epsilon in nats, per record (one image) unless a key says ``element``; money in the unit of
``--price`` (per query); counts are images and queries.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional

from ..names import Mode
from ..privacy import defaults as privacy_defaults
from ..privacy.guarantee import release_caution
from ..teachers.base import TeacherMetadata
from ..transfer import defaults
from ..transfer.augment import check_sup_queries
from ..transfer.decoder import decodable
from ..transfer.resolve import Decoding, Facts, Resolved, decoding, query_batch_size, resolve
from ..transfer.rounds import round_ends
from ..transfer.settings import Given
from .mechanism import fit_public_basis, mechanism_for
from .memory import check_memory_for_shape
from .options import LabelOptions, SharedOptions

if TYPE_CHECKING:
    from ..io.records import RecordSource
    from ..privacy.base import Mechanism
    from ..privacy.pca import PcaBasis

#: Why a ``--basis pca`` run without public images cannot start.
PCA_NEEDS_PUBLIC = "--basis pca is fitted on public images: give --public DIR"


@dataclass(frozen=True)
class RunTerms:
    """What a run learnt of its terms once the teacher and the state were opened, kept beside the options it was
    asked with (never written into them): ``price``, money per query each query is booked at (``--price``; for a
    teacher billed in tokens the most a query can cost, which caps and plans book); ``privacy_cap``, the per-image
    epsilon cap the run works under (the ledger's, tightened by ``--privacy-cap``; None: none)."""

    price: float
    privacy_cap: float | None


@dataclass(frozen=True)
class ReleaseSettings:
    """How each record is released and post-processed, settled for the teacher's record shape from the options (a
    given value as given, else its default; :func:`settle_release`): ``basis`` (``pool``, ``dct`` or ``pca``),
    ``reduce`` (the pooling factor per side; 1 for a coefficient basis) and ``postprocess`` (the spec the releases
    are post-processed with before they are sent)."""

    basis: str
    reduce: int
    postprocess: str


@dataclass(frozen=True)
class BaselinePlan:
    """The data-free baseline beside a run (``--baseline``), a plan of its own: ``mechanism`` noises its blank queries
    at the free level (:func:`build_free_query_mechanism`), post-processed with ``postprocess``
    (:func:`free_query_shape_settings`); ``settings``: the run's transfer settings with that post-processing (the same
    queries and training as the run, and its student where one was asked; else the data-free default,
    :func:`ldpclient.transfer.defaults.student`); ``resolved``: what :func:`ldpclient.transfer.resolve.resolve` settled
    for them in data-free mode, which the baseline's transfer reads as it is."""

    mechanism: Mechanism
    postprocess: str
    settings: Given
    resolved: Resolved


@dataclass(frozen=True)
class RunPlan:
    """Every setting of one label run, resolved.

    ``opts``: the options as asked; ``release``: the basis, pooling and post-processing settled for the shape
    (:class:`ReleaseSettings`); ``shape``: the teacher's input ``(C, H, W)``; ``mode``: ``ldpkit``, ``sidp`` or
    ``data-free``;
    ``mechanism``: what noises the releases (at ``--epsilon 0``: the blank queries); ``baseline``: the data-free
    baseline's plan (:class:`BaselinePlan`; None without ``--baseline``); ``records`` and
    ``public``: images to label and public images; ``num_queries``: private (or blank) queries, None for SIDP
    (each release is sent once); ``query_batch_size``: queries per request; ``public_repeats``: times per epoch
    the student trains on each public image (0 without any); ``mirror_check_images``: public images the mirror
    check sends a mirrored and a shifted copy of (0: none; :mod:`ldpclient.transfer.mirror_check`); ``settings``:
    the pipeline's plan, training and adaptation settings, as :func:`ldpclient.transfer.resolve.resolve` settled
    them for these counts; ``resolved``: what that resolution returned, which the run's transfer reads as it is
    (a run resolves once); ``terms``: the price and the privacy cap the run works under (:class:`RunTerms`).
    """

    opts: LabelOptions
    release: ReleaseSettings
    terms: RunTerms
    identity: str
    scope: str
    meta: TeacherMetadata
    shape: tuple[int, ...]
    mode: Mode
    mechanism: Mechanism
    baseline: BaselinePlan | None
    records: int
    public: int
    num_queries: int | None
    query_batch_size: int
    public_repeats: int
    mirror_check_images: int
    settings: Given
    #: whether the releases are sent decoded, and the check's size (``--decode``)
    decoding: Decoding = field(default_factory=Decoding)
    resolved: Optional[Resolved] = None

    def with_images(self, records: int, public: RecordSource | None) -> "RunPlan":
        """:meth:`with_counts` for ``records`` private images and the ``public`` ones, releasing in the basis
        fitted on them (``--basis pca``; other bases: the counted plan). ValueError (one line) without public
        images."""
        counted = self.with_counts(records, len(public) if public is not None else 0)
        return counted._with_public_basis(public)

    def _with_public_basis(self, public: RecordSource | None) -> "RunPlan":
        if self.release.basis != "pca" or self.opts.data_free:
            return self
        if public is None or not len(public):
            raise ValueError(PCA_NEEDS_PUBLIC)
        from ..privacy.pca import PCA_MAX_IMAGES

        values = public.read(range(min(len(public), PCA_MAX_IMAGES)))
        basis = fit_public_basis(values, self.meta.value_range, self.opts.coefficients)
        mechanism = build_mechanism(self.opts, self.release, self.meta.value_range, self.shape, pca=basis)
        # the fitted basis is a fact the settings were not resolved with: the run's transfer resolves them again
        return dataclasses.replace(self, mechanism=mechanism, resolved=None)

    def with_counts(self, records: int, public: int) -> "RunPlan":
        """The same plan for ``records`` private and ``public`` public images: the folders' decodable ones, when
        some files were skipped (the plan was resolved from the files found, before decoding)."""
        if (records, public) == (self.records, self.public):
            return self
        blank = (self.baseline.mechanism, self.baseline.postprocess) if self.baseline is not None else None
        return _counted(self.opts, self.release, self.terms, self.identity, self.scope, self.meta, self.mechanism,
                        records=records, public=public, blank=blank)

    def queries_sent_at_most(self) -> dict[str, int]:
        """Queries this run may send: private releases (or their Sup/Rand queries), public images (once each),
        the baseline's blank queries. The journal answers those already paid for, so these are upper bounds."""
        private = self.num_queries if self.num_queries is not None else self.records
        free = self.baseline.mechanism if self.baseline is not None else None
        baseline = (self.num_queries or 0) if free is not None and self.mode != Mode.DATA_FREE else 0
        baseline_checks = bool(baseline) and free is not None and decodable(free, self.shape) is None
        check = self.decoding.check_queries + (2 * self.decoding.check_images if baseline_checks else 0)
        return {"private": private, "public": self.public + 2 * self.mirror_check_images, "baseline": baseline,
                "decode_check": check}

    def queries_sent_at_least(self) -> dict[str, int]:
        """:meth:`queries_sent_at_most`, less the query rounds a run may leave unsent (``--query-rounds``: the first
        two rounds are always sent, :mod:`ldpclient.transfer.rounds`); the same without rounds. A journal that
        answered some may make a run pay less still."""
        most = self.queries_sent_at_most()
        if self.num_queries is None or self.opts.query_rounds < 2:
            return most
        ends = round_ends(math.ceil(self.num_queries / self.query_batch_size), self.opts.query_rounds)
        least = min(ends[1] * self.query_batch_size, self.num_queries) if len(ends) > 1 else self.num_queries
        # the baseline's data-free run sends its own rounds under the same rule
        return {**most, "private": least, "baseline": least if most["baseline"] else 0}

    def describe(self, booking: Mapping[str, object] | None = None) -> dict[str, object]:
        """The plan in words and numbers (JSON-able, no pixels): what would be released, sent, spent and trained;
        ``booking``: what a query is booked at, in tokens, for a teacher billed in them."""
        opts, terms, g = self.opts, self.terms, self.mechanism.guarantee(self.shape)
        data_free = self.mode == Mode.DATA_FREE
        sent = self.queries_sent_at_most()
        n_sent = sum(sent.values())
        at_least = self.queries_sent_at_least()
        release: dict[str, object] = {
            "mechanism": opts.mechanism,
            "basis": self.release.basis,
            "reduce": self.release.reduce,
            "postprocess": self.release.postprocess,
            "epsilon_record": 0.0 if data_free else g.epsilon_record,
            "epsilon_element": 0.0 if data_free else g.epsilon_element,
            "delta_record": 0.0 if data_free else g.delta_record,
            "elements_per_record": g.elements_per_record,
            "sampling": g.params.get("sampling"),
            "config": self.mechanism.config(),
        }
        if data_free:
            release["note"] = "data-free: the teacher gets blank images noised here; nothing private is sent"
        elif (caution := release_caution(g.params)) is not None:
            release["note"] = caution
        return {
            "teacher": {"address": self.identity, "input_shape": list(self.shape),
                        "value_range": [float(v) for v in self.meta.value_range],
                        "num_classes": self.meta.num_classes, "max_batch_size": self.meta.max_batch_size},
            "mode": self.mode,
            "images": {"private": self.records, "public": self.public},
            "release": release,
            "queries": {"augment": opts.augment, **sent, "batch_size": self.query_batch_size,
                        "requests_at_most": sum(math.ceil(v / self.query_batch_size) for v in sent.values()),
                        "rounds": opts.query_rounds, "private_at_least": at_least["private"],
                        "batch_api": self.meta.batch_api},
            "spend": {
                "epsilon_per_image": release["epsilon_record"],
                "images_charged_at_most": 0 if data_free else self.records,
                "privacy_cap": terms.privacy_cap,
                "money_per_query": terms.price,
                "money_at_most": n_sent * terms.price,
                "money_at_least": sum(at_least.values()) * terms.price,
                "money_cap": opts.money_cap,
                "note": "upper bounds: an image with a stored release for this teacher and mechanism is reused at no "
                        "cost, and a batch already in the journal is not paid again",
                **({"booking": dict(booking)} if booking is not None else {}),
            },
            "student": self._student(),
            "decoding": self._decoding(),
            "baseline": None if self.baseline is None or data_free else {
                "blank_query_noise": self.baseline.mechanism.config(), "postprocess": self.baseline.postprocess,
                "student": self.baseline.resolved.student,
            },
        }

    def _student(self) -> dict[str, object] | None:
        """The student the run trains (None: SIDP trains none): the model, its training, the weights it starts from."""
        opts = self.opts
        return None if self.mode == Mode.SIDP else {
            "model": self.settings.training.student, "epochs": opts.epochs,
            "train_batch_size": opts.train_batch_size,
            "crop_pixels": self.settings.training.crop, "flip": opts.flip, "warmup_epochs": opts.warmup,
            "warmup_rows": opts.warmup * self.records, "students": opts.students,
            "mirror_check_images": self.mirror_check_images,
            "public_repeats": self.public_repeats, "adapt": opts.adapt,
            "balance": self.settings.adaptation.balances(bool(self.public)),
            "weights": self._weights(),
        }

    def _weights(self) -> dict[str, object] | None:
        """The file the student starts from (``--student-weights``): name, SHA-256, architecture, input size."""
        if self.opts.student_weights is None:
            return None
        from ..transfer.pretrained import weights_info

        return weights_info(self.opts.student_weights, self.settings.training.student).as_dict()

    def _decoding(self) -> dict[str, object] | None:
        """The plan's decoder (``--decode``) in numbers: asked, why not, the check's size, the images it holds."""
        d = self.decoding
        if self.opts.decode == "none":
            return None
        prior = self.public - d.check_images if d.decode != "none" else 0
        return {"decode": self.opts.decode, "used": d.decode, "note": d.note, "check_images": d.check_images,
                "check_records": d.check_records, "check_queries": d.check_queries,
                "public_images": prior}


def resolve_plan(
    opts: LabelOptions, meta: TeacherMetadata, *, identity: str, scope: str, records: int, public: int,
    terms: RunTerms | None = None,
) -> RunPlan:
    """The plan of a label run with ``opts`` against a teacher publishing ``meta``, for ``records`` private and
    ``public`` public images, under ``terms`` (None: the price and the cap as asked); ValueError (one line, naming
    the option) for anything that cannot run. Nothing is decoded, noised or sent here: it is what a run checks
    before touching data."""
    from ..teachers.limits import TeacherLimits

    shape = tuple(int(s) for s in meta.input_shape)
    TeacherLimits().check_input_shape(shape, identity)  # before any image is decoded at that size
    TeacherLimits().check_value_range(meta.value_range, identity)  # before the noise is scaled by it
    if len(shape) != 3:
        raise ValueError(f"teacher {identity!r} declares input shape {shape}; ldpclient label needs (C, H, W) images")
    check_memory_for_shape(shape, identity, opts.max_memory, train_batch=opts.train_batch_size,
                           query_batch=query_batch_size(opts.batch_size, meta))  # before anything is built
    release = settle_release(opts, shape)
    mechanism = build_mechanism(opts, release, meta.value_range, shape)
    _check_public_basis(opts, release, public)
    blank = None
    if opts.baseline:  # the data-free baseline's blank queries, noised at the free level
        blank = (build_free_query_mechanism(opts, release, meta.value_range, shape),
                 free_query_shape_settings(release, shape)[1])
    terms = terms if terms is not None else RunTerms(opts.price, opts.privacy_cap)
    return _counted(opts, release, terms, identity, scope, meta, mechanism, records=records, public=public,
                    blank=blank)


def _counted(
    opts: LabelOptions, release: ReleaseSettings, terms: RunTerms, identity: str, scope: str, meta: TeacherMetadata,
    mechanism: Mechanism, *, records: int, public: int, blank: tuple[Mechanism, str] | None,
) -> RunPlan:
    """The plan of ``opts`` for ``records`` private and ``public`` public images, with what follows from those
    counts resolved as the pipeline resolves it (:func:`ldpclient.transfer.resolve.resolve`): the query budget, the
    student, the public images' repeats and mirror check, and the pipeline settings with those values filled in;
    with ``blank`` (the baseline's blank queries: their mechanism and post-processing; None: no baseline) the
    baseline's plan the same way, in data-free mode, from the same settings with that post-processing."""
    shape = tuple(int(s) for s in meta.input_shape)
    mode = Mode.DATA_FREE if opts.data_free else (Mode.LDPKIT if opts.augment != "none" else Mode.SIDP)
    facts = Facts(records, shape, public, meta)
    _check_queries(opts, records)
    given = opts.transfer_settings(num_queries=opts.queries, query_batch_size=opts.batch_size,
                                   postprocess=release.postprocess)
    settled = resolve(given, facts, mechanism=mechanism, mode=mode)
    num_queries = None if settled.kind == "identity" else settled.queries
    repeats = settled.public_repeats if num_queries else 0
    settled_with = functools.partial(opts.transfer_settings, num_queries=num_queries,
                                     query_batch_size=settled.query_batch_size, public_repeats=repeats or None,
                                     crop=settled.crop, student=settled.student)
    baseline = None
    if blank is not None:
        free_mechanism, free_postprocess = blank
        free = settled_with(postprocess=free_postprocess, student=opts.student)  # unasked: the data-free default
        baseline = BaselinePlan(free_mechanism, free_postprocess, free,
                                resolve(free, facts, mechanism=free_mechanism, mode=Mode.DATA_FREE))
    return RunPlan(opts=opts, release=release, terms=terms, identity=identity, scope=scope, meta=meta, shape=shape,
                   mode=mode, mechanism=mechanism, baseline=baseline, records=records, public=public,
                   num_queries=num_queries, query_batch_size=settled.query_batch_size, public_repeats=repeats,
                   mirror_check_images=settled.mirror_check_images,
                   settings=settled_with(postprocess=release.postprocess), decoding=settled.decoding,
                   resolved=settled)


def _check_public_basis(opts: LabelOptions, release: ReleaseSettings, public: int) -> None:
    """ValueError (one line) when ``--basis pca`` has too few public images to be fitted on."""
    from ..privacy.pca import luminance_components

    k = luminance_components(opts.coefficients)
    if release.basis != "pca" or opts.data_free:
        return
    if not public:
        raise ValueError(PCA_NEEDS_PUBLIC)
    if public <= k:
        raise ValueError(f"--basis pca is fitted on the public images: {k} components need more than {k} of them "
                         f"(--public gives {public})")


def _check_queries(opts: LabelOptions, n: int) -> None:
    """ValueError naming the option when ``--queries`` (or the Sup default) cannot be planned for ``n`` images."""
    if opts.augment == "sup" and n < 2:
        raise ValueError(f"--augment sup needs at least 2 images, the folder has {n}; use --augment rand or none")
    if opts.queries is None or opts.augment == "none":
        return
    if opts.augment == "sup":
        check_sup_queries(opts.queries, n, option="--queries", instead="--augment rand")
    most = defaults.MAX_QUERIES_PER_RECORD * max(n, 1)
    if opts.queries > most:
        raise ValueError(f"--queries {opts.queries} is more than {defaults.MAX_QUERIES_PER_RECORD} per image "
                         f"({most} for {n} images); each query is paid and trained on")


def basis_asked(basis: str | None, coefficients: int | None, clip_norm: float | None) -> str | None:
    """The basis options name: ``--basis`` if given, ``dct`` when ``--coefficients`` or ``--clip-norm`` is,
    else None (a default applies)."""
    if basis is not None:
        return basis
    if coefficients is not None or clip_norm is not None:
        return "dct"
    return None


def resolve_basis(opts: SharedOptions) -> str:
    """The basis the options stand for: :func:`basis_asked`, else :func:`ldpclient.privacy.defaults.basis` for
    the mechanism, epsilon unit, ``--reduce`` and epsilon."""
    return basis_asked(opts.basis, opts.coefficients, opts.clip_norm) or privacy_defaults.basis(
        opts.mechanism, opts.epsilon_unit, opts.reduce, opts.epsilon
    )


def shape_settings(
    input_shape: tuple[int, ...],
    given_reduce: int | None,
    given_postprocess: str | None,
    basis: str,
    epsilon: float | None = None,
    epsilon_unit: str = "record",
) -> tuple[int, str]:
    """``(reduce, postprocess)`` for records of ``input_shape``: the given values, else the defaults (what
    ``label`` uses, and what ``audit`` assumes a run used). ``reduce``: 1 for a coefficient basis, else
    :func:`ldpclient.privacy.defaults.reduction`. ``postprocess``: :func:`ldpclient.transfer.defaults.postprocess`
    at the per-element epsilon of a pooled release of the run's ``epsilon`` in ``epsilon_unit`` (None: not known),
    which :func:`ldpclient.privacy.defaults.epsilon_element` gives here: the transfer gets that level, never the
    run's epsilon."""
    if given_reduce is not None:
        reduce = int(given_reduce)
    else:
        reduce = privacy_defaults.reduction(input_shape) if basis == "pool" else 1
    if given_postprocess is not None:
        return reduce, given_postprocess
    level = None
    if epsilon is not None and basis == "pool":
        level = privacy_defaults.epsilon_element(epsilon, epsilon_unit, input_shape, reduce)
    return reduce, defaults.postprocess(input_shape, reduce, level, basis)


def settle_release(opts: SharedOptions, input_shape: tuple[int, ...]) -> ReleaseSettings:
    """The release settings of ``opts`` for records of ``input_shape``: ``basis`` (:func:`resolve_basis`), then
    ``reduce`` and ``postprocess`` from the shape where the user gave none (:func:`shape_settings`)."""
    basis = resolve_basis(opts)
    reduce, post = shape_settings(input_shape, opts.reduce, opts.postprocess, basis, opts.epsilon, opts.epsilon_unit)
    return ReleaseSettings(basis, reduce, post)


def build_mechanism(
    opts: SharedOptions,
    release: ReleaseSettings,
    value_range: tuple[float, float],
    record_shape: tuple[int, ...],
    pca: PcaBasis | None = None,
) -> Mechanism:
    """The mechanism the options name, in the basis and pooling of ``release``, on the teacher's value range,
    checked against the record shape; ``--basis pca`` releases in ``pca`` (None: planned, unfitted;
    :meth:`RunPlan.with_images` fits it).

    At ``--epsilon 0`` (data-free) it is :func:`build_free_query_mechanism`'s: only blank images pass through it.
    """
    if opts.data_free:
        return build_free_query_mechanism(opts, release, value_range, record_shape)
    return mechanism_for(
        opts.mechanism, epsilon=opts.epsilon, per=opts.epsilon_unit, delta=opts.delta, reduce=release.reduce,
        value_range=value_range, record_shape=record_shape, secure=opts.secure,
        allow_large_delta=opts.allow_large_delta, allow_weak_privacy=opts.allow_weak_privacy,
        basis=release.basis, coefficients=opts.coefficients, clip_norm=opts.clip_norm, pca=pca,
    )


def build_free_query_mechanism(
    opts: SharedOptions,
    release: ReleaseSettings,
    value_range: tuple[float, float],
    record_shape: tuple[int, ...],
) -> Mechanism:
    """The mechanism that noises a data-free run's blank queries (``--epsilon 0``, ``--baseline``): the options'
    mechanism (:func:`~ldpclient.privacy.defaults.free_query_mechanism`) at
    :func:`~ldpclient.privacy.defaults.free_query_epsilon` per record, pooled as the run pools;
    a ``dct`` run's baseline pools by the shape's default factor (the free level was measured so).

    Its inputs are public blank images, so its epsilon is a noise level, not a cost (the guarantee reads 0).
    """
    reduce, _ = free_query_shape_settings(release, record_shape)
    return mechanism_for(
        privacy_defaults.free_query_mechanism(opts.mechanism), epsilon=privacy_defaults.free_query_epsilon(),
        per="record", delta=opts.delta, reduce=reduce,
        value_range=value_range, record_shape=record_shape, secure=opts.secure, allow_large_delta=True,
    )


def free_query_shape_settings(release: ReleaseSettings, record_shape: tuple[int, ...]) -> tuple[int, str]:
    """``(reduce, postprocess)`` of the blank queries: the run's own (``release``) for a pooled run, the shape's
    pooled defaults for a coefficient basis (the data-free study measured blank queries pooled, at those
    settings)."""
    if release.basis == "pool":
        return release.reduce, release.postprocess
    return shape_settings(record_shape, None, None, "pool", privacy_defaults.free_query_epsilon(), "record")


def resolve_noise_decoding(opts: SharedOptions, mechanism: Mechanism, record_shape: tuple[int, ...],
                           public: int) -> Decoding:
    """What ``noise --decode`` does beside ``public`` public images: what ``label`` resolves for the same images
    (the check's held-out images, which the decoder does not learn from), or why it cannot."""
    return decoding(opts.decode, mechanism, record_shape, public)


__all__ = ["PCA_NEEDS_PUBLIC", "BaselinePlan", "ReleaseSettings", "RunPlan", "basis_asked",
           "build_free_query_mechanism", "build_mechanism", "free_query_shape_settings", "resolve_basis",
           "resolve_noise_decoding", "resolve_plan", "settle_release", "shape_settings"]
