"""The public images of a run (``--public``, or records handed over): loaded beside the private ones, and never
one of them. A public image that is a private image, or a near copy of one (by its file's bytes, its pixels, or
as the ledger knows the images it charged), is refused before anything is sent, or left out with
``--public-skip-copies`` and named in the report.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Iterator

import torch

from ..io.folders import Discovery, Skipped
from ..io.records import RecordSource, SubsetRecords, iter_batches, source_ids
from .images import Images, KeptImages, given_records, spool

if TYPE_CHECKING:
    from ..privacy.guarantee import Domain
    from ..privacy.ledger import Ledger
    from ..transfer.mirror_check import MirrorCheck
    from ..transfer.pipeline import KnowledgeTransfer
    from .handoffs import RunSetup

__all__ = ["NAMED_COPIES", "known_private", "load_public", "public_checked", "public_overlap", "public_where",
           "refuse_known_private", "refuse_overlap", "without_copies"]


def load_public(
    setup: RunSetup, private: RecordSource, given: RecordSource | None, found: Discovery | None

) -> Images | None:
    """The images declared public (``given``, or the ``--public`` folder's listing ``found``) in the teacher's
    shape and value range, spooled like the private ones; None without any. ValueError when one of them is also
    a private image (:func:`public_overlap`): nothing private is ever sent without noise because it was called
    public."""
    meta = setup.meta
    if given is not None:
        public: Images = given_records(setup, given)
    elif found is not None:
        public = spool(setup, found, "public")
    else:
        return None
    try:
        refuse_overlap(private, public, (float(meta.value_range[0]), float(meta.value_range[1])),
                       public_where(setup))
    except BaseException:
        public.close()
        raise
    return public


def refuse_overlap(private: RecordSource, public: Images, value_range: tuple[float, float], where: str) -> None:
    """ValueError naming a ``public`` image that is also one of the ``private`` records (:func:`public_overlap`):
    nothing private is ever sent without noise, or learnt from, because it was called public."""
    both = public_overlap(private, public.records, value_range)
    if both:
        name = public.printable_paths[both[0]]
        raise ValueError(f"{where}: {len(both)} image(s) are also in the private images (e.g. {name!r}); an "
                         "image cannot be both public and private: remove it from one of them")


def public_where(setup: RunSetup) -> str:
    """How messages name the public images: the ``--public`` folder, or the records handed over."""
    return f"--public {str(setup.opts.public)!r}" if setup.opts.public is not None else "the public records"


#: Public images a refusal names on the terminal (the report's ``public_skipped`` lists every one left out).
NAMED_COPIES = 5


def known_private(ledger: Ledger, public: Images, *, domain: Domain, private: Images | None = None,
                  check: MirrorCheck | None = None) -> dict[int, str]:
    """The public images (``public``: their ``records``) that are private images, by index, each with the reason
    in words: charged before, from whatever folder, or a near copy of an image the ledger charged or of one of
    ``private`` (this run's private images, named by their files), as they are or mirrored, turned or inverted
    (``Ledger.private_copies``); or one whose copy the mirror check would send (``check``: a
    :class:`~ldpclient.transfer.mirror_check.MirrorCheck`, or None) is such a copy."""
    n = len(public.records)
    known = ledger.private_copies(public.records, domain=domain,
                                  private=private.records if private is not None else None,
                                  private_names=private.printable_paths if private is not None else None,
                                  more=check.images if check is not None else None)
    own = {k: why for k, why in known.items() if k < n}
    for k, why in known.items():  # the check's copies: named by the public image each was made from
        if k >= n:
            assert check is not None  # found beyond the images: among the check's copies
            own.setdefault(int(check.sample[(k - n) % check.size]), f"its mirror check's copy is {why}")
    return dict(sorted(own.items()))


def refuse_known_private(public: Images, copies: dict[int, str], where: str) -> None:
    """ValueError (before anything is sent) naming the public images ``copies`` found private
    (:func:`known_private`), the first :data:`NAMED_COPIES` with the private image each copies."""
    if not copies:
        return
    named = "; ".join(f"{public.printable_paths[k]!r}: {why}" for k, why in list(copies.items())[:NAMED_COPIES])
    more = f"; and {len(copies) - NAMED_COPIES} more" if len(copies) > NAMED_COPIES else ""
    raise ValueError(
        f"{where}: {len(copies)} image(s) are private images ({named}{more}); nothing was sent: a private image, or "
        "a copy of one, is never sent as public: remove them from the public images, or give --public-skip-copies "
        "to leave them out (each is then listed in the report)")


def without_copies(public: Images, copies: dict[int, str]) -> Images:
    """``public`` less the images ``copies`` (:func:`known_private`), each named in ``skipped`` with its reason."""
    keep = [k for k in range(len(public.records)) if k not in copies]
    whole = public.whole if isinstance(public, KeptImages) else public
    left_out = tuple(Skipped(public.paths[k], f"not sent: {why}") for k, why in copies.items())
    return KeptImages(public.root, tuple(public.paths[k] for k in keep),
                       tuple(sorted(public.skipped + left_out, key=lambda s: s.path)),
                       SubsetRecords(public.records, keep), whole)


def public_overlap(private: RecordSource, public: RecordSource, value_range: tuple[float, float]) -> list[int]:
    """Indices of the ``public`` records that are also ``private`` records: the same source id (a file's
    SHA-256, when both sources have them) or the same values on the 8-bit scale of ``value_range`` at the
    teacher's shape (the same picture in another file or format)."""
    by_id = source_ids(private, [0]) is not None and source_ids(public, [0]) is not None
    lo, hi = value_range

    def keys(source: RecordSource) -> Iterator[tuple[int, bytes]]:
        for idx, chunk in iter_batches(source, 1024):
            levels = ((chunk.double() - lo) / (hi - lo)).clamp(0, 1).mul(255).round().to(torch.uint8).numpy()
            for k, row in zip(idx.tolist(), levels, strict=True):
                yield k, b"pixels:" + hashlib.sha256(row.tobytes()).digest()
            if by_id:
                ids = source_ids(source, idx) or []
                for k, i in zip(idx.tolist(), ids, strict=True):
                    yield k, b"source:" + (i if isinstance(i, bytes) else str(i).encode())

    private_keys = {key for _, key in keys(private)}
    return sorted({k for k, key in keys(public) if key in private_keys})


def public_checked(
    setup: RunSetup, ledger: Ledger, transfer: KnowledgeTransfer, images: Images, public: Images | None
) -> Images | None:
    """``public`` once no public image is a private one (:func:`known_private`): those that are left out with
    ``--public-skip-copies`` (and the rest checked again, with the mirror check's copies of the rest; a ``--basis
    pca`` run, whose basis was fitted on them all, is refused), else the run refused (ValueError) before anything is
    sent."""
    if public is None:
        return None
    domain = setup.mechanism.domain
    copies = known_private(ledger, public, domain=domain, private=images,
                           check=transfer.mirror_check(images.records, public.records))
    if copies and setup.opts.public_skip_copies:
        if setup.plan.release.basis == "pca":  # fitted on every public image: no private one may have shaped it
            raise ValueError(f"{public_where(setup)}: {len(copies)} image(s) are near copies of private images, and "
                             "--basis pca was fitted on them; remove them from the public images")
        public = without_copies(public, copies)
        if not len(public.records):
            raise ValueError(f"{public_where(setup)}: every public image is a private image or a copy of one; "
                             "nothing was sent")
        copies = known_private(ledger, public, domain=domain, private=images,
                               check=transfer.mirror_check(images.records, public.records))
    refuse_known_private(public, copies, public_where(setup))
    return public
