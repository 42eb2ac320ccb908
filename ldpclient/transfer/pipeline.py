"""KnowledgeTransfer: label private records with a remote teacher that never sees them.

The orchestrator: it resolves the settings once (:mod:`.resolve`), makes each run's
:class:`~.context.RunContext` and calls the stages (:mod:`.stages`) in order, resumable through the query
journal of a :class:`~ldpclient.teachers.client.QueryClient`.

Modes (``mode=``): ``"ldpkit"`` (default: the stages); ``"sidp"`` (send the n post-processed releases and
take the teacher's labels as the answer, no student); ``"data-free"`` (the same pipeline and query budget with
every private record replaced by a blank record released with ``public=True``: epsilon 0; what a run gains over
it is what the private data contributed).

The result's guarantee is the cost of releasing one record once; augmentation and post-processing add nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..io.records import Records, as_record_source
from ..names import Mode
from ..privacy.base import Mechanism
from .augment import QueryPlan
from .context import LabelClient, RunContext, StageRunner, check_wiring, checked_records, teacher_and_client
from .mirror_check import MirrorCheck
from .query_book import PublicQueries, QueryBook
from .resolve import Facts, Resolved, check_given, resolve
from .result import TransferResult
from .result_cache import ResultCache
from .rounds import round_ends
from .settings import AdaptationSettings, Given, PlanSettings, TrainingSettings
from .stages.adapt import adapt_student
from .stages.keep import result_key, save_student
from .stages.label import label_queries
from .stages.outcome import outcome, training_summary
from .stages.predict import mean_output, predict_records, score_held_out
from .stages.queries import Prepared, plan_for, prepare_queries
from .stages.release import Released, release_records
from .stages.train import Trained, query_rounds, train_student
from .student import LabelStore, Progress, StudentMean

if TYPE_CHECKING:
    from ..privacy.ledger import Ledger


class KnowledgeTransfer:
    """Wires release -> post-process -> plan -> teacher labels -> student -> labels.

    ``teacher``: a Teacher (``metadata()``, ``classify()``), or a :class:`~ldpclient.teachers.QueryClient`
    (batching, retries, cost, journal) that talks to one; ``client=`` beside a teacher must talk to that same
    teacher. ``mechanism``: the LDP mechanism for the private records. ``ledger``: optional Ledger (records are
    then charged/reused per image under ``scope``, default the teacher's identity, its ``journal_scope``).
    ``mode``: ``ldpkit`` | ``sidp`` | ``data-free``.

    ``plan``, ``training``, ``adaptation``: :class:`~.settings.PlanSettings`, :class:`~.settings.TrainingSettings`
    and :class:`~.settings.AdaptationSettings` (defaults: the CLI's), kept as given in :attr:`given` and resolved
    against each run's records and public images (:meth:`resolved`), once for the same records and images:
    ``resolved``, the settings a caller resolved already (:func:`~.resolve.resolve` of the same settings), is
    used for the facts it was resolved for.
    ``seed``: plan and training seed (the release noise still comes from the OS CSPRNG unless
    ``release_generator`` is given, for tests and benchmarks only). ``progress(stage, done, total, metrics)``:
    stages ``release``, ``label``, ``train``, ``epoch``, ``round`` (query rounds), ``warmup``, ``adapt``,
    ``predict``. ``stages``: a :class:`~.context.StageRunner` that releases the private records and predicts on
    all of them elsewhere (:mod:`ldpclient.cluster`: a Ray cluster; needs ``ledger``). ``result_cache``: where a
    run keeps its trained result, found again by a run that would train on the same.
    """

    def __init__(
        self, teacher: object, mechanism: Mechanism, *, ledger: Ledger | None = None, scope: str | None = None,
        mode: Mode | str = Mode.LDPKIT, plan: PlanSettings | None = None, training: TrainingSettings | None = None,
        adaptation: AdaptationSettings | None = None, seed: int = 0, release_generator: torch.Generator | None = None,
        progress: Progress | None = None, client: LabelClient | None = None, stages: StageRunner | None = None,
        result_cache: ResultCache | None = None, resolved: Resolved | None = None,
    ) -> None:
        check_wiring(mode, mechanism, stages, release_generator)
        self.teacher, self.client = teacher_and_client(teacher, client)
        self.given = Given(plan or PlanSettings(), training or TrainingSettings(), adaptation or AdaptationSettings())
        self.mechanism, self.ledger, self.scope, self.seed = mechanism, ledger, scope, int(seed)
        self.mode = Mode(mode)
        self.release_generator, self.progress = release_generator, progress
        self.stages, self.result_cache = stages, result_cache
        check_given(self.given, self.mode, elsewhere=stages is not None)
        self._prepared = Prepared()
        #: the settings resolved last (for the facts they hold): a run resolves once
        self._resolved = resolved

    def resolved(self, records: Records, public: Records | None = None) -> Resolved:
        """The settings a run on ``records`` (and ``public``) uses, every default resolved (:mod:`.resolve`)."""
        return self._context(records, public).settings

    def _context(self, records: Records, public: Records | None = None) -> RunContext:
        """A run's context over ``records`` beside ``public`` images, checked against the teacher's input shape
        (ValueError), its settings resolved on them."""
        meta = self.teacher.metadata()
        source = checked_records(records, meta)
        n_public = len(as_record_source(public)) if public is not None else 0
        facts = Facts(len(source), tuple(source.record_shape), n_public, meta)
        if self._resolved is None or self._resolved.facts != facts:
            self._resolved = resolve(self.given, facts, mechanism=self.mechanism, mode=self.mode)
        settings = self._resolved
        return RunContext(self.teacher, self.client, self.mechanism, settings, self.given, source, meta,
                          mode=self.mode, seed=self.seed, ledger=self.ledger, scope=self.scope,
                          release_generator=self.release_generator, progress=self.progress, stages=self.stages,
                          result_cache=self.result_cache)

    def query_plans(self, records: Records, public: Records | None = None) -> list[QueryPlan]:
        """The query plans :meth:`run` would have the teacher label for ``records`` (and ``public``), in the order it
        sends them: the public images' and the mirror check's copies', then the private (or blank) queries'. Each
        batch ``b`` of a plan is sent as ``plan.batch_id(b)`` (a journal that answered it is not paid again).
        Nothing is released, sent or charged; the public images are read (their batch ids come from their values)
        and what that prepared is kept for :meth:`run` on the same ``public``."""
        plan, prepared = self._plans_for(records, public)
        return [plan] if prepared is None else [s.plan for s in prepared.segments()] + [plan]

    def mirror_check(self, records: Records, public: Records) -> MirrorCheck | None:
        """The mirrored and shifted copies of ``public`` images that :meth:`run` would send for the mirror check
        (None: it sends none), prepared as :meth:`query_plans` prepares them. Nothing is released or sent."""
        prepared = self._plans_for(records, public)[1]
        return prepared.check if prepared is not None else None

    def _plans_for(self, records: Records, public: Records | None) -> tuple[QueryPlan, PublicQueries | None]:
        """The private (or blank) queries' plan for ``records``, and the public images' queries (None without
        them, or in ``sidp`` mode), prepared once for :meth:`run`."""
        ctx = self._context(records, public)
        plan = plan_for(ctx)
        if public is None or self.mode == Mode.SIDP:
            return plan, None
        return plan, self._prepared.public(ctx, public, plan)

    def records_to_release(self, records: Records, public: Records | None = None) -> np.ndarray | None:
        """The private records this run releases (and charges), sorted indices, when its queries use only some of
        them (a query budget the folder could carry many times over: LDPKiT-Sup pairs or Rand copies of fewer
        records than there are); None when it releases them all (every record is used, SIDP, data-free). The plan
        decides it from the record count, the query budget and the seed alone, never from the records' values;
        every record is labelled by the student either way. Nothing is released or charged; ``public``: the images
        :meth:`run` will get beside them (the settings are resolved for both)."""
        return self._prepared.records_used(plan_for(self._context(records, public)), self.mode)

    def run(self, records: Records, public: Records | None = None) -> TransferResult:
        """Label ``records``: float ``(N, *teacher input shape)`` in the teacher's value range,
        as a tensor or a :class:`~ldpclient.io.records.RecordSource` (read in batches).

        ``public``: images the user declared not private, in the same shape and units: each is sent once as
        it is (no noise, no charge, never in the ledger), its answer trains the student beside the private
        queries' (and anchors the adaptation). Not with ``mode="sidp"`` (no student). With ``flip`` None, mirrored
        and shifted copies of up to 200 of them (when there are 100 or more) are sent too, to decide whether
        training mirrors rows (:mod:`~ldpclient.transfer.mirror_check`)."""
        ctx = self._context(records, public)
        if public is not None and self.mode == Mode.SIDP:
            raise ValueError("public images train a student: SIDP (augment 'none') has none")
        plan = plan_for(ctx)
        used = self._prepared.records_used(plan, self.mode)  # only the records a query is made from are released
        released = release_records(ctx, used)
        book = prepare_queries(ctx, released.release, plan, used)
        if public is not None:
            book.public = self._prepared.public(ctx, public, book.plan)
        ends = round_ends(book.plan.num_batches, ctx.settings.query_rounds if self.mode != Mode.SIDP else 1)
        store, public_counts = label_queries(ctx, book, ends[0])
        if self.mode == Mode.SIDP:
            return TransferResult(labels=torch.from_numpy(store.get(np.arange(ctx.n))), confidences=None, student=None,
                                  **outcome(ctx, released, book, store, public_counts))
        key = result_key(ctx, released, book, store) if len(ends) == 1 else None
        kept = self.result_cache.load(self.mode, key) if self.result_cache and key else None
        if kept is not None:  # the same records, releases, answers and settings: the result trained before
            return kept.restore(outcome(ctx, released, book, store, public_counts), book.answers_apart(store))
        result, trained = self._learn(ctx, released, book, store, ends, public_counts)
        if self.result_cache is not None and key is not None:
            self.result_cache.save(self.mode, key, result, trained.student_name, trained.student_kwargs)
        return result

    def _learn(
        self, ctx: RunContext, released: Released, book: QueryBook, store: LabelStore, ends: list[int],
        public_counts: dict[str, int],
    ) -> tuple[TransferResult, Trained]:
        """Steps 4-6 on the first round's answers: train (in rounds, each next round sent while the student still
        learns), the other students on every answer, adapt each, save, label the records. Also the student that
        learnt from the plan's answers (the first of the students)."""
        trained = train_student(ctx, book, store)
        trained, rounds = query_rounds(ctx, book, store, trained, ends)
        members = [trained, *(train_student(ctx, book, store, member)
                              for member in range(1, ctx.settings.students))]  # each on every answer
        adapted = [adapt_student(ctx, m, book, store) for m in members]
        student = trained.trainer.model if len(members) == 1 else StudentMean(m.trainer.model for m in members)
        save_student(ctx, trained, student, book.plan, released)
        predicted = predict_records(ctx, members, adapted, book, store)
        before = [a.unadapted for a in adapted if a.unadapted is not None]  # the students' outputs, unadapted
        return TransferResult(
            labels=predicted.labels, confidences=predicted.confidences, student=student,
            **outcome(ctx, released, book, store, public_counts), history=trained.history,
            unadapted_labels=mean_output(before).argmax(1) if before and len(before) == len(adapted) else None,
            adaptation=adapted[0].adaptation, training=training_summary(ctx, trained, len(members)),
            public_held_out=score_held_out(ctx, members, book.public, store), query_rounds=rounds,
            answers_apart=book.answers_apart(store),
        ), trained


__all__ = ["KnowledgeTransfer"]
