"""What a run returns beside its labels: the fields every :class:`~..result.TransferResult` has, and how its
student was trained."""

from __future__ import annotations

from ...io.document import JSONDict
from ...names import Mode
from ...privacy.public import public_seed
from ..context import RunContext
from ..pretrained import PretrainedStudent
from ..query_book import QueryBook
from ..release_shift import release_shift
from ..result import Outcome, TrainingSummary
from ..student import LabelStore
from .release import Released
from .train import Trained


def outcome(
    ctx: RunContext, released: Released, book: QueryBook, store: LabelStore, public_counts: dict[str, int]
) -> Outcome:
    """The guarantee, the counts (releases, queries labelled (declined ones apart), queries the plan holds (public
    segments included), the plan's batches sent, the public segments'), the timings, the teacher's answers per
    class, the plan, a sample of what was sent and the private releases' shift from the public images, as they
    stand now."""
    return Outcome(guarantee=released.release.guarantee, mode=ctx.mode,
                   counts={**released.counts, "queries": store.num_labelled, "queries_planned": book.labelled_total,
                           "batches": book.batches_sent, **public_counts},
                   timings=ctx.timings, teacher_label_histogram=store.histogram().tolist(), plan=book.plan,
                   sent_sample=book.sent_sample(store), decoding=book.decoding,
                   release_shift=_release_shift(ctx, released, book))


def _release_shift(ctx: RunContext, released: Released, book: QueryBook) -> JSONDict | None:
    """:func:`~..release_shift.release_shift` of the private releases from the public images (None without public
    images, in the data-free mode, or for releases of pixels)."""
    if book.public is None or ctx.mode == Mode.DATA_FREE:
        return None
    public = book.public.images.built_rows().release.values
    shift = release_shift(ctx.mechanism, public, released.release.values, seed=public_seed(public))
    return shift.as_dict() if shift is not None else None


def training_summary(ctx: RunContext, trained: Trained, students: int) -> TrainingSummary:
    """How the student was trained (:attr:`~..result.TransferResult.training`): its zoo name, the shift and mirror
    of its rows, the warm-up epochs, how many students, what the mirror check found, the weights file it started
    from."""
    model = trained.trainer.model
    return TrainingSummary(student=trained.student_name, crop_pixels=trained.crop_pixels, flip=trained.flip,
                           warmup_epochs=ctx.settings.warmup, students=students,
                           mirror_check=trained.mirror_check.as_dict() if trained.mirror_check is not None else None,
                           weights=model.info.as_dict() if isinstance(model, PretrainedStudent) else None)


__all__ = ["outcome", "training_summary"]
