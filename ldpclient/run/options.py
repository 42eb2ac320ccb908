"""The options of ``ldpclient label`` and ``ldpclient noise`` as checked dataclasses: what the user asked for,
validated, with messages naming the CLI flag a user would change (``--epsilon``, ``--queries``). Nothing here
resolves a default that depends on the teacher or the data: :mod:`ldpclient.run.plan` does, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Mapping, Optional

import torch

from ..cluster.engine import check_cluster_options
from ..io.folders import DEFAULT_MAX_PIXELS
from ..names import AUGMENTATIONS, BASES, DECODINGS, EPSILON_UNITS, PRETRAINED_STUDENTS, choice_list
from ..privacy import defaults as privacy_defaults
from ..privacy.mechanisms import delta_mechanism_names, mechanism_names
from ..report.label_files import label_format_for
from ..state.locations import StateLocations, check_state_url
from ..transfer import defaults
from .facts import TeacherFacts
from .network import NetworkOptions

if TYPE_CHECKING:
    from ..transfer.settings import Given


@dataclass(frozen=True, kw_only=True)
class SharedOptions:
    """The options ``label`` and ``noise`` share (keyword-only): the mechanism and its privacy settings,
    the augmentation and post-processing, the ledger's per-record cap, the state (its directory, and a
    PostgreSQL database with the ledger's key file), the image size limit,
    the seed, the network, the model facts, the public images and the release decoder.

    ``epsilon`` is in nats, per ``epsilon_unit`` (``element`` or ``record``); ``privacy_cap`` is a
    per-record epsilon cap enforced by the ledger over all runs; ``seed`` seeds *all* randomness
    including the privacy noise: tests only.
    """

    mechanism: str = privacy_defaults.mechanism()
    epsilon: float = privacy_defaults.epsilon()
    epsilon_unit: str = privacy_defaults.epsilon_unit()
    delta: Optional[float] = None
    secure: bool = privacy_defaults.secure()
    allow_large_delta: bool = False
    allow_weak_privacy: bool = False
    augment: str = defaults.augment()
    reduce: Optional[int] = None
    basis: Optional[str] = None  # None: privacy_defaults.basis() for these options (plan.settle_release)
    coefficients: Optional[int] = None
    clip_norm: Optional[float] = None
    postprocess: Optional[str] = None
    privacy_cap: Optional[float] = None
    state_dir: Optional[Path] = None
    state: Optional[str] = None  # a postgresql:// URL: the ledger, journal and plan seeds there (shared by hosts)
    ledger_key_file: Optional[Path] = None  # the ledger's key file (default: ledger.key in the state directory)
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: Optional[int] = None
    max_memory: Optional[float] = None
    network: NetworkOptions = NetworkOptions()
    facts: TeacherFacts = TeacherFacts()
    #: a folder of images declared not private: ``label`` sends each as it is (no noise, no charge); a release
    #: decoder decodes into them in both commands
    public: Optional[Path] = None
    #: the releases decoded into the public images: ``auto`` (where a label run's check says it
    #: helps), ``none`` or ``always`` (:data:`~ldpclient.names.DECODINGS`)
    decode: str = defaults.decode()
    #: leave out the public images that are near copies of private ones, each named in the report (else refuse the run)
    public_skip_copies: bool = False

    def state_locations(self, directory: Path) -> StateLocations:
        """Where this command's ledger, journal and plan seeds are, beside the state directory ``directory``."""
        return StateLocations(directory, self.state, self.ledger_key_file)

    #: What ``--epsilon 0`` stands for in this command (None: refused).
    zero_epsilon_means: ClassVar[str | None] = None

    @property
    def data_free(self) -> bool:
        """``--epsilon 0``: the teacher sees only blank images noised here (nothing private leaves the device);
        the clean images are used on this device alone, to adapt the student and to be labelled. Decided here
        only; the commands that refuse it (:attr:`zero_epsilon_means` None) never get this far."""
        return self.epsilon == 0

    def validate(self) -> None:
        """Raise ValueError naming the option for any value that cannot work."""
        self.network.validate()
        check_state_url(self.state)
        _check_mechanism_options(self.mechanism, self.epsilon, self.epsilon_unit, self.delta, self.reduce,
                                 zero_epsilon=self.zero_epsilon_means)
        _check_basis_options(self.basis, self.coefficients, self.clip_norm)
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"--augment must be one of {', '.join(AUGMENTATIONS)}, got {self.augment!r}")
        if self.postprocess is not None:
            _check_postprocess(self.postprocess)
        if self.decode not in DECODINGS:
            raise ValueError(f"--decode must be one of {', '.join(DECODINGS)}, got {self.decode!r}")
        if self.privacy_cap is not None and not (math.isfinite(self.privacy_cap) and self.privacy_cap > 0):
            raise ValueError(f"--privacy-cap must be a finite number > 0 (per-record epsilon), got {self.privacy_cap}")
        if self.max_memory is not None and not (math.isfinite(self.max_memory) and self.max_memory > 0):
            raise ValueError(f"--max-memory must be a number of GiB > 0, got {self.max_memory}")
        if self.seed is not None and not 0 <= self.seed < defaults.MAX_SEED:
            # torch, numpy and the plan all take it: a negative or huge seed would fail mid-run, after paying
            raise ValueError(f"--seed must be an integer from 0 to 2**63-1, got {self.seed}")


#: Most requests in flight at once (``--workers``): each holds a thread and a connection.
MAX_WORKERS = 64
#: The label options that stand for a bounded count of the transfer's settings, each checked against that
#: setting's range (:data:`ldpclient.transfer.settings.BOUNDS`): ``(option, setting, LabelOptions field)``.
COUNT_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--queries", "num_queries", "queries"), ("--batch-size", "query_batch_size", "batch_size"),
    ("--query-rounds", "query_rounds", "query_rounds"), ("--warmup", "warmup", "warmup"),
    ("--students", "students", "students"), ("--epochs", "epochs", "epochs"),
    ("--train-batch-size", "batch_size", "train_batch_size"),
)


@dataclass(frozen=True)
class LabelOptions(SharedOptions):
    """Everything ``ldpclient label`` needs except the token (secrets are passed separately); the
    options shared with ``noise`` are in :class:`SharedOptions`.

    ``price`` is money per query and ``money_cap`` the largest total spend for this
    teacher over all runs (journal). ``queries=None``: 20 per record, at least 500
    (bounded by the distinct Sup pairs).
    """

    #: the folder of private images; None: the records are handed over in memory (``label_run(records=...)``)
    private_dir: Optional[Path]
    teacher: str
    baseline: bool = False
    adapt: bool = defaults.adapt()
    queries: Optional[int] = None
    #: send the queries in up to this many doubling rounds, stopping where the student stops learning from them
    #: (:mod:`ldpclient.transfer.rounds`); 1: all at once
    query_rounds: int = defaults.query_rounds()
    batch_size: Optional[int] = None
    price: float = 0.0
    money_cap: Optional[float] = None
    student: Optional[str] = None  # None: defaults.student(input shape, public images or not), settled by the plan
    #: a file the student starts from (torchvision weights or a TorchScript feature extractor), frozen under a new
    #: head; None: random weights
    student_weights: Optional[Path] = None
    flip: Optional[bool] = None  # train the student on mirrored images too; None: the mirror check decides (--public)
    warmup: int = defaults.warmup()  # epochs of the rotation pretext on the clean private images before training
    students: int = defaults.students()  # students trained on the same answers; labels from their mean output
    epochs: int = defaults.epochs()
    output: Optional[Path] = Path("labels.csv")  # None: write no labels or report file (the library's front door)
    format: Optional[str] = None
    report: Optional[Path] = None
    workers: int = 1
    device: str = defaults.device()
    train_batch_size: int = defaults.train_batch_size()
    html: bool = False  # also write <output stem>.html: what was sent, the guarantee, counts, the student
    html_private: bool = False  # show the clean private images on that page too (implies html)
    dry_run: bool = False  # resolve and show the plan only: nothing decoded, noised, sent or charged
    #: ``auto`` or a Ray address: the release and the student's passes over every image on a Ray cluster
    #: (:mod:`ldpclient.cluster`; needs ``state``, refuses ``seed``); None: all here
    cluster: Optional[str] = None
    #: hand labels of some private images, to score the labels written: a ``file,label`` CSV (``--check``), or
    #: (the library) a mapping image name -> class name or index; read on this device only, never sent
    check: Optional[Path | Mapping[str, object]] = None

    zero_epsilon_means: ClassVar[str | None] = "data-free, nothing private sent"

    @property
    def html_path(self) -> Path | None:
        """Where ``--html`` writes its page: ``<output stem>.html`` beside the labels (None: no page)."""
        if not (self.html or self.html_private) or self.output is None:
            return None
        return self.output.with_name(self.output.stem + ".html")

    def transfer_settings(
        self, *, num_queries: int | None, query_batch_size: int | None, postprocess: str,
        public_repeats: int | None = None, crop: int | None = None, student: str | None = None,
    ) -> Given:
        """The ``KnowledgeTransfer`` settings these options stand for: ``postprocess`` as the plan settled it for
        the shape, the counts and the student as the run's plan settled them (or None: the options' own
        ``student`` and the transfer's defaults)."""
        from ..transfer.settings import AdaptationSettings, Given, PlanSettings, TrainingSettings

        return Given(
            plan=PlanSettings(augment=self.augment, num_queries=num_queries, postprocess=postprocess,
                              query_batch_size=query_batch_size, query_rounds=self.query_rounds,
                              decode=self.decode),
            training=TrainingSettings(student=student or self.student, student_weights=self.student_weights,
                                      epochs=self.epochs,
                                      batch_size=self.train_batch_size,
                                      device=self.device, public_repeats=public_repeats, crop=crop,
                                      flip=self.flip, warmup=self.warmup, students=self.students),
            adaptation=AdaptationSettings(adapt=self.adapt),
        )

    def folder(self) -> Path:
        """The folder of private images (ValueError when the records were to be handed over in memory)."""
        if self.private_dir is None:
            raise ValueError("no images to label: give a folder of images (PRIVATE_DIR) or the records themselves")
        return self.private_dir

    def validate(self) -> None:
        """Raise ValueError naming the option for any value that cannot work."""
        super().validate()
        check_cluster_options(self.cluster, state=self.state, seed=self.seed)
        self._check_numbers()
        self._check_student()
        self._check_outputs_and_prices()

    def _check_numbers(self) -> None:
        """The counts, ranges and money options within their bounds."""
        from ..transfer.settings import check_count

        for option, setting, name in COUNT_OPTIONS:
            check_count(setting, getattr(self, name), option)
        if not (math.isfinite(self.price) and self.price >= 0):
            raise ValueError(f"--price must be a finite number >= 0, got {self.price}")
        if self.money_cap is not None and not (math.isfinite(self.money_cap) and self.money_cap >= 0):
            raise ValueError(f"--money-cap must be a finite number >= 0, got {self.money_cap}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"--workers must be from 1 to {MAX_WORKERS}, got {self.workers}")

    def _check_student(self) -> None:
        """The student's options: a name that builds, and none given where no student is trained (SIDP, or a
        data-free run that must have one)."""
        if self.data_free and self.baseline:
            raise ValueError("--baseline sets a private run beside the data-free one; with --epsilon 0 the run is "
                             "already data-free")
        if self.data_free and self.augment == "none":
            raise ValueError("--epsilon 0 needs a student (--augment sup or rand): with --augment none every image "
                             "would get the teacher's answer to a blank query")
        from ..transfer.student import build_student

        try:
            with torch.random.fork_rng(devices=[]):  # a trial build: its init draws stay local
                if self.student is not None and self.student_weights is None:
                    build_student(self.student, num_classes=2)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"--student: {exc}") from None
        if self.augment == "none":  # SIDP: each release sent once, its answer is the label; no student to train
            for given, option in ((self.public is not None, "--public images train"),
                                  (self.student_weights is not None, "--student-weights starts"),
                                  (self.flip is not None, "--flip/--no-flip trains"),
                                  (self.warmup > 0, "--warmup trains"),
                                  (self.students > 1, "--students train"),
                                  (self.query_rounds > 1, "--query-rounds are judged by")):
                if given:
                    raise ValueError(f"{option} a student: --augment none (SIDP) has none")
        if self.student_weights is not None:
            self._check_weights()

    def _check_weights(self) -> None:
        """The weights file starts the student named (or one of its own architecture): read and checked here,
        before any image is read, noised or sent."""
        from ..transfer.pretrained import weights_info

        if self.student is not None and self.student not in PRETRAINED_STUDENTS:
            raise ValueError(f"--student-weights starts a {choice_list(PRETRAINED_STUDENTS)} student, not "
                             f"{self.student}")
        if self.cluster is not None:
            raise ValueError("--student-weights: a student from a weights file trains and labels on this machine, "
                             "not with --cluster")
        weights_info(self.student_weights, self.student)  # type: ignore[arg-type]

    def _check_outputs_and_prices(self) -> None:
        """The files written and read, the teacher named, and the price a money cap needs."""
        if (self.html or self.html_private) and self.output is None:
            raise ValueError("--html writes its page beside the labels: give an output file (output=...)")
        if self.output is not None:
            label_format_for(self.output, self.format)
            if self.output.exists() and self.output.is_dir():
                raise ValueError(f"--output {str(self.output)!r} is a directory; give a file name")
        if not self.teacher:
            raise ValueError("--teacher must be a URL or adapter name")
        if self.price and self.facts.token_priced:
            raise ValueError("give --price (per image) or --price-input-tokens/--price-output-tokens (per token), "
                             "not both")
        if self.money_cap is not None and self.price == 0 and not self.facts.token_priced:
            raise ValueError("--money-cap needs the price of a query: give --price (money per image queried); "
                             "without it every query counts as free and the cap could never stop a run")
        if isinstance(self.check, Path) and not self.check.is_file():
            raise ValueError(f"--check {str(self.check)!r} is not a file (a CSV of file,label rows)")


@dataclass(frozen=True)
class NoiseOptions(SharedOptions):
    """Options of ``ldpclient noise`` (see :func:`ldpclient.run.noise.run_noise`); the shared ones are in
    :class:`SharedOptions`."""

    private_dir: Path
    out: Path
    teacher: Optional[str] = None
    size: int = 28
    channels: int = 1
    preview: int = 8

    def validate(self) -> None:
        """Raise ValueError naming the option for any value that cannot work."""
        super().validate()
        if self.channels not in (1, 3):
            raise ValueError(f"--channels must be 1 or 3, got {self.channels}")
        if self.size < 1 or self.preview < 1:
            raise ValueError("--size and --preview must be >= 1")
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"--out {str(self.out)!r} exists and is not a directory")
        if self.public is not None and self.decode == "none" and self.basis != "pca":
            raise ValueError("--public is what a release decoder decodes into and what --basis pca is fitted on "
                             "here: give --decode always (or auto) or --basis pca, "
                             "or leave --public out")


def _check_mechanism_options(
    mechanism: str, epsilon: float, unit: str, delta: float | None, reduce: int | None, *, zero_epsilon: str | None
) -> None:
    if mechanism not in mechanism_names():
        raise ValueError(f"--mechanism must be one of {', '.join(mechanism_names())}, got {mechanism!r}")
    if not (math.isfinite(epsilon) and epsilon > 0) and not (zero_epsilon and epsilon == 0):
        zero = f" (or 0: {zero_epsilon})" if zero_epsilon else ""
        raise ValueError(f"--epsilon must be a finite number > 0{zero}, got {epsilon}")
    if unit not in EPSILON_UNITS:
        raise ValueError(f"--epsilon-unit must be {choice_list(EPSILON_UNITS)}, got {unit!r}")
    if delta is not None and not (0 < delta < 1):
        raise ValueError(f"--delta must be in (0, 1), got {delta}")
    if delta is not None and mechanism not in delta_mechanism_names():
        raise ValueError(f"--delta applies to {', '.join(delta_mechanism_names())} only, not to --mechanism "
                         f"{mechanism}")
    if reduce is not None and reduce < 1:
        raise ValueError(f"--reduce must be >= 1, got {reduce}")


def _check_basis_options(basis: str | None, coefficients: int | None, clip_norm: float | None) -> None:
    if basis is not None and basis not in BASES:
        raise ValueError(f"--basis must be {choice_list(BASES)}, got {basis!r}")
    if coefficients is not None and coefficients < 1:
        raise ValueError(f"--coefficients must be >= 1, got {coefficients}")
    if clip_norm is not None and not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(f"--clip-norm must be a finite number > 0, got {clip_norm}")
    if basis == "pool" and (coefficients is not None or clip_norm is not None):
        raise ValueError("--coefficients and --clip-norm apply to --basis dct and pca only")


def _check_postprocess(spec: str) -> None:
    from ..transfer.postprocess import parse_postprocess

    try:
        parse_postprocess(spec)
    except ValueError as exc:
        raise ValueError(f"--postprocess: {exc}") from None
