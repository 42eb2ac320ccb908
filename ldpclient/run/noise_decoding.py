"""``ldpclient noise --decode``: write the releases decoded where ``ldpclient label`` sends them decoded.

The decoder is the label run's (:mod:`ldpclient.transfer.decoder_store`): fitted to the same ``--public`` images,
held out and seeded by their values alone, so both commands name the same decoder. ``always`` decodes; ``auto``
follows the verdict a label run's check kept for that decoder and teacher, and writes the releases as they are
where none is kept (``noise`` asks the teacher nothing). A public image that is a private one, or a near copy of
one, is refused as ``label`` refuses it (or left out and named, with ``--public-skip-copies``): the decoder
never decodes into a private image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ..io.document import JSONDict
from ..io.folders import Skipped, discover_images, spool_private_folder, to_value_range
from ..privacy.public import public_release
from ..transfer.decoder import ReleaseDecoder, decoder_key, fit_decoder
from ..transfer.decoder_store import ALWAYS, kept_verdict, public_split
from ..transfer.result_cache import STUDENTS_FOLDER
from .plan import resolve_noise_decoding
from .public_images import known_private, refuse_known_private, refuse_overlap

if TYPE_CHECKING:
    from ..io.folders import SpooledImages
    from ..privacy.base import Mechanism
    from ..privacy.ledger import Ledger
    from .options import NoiseOptions

__all__ = ["NoiseDecoding", "PublicValues", "noise_decoding", "public_values"]


@dataclass(frozen=True)
class NoiseDecoding:
    """The decoder a noise run writes its releases with (None: as they are) and what the report says of it
    (None: ``--decode none``)."""

    decoder: ReleaseDecoder | None
    report: JSONDict | None


def noise_decoding(opts: NoiseOptions, state: Path, private: SpooledImages, mechanism: Mechanism,
                   public: torch.Tensor | None, scope: str) -> NoiseDecoding:
    """The decoder of ``opts.decode`` for ``mechanism``'s releases of the ``private`` images for ``scope``,
    fitted to the ``public`` images (:func:`public_values`), following a verdict kept in ``state``."""
    if opts.decode == "none":
        return NoiseDecoding(None, None)
    asked = resolve_noise_decoding(opts, mechanism, private.records.record_shape, 0 if public is None else len(public))
    if asked.note is not None or public is None:
        return NoiseDecoding(None, {"asked": True, "chosen": False, "reason": asked.note or ""})
    split = public_split(public, asked.check_images)
    students = state / STUDENTS_FOLDER
    prior = public[split.prior]
    out: JSONDict = {"asked": True, "decoder": decoder_key(mechanism, prior, split.seed), "public_images": len(prior)}
    if opts.decode == "auto":
        verdict = kept_verdict(students, str(out["decoder"]), scope)
        if verdict is None:
            return NoiseDecoding(None, {**out, "chosen": False, "reason": (
                "no label run has checked this decoder with this teacher: run `ldpclient label --decode auto` "
                "with these --public images first, or give --decode always")})
        if not verdict[0]:
            return NoiseDecoding(None, {**out, "chosen": False, "reason": f"a label run's check refused it: "
                                                                            f"{verdict[1]}"})
        out["reason"] = f"a label run's check chose it: {verdict[1]}"
    else:
        out["reason"] = ALWAYS
    return NoiseDecoding(fit_decoder(mechanism, prior, seed=split.seed), {**out, "chosen": True})


class PublicValues(NamedTuple):
    """The ``--public`` images a noise run decodes into or fits its basis on (``(N, C, H, W)`` in the mechanism's
    domain), and those left out as near copies of private images (``--public-skip-copies``), each with its reason."""

    values: torch.Tensor
    skipped: tuple[Skipped, ...]


def public_values(opts: NoiseOptions, state: Path, ledger: Ledger, private: SpooledImages, mechanism: Mechanism,
                  value_range: tuple[float, float]) -> PublicValues | None:
    """The ``--public`` images at the private images' shape, as ``label`` sends them; None without ``--public``.
    ValueError for a public image that is a private one, or a near copy of one unless ``--public-skip-copies``
    (then it is left out and named)."""
    if opts.public is None:
        return None
    where = f"--public {str(opts.public)!r}"
    with spool_private_folder(
            discover_images(opts.public, what="--public folder"), private.records.record_shape, directory=state,
            max_pixels=opts.max_pixels,
            convert=lambda r: to_value_range(r, value_range, integer=mechanism.domain.integer)) as public:
        refuse_overlap(private.records, public, value_range, where)
        copies = known_private(ledger, public, domain=mechanism.domain, private=private)
        if not opts.public_skip_copies:
            refuse_known_private(public, copies, where)
        keep = np.array([k for k in range(len(public.records)) if k not in copies], dtype=np.int64)
        if not len(keep):
            raise ValueError(f"{where}: every public image is a private image or a copy of one")
        skipped = tuple(Skipped(public.paths[k], f"not used: {why}") for k, why in copies.items())
        return PublicValues(public_release(public.records.read(keep), mechanism.domain).values, skipped)
