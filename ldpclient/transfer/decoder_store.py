"""Release decoders kept in a state directory, and the teacher's verdict on each: ``<students>/decoders/``.

A decoder (:mod:`.decoder`) is kept as ``<key>.pt`` under its key (:func:`~.decoder.decoder_key`: everything that
shaped it), so a run given the same public images and mechanism trains nothing. The verdict a label run's check
reached on it with one teacher (:mod:`.decode_check`) is kept as ``<key>.<teacher digest>.json``, so that
``ldpclient noise --decode auto`` writes what ``ldpclient label --decode auto`` sends that teacher. Both are
functions of public images only: the files hold no private value.

Which public images train the decoder is drawn from their values alone (:func:`public_split`): ``label`` and
``noise`` given the same public images hold out the same ones and name the same decoder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..io.output import atomic_write_bytes, atomic_write_text
from ..privacy.base import Mechanism
from ..privacy.public import public_seed
from .decoder import ReleaseDecoder, decoder_key, train_decoder, untrained_decoder

#: The folder of the kept decoders and verdicts, in the directory of a state's kept results.
DECODERS_FOLDER = "decoders"
#: Why a decoder is used with ``--decode always``.
ALWAYS = "decode 'always': used without a check"
#: The longest reason a kept verdict may give (a longer one is cut).
MAX_REASON = 500


@dataclass(frozen=True)
class PublicSplit:
    """The public images' indices held out for the decoder check (``check``) and trained on (``train``), both
    sorted, and the ``seed`` drawn from the images' values that drew them and the decoder's training noise."""

    seed: int
    check: torch.Tensor
    train: torch.Tensor


def public_split(public: torch.Tensor, check_images: int) -> PublicSplit:
    """``check_images`` of the ``public`` images ``(N, C, H, W)`` held out of the decoder's training, drawn from
    their values alone (0: all trained on, as with ``--decode always``)."""
    seed = public_seed(public)
    order = torch.randperm(len(public), generator=torch.Generator().manual_seed((seed + 2) % 2**63))
    return PublicSplit(seed, order[:check_images].sort().values, order[check_images:].sort().values)


@dataclass(frozen=True)
class KeptDecoder:
    """A decoder, its key, and whether it was read from the state rather than trained now."""

    decoder: ReleaseDecoder
    key: str
    reused: bool


def kept_decoder(mechanism: Mechanism, public: torch.Tensor, seed: int, students: Path | None) -> KeptDecoder:
    """The decoder of ``mechanism``'s releases learnt from ``public`` images with ``seed``: the one kept in
    ``students``' decoders folder under its key, else trained now and kept there (``students`` None: kept nowhere).
    Not keeping it (a read-only state) costs a later run the training, nothing else."""
    key = decoder_key(mechanism, public, seed)
    path = students / DECODERS_FOLDER / f"{key}.pt" if students is not None else None
    decoder = untrained_decoder(mechanism, public, torch.Generator().manual_seed(0))
    if path is not None and _load(decoder, path):
        return KeptDecoder(decoder.eval(), key, True)
    decoder = train_decoder(mechanism, public, seed=seed)
    if path is not None:
        _save(decoder, path)
    return KeptDecoder(decoder, key, False)


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


def _load(decoder: ReleaseDecoder, path: Path) -> bool:
    """Whether ``decoder`` now holds the weights kept in ``path`` (False: none, or not a decoder of its shape)."""
    try:
        decoder.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    except Exception:  # noqa: BLE001 - missing, damaged or of another shape: trained anew
        return False
    return True


def _save(decoder: ReleaseDecoder, path: Path) -> None:
    """Keep ``decoder``'s weights in ``path``, whole or not at all (:func:`~ldpclient.io.output.atomic_write_bytes`:
    two hosts training the same decoder at once each leave a whole one). An OSError keeps nothing."""
    weights = io.BytesIO()
    torch.save(decoder.state_dict(), weights)
    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(path, weights.getvalue())


__all__ = ["ALWAYS", "DECODERS_FOLDER", "KeptDecoder", "PublicSplit", "keep_verdict", "kept_decoder", "kept_verdict",
           "public_split"]
