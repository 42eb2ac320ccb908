"""Which public images a release decoder decodes into, and the teacher's verdict on it kept in a state directory.

A decoder (:mod:`.decoder`) is named by its key (:func:`~.decoder.decoder_key`: everything that shapes it). The
verdict a label run's check reached on it with one teacher (:mod:`.decode_check`) is kept as
``<students>/decoders/<key>.<teacher digest>.json``, so that ``ldpclient noise --decode auto`` writes what
``ldpclient label --decode auto`` sends that teacher, and a re-run with the same check finds it. It is a function of
public images and the teacher's answers on them only: the file holds no private value.

Which public images the decoder holds out for the check is drawn from their values alone (:func:`public_split`):
``label`` and ``noise`` given the same public images hold out the same ones and name the same decoder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..io.output import atomic_write_text
from ..privacy.public import public_seed

#: The folder of the kept verdicts, in the directory of a state's kept results.
DECODERS_FOLDER = "decoders"
#: Why a decoder is used with ``--decode always``.
ALWAYS = "decode 'always': used without a check"
#: The longest reason a kept verdict may give (a longer one is cut).
MAX_REASON = 500


@dataclass(frozen=True)
class PublicSplit:
    """The public images' indices held out for the decoder check (``check``) and decoded into (``prior``), both
    sorted, and the ``seed`` drawn from the images' values that drew them and the noise the decoder is fitted on."""

    seed: int
    check: torch.Tensor
    prior: torch.Tensor


def public_split(public: torch.Tensor, check_images: int) -> PublicSplit:
    """``check_images`` of the ``public`` images ``(N, C, H, W)`` held out of the decoder, drawn from their values
    alone (0: it decodes into all of them, as with ``--decode always``)."""
    seed = public_seed(public)
    order = torch.randperm(len(public), generator=torch.Generator().manual_seed((seed + 2) % 2**63))
    return PublicSplit(seed, order[:check_images].sort().values, order[check_images:].sort().values)


def keep_verdict(students: Path | None, key: str, teacher: str, *, chosen: bool, reason: str) -> None:
    """Keep whether the check chose decoder ``key`` for ``teacher`` (its scope) and why (the verdict's words)."""
    if students is not None:
        document = {"decoder": key, "chosen": bool(chosen), "reason": str(reason)[:MAX_REASON]}
        path = _verdict_path(students, key, teacher)
        with contextlib.suppress(OSError):  # not keeping it: noise --decode auto says none is kept
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(document))


def kept_verdict(students: Path | None, key: str, teacher: str) -> tuple[bool, str] | None:
    """Whether a label run's check chose decoder ``key`` for ``teacher`` and why; None when none is kept (or the
    file is not a verdict)."""
    if students is None:
        return None
    try:
        document = json.loads(_verdict_path(students, key, teacher).read_text())
        chosen, reason = document["chosen"], document["reason"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(chosen, bool) or not isinstance(reason, str) or document.get("decoder") != key:
        return None
    return chosen, reason[:MAX_REASON]


def _verdict_path(students: Path, key: str, teacher: str) -> Path:
    digest = hashlib.sha256(teacher.encode()).hexdigest()[:16]
    return students / DECODERS_FOLDER / f"{key}.{digest}.json"


__all__ = ["ALWAYS", "DECODERS_FOLDER", "PublicSplit", "keep_verdict", "kept_verdict", "public_split"]
