"""The images a label run works on: the private ones (a folder listed, then decoded into a spool file, or records
handed over in memory) and the public ones sent beside them, all in the teacher's shape and value range, named as
the labels file names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ..io.folders import (
    DecodedFolder,
    Discovery,
    SpooledImages,
    discover_images,
    printable_path,
    spool_private_folder,
    to_value_range,
)
from ..io.records import MappedRecords, RecordSource, source_ids

if TYPE_CHECKING:
    from ..privacy.ledger import Ledger
    from .handoffs import RunSetup
    from .options import LabelOptions

__all__ = ["Found", "GivenImages", "Images", "KeptImages", "find_images", "given_records", "image_counts",
           "image_names", "show_ledger", "spool"]


@dataclass(frozen=True)
class GivenImages(DecodedFolder):
    """Records handed over in memory (``label_run(records=...)``): named ``0..N-1``, nothing skipped."""

    records: RecordSource

    def close(self) -> None:
        """Nothing to release: the caller owns the records."""


@dataclass(frozen=True)
class KeptImages(DecodedFolder):
    """Public images without those found private: ``records`` the rest of ``whole``'s, ``skipped`` with each one left
    out and the private image it copies."""

    records: RecordSource
    whole: Union[SpooledImages, GivenImages]

    def close(self) -> None:
        self.whole.close()


#: The images a run labels (or sends as public): a folder spooled to disk, or records handed over in memory; public
#: images may have some left out (``KeptImages``).
Images = Union[SpooledImages, GivenImages, KeptImages]


@dataclass(frozen=True)
class Found:
    """The image files of the private and ``--public`` folders, listed once, before anything is decoded: the plan
    counts them and the decoding reads them (None where records were handed over, or without ``--public``)."""

    private: Discovery | None
    public: Discovery | None


def find_images(opts: LabelOptions, records: RecordSource | None, public: RecordSource | None) -> Found:
    return Found(
        private=None if records is not None else discover_images(opts.folder()),
        public=None if public is not None or opts.public is None else discover_images(opts.public,
                                                                                      what="--public folder"),
    )


def image_names(found: Found, records: RecordSource | None) -> tuple[str, ...]:
    """The private images' names as the labels file writes them, before anything is decoded."""
    if records is not None:
        return tuple(str(i) for i in range(len(records)))
    assert found.private is not None
    return tuple(printable_path(f) for f in found.private.files)


def image_counts(found: Found, records: RecordSource | None, public: RecordSource | None) -> tuple[int, int]:
    """Private and public images to plan for, before anything is decoded: the records given, or the image files
    found (files that turn out undecodable are skipped later, and the plan follows: ``RunPlan.with_counts``)."""
    n = len(records) if records is not None else len(found.private.files if found.private is not None else ())
    if public is not None:
        return n, len(public)
    return n, len(found.public.files) if found.public is not None else 0


def given_records(setup: RunSetup, records: RecordSource) -> GivenImages:
    """The caller's records (``[0, 1]`` units) in the teacher's value range, read lazily, with their source ids."""
    if tuple(records.record_shape) != tuple(setup.shape):
        raise ValueError(
            f"records of shape {tuple(records.record_shape)} do not match the teacher's input shape {setup.shape}"
        )
    if len(records) < 1:
        raise ValueError("no records to label")
    meta, integer = setup.meta, setup.mechanism.domain.integer
    source = MappedRecords(records, lambda r: to_value_range(r, meta.value_range, integer=integer))
    return GivenImages(Path("<records>"), tuple(str(i) for i in range(len(records))), (), source)


def show_ledger(ledger: Ledger, records: RecordSource) -> None:
    """Tell ``ledger`` what each decoded image file shows (:meth:`~ldpclient.privacy.ledger.Ledger.same_images`),
    before anything is checked or charged: another file of an image it knows is then summed under that image.
    Records without their files' contents (handed over in memory) are keyed by their values already."""
    content_ids = getattr(records, "content_ids", None)
    if content_ids is None or not getattr(records, "has_content_ids", False):
        return
    for idx in range(0, len(records), 4096):
        chunk = list(range(idx, min(idx + 4096, len(records))))
        ids = source_ids(records, chunk)
        if ids is None:
            return
        ledger.same_images(ids, content_ids(chunk))


def spool(setup: RunSetup, found: Discovery, stage: str) -> SpooledImages:
    """Decode the listed images at the teacher's shape, in its value range, into a spool file in the state
    directory (an unlinked temporary file: memory O(chunk), nothing left behind), under a progress bar named
    ``stage``; the caller closes it."""
    opts, meta, integer = setup.opts, setup.meta, setup.mechanism.domain.integer
    with setup.timer.stage("loading"), setup.ui.stage(stage, None) as bar:
        return spool_private_folder(
            found, setup.shape, convert=lambda r: to_value_range(r, meta.value_range, integer=integer),
            directory=setup.state, max_pixels=opts.max_pixels, progress=lambda d, t: bar.update(d, total=t),
        )
