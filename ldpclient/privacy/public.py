"""Images the user declares are not private, handed to a teacher as they are (``label --public``).

A public image is not a private record: sending it costs no private record anything, so its
:class:`~ldpclient.privacy.release.Release` carries epsilon 0 with ``public_input=True`` (as the
data-free baseline's blank records do), and no ledger ever sees it. This is the one way an
un-noised tensor becomes a release, and it is only for what the user has named public: the label
run refuses a public image whose file bytes are also in the private folder, so that no private
image is ever sent without noise because it was also put in the public one.
"""

from __future__ import annotations

import hashlib
import math

import torch

from .guarantee import Domain, Guarantee
from .release import _RELEASE_TOKEN, Release

#: What a public release's guarantee calls its mechanism (reports, the page).
PUBLIC_MECHANISM = "public (declared not private; sent without noise)"


def public_seed(values: torch.Tensor) -> int:
    """A 63-bit seed drawn from public images' ``values`` alone (their float32 bytes, in order): the same images
    give the same seed in every run, other images another one. What seeds the query plans of public images and of
    the mirror check's copies, so that a baseline run over them asks the same batches (a journal answers them once)."""
    digest = hashlib.sha256(values.detach().to(torch.float32).contiguous().numpy().tobytes()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def public_release(records: torch.Tensor, domain: Domain) -> Release:
    """Release ``records`` (``(N, *record_shape)``, in ``domain``'s units) that the user declared public, without
    noise: values clipped to the declared domain like any input, guarantee epsilon 0 with ``public_input``.
    ValueError on an empty batch or a non-finite value."""
    if records.dim() < 2 or records.shape[0] == 0:
        raise ValueError(f"public records must be a non-empty batch (N, *record_shape), got {tuple(records.shape)}")
    values = records.detach().to(torch.float32)
    if not bool(torch.isfinite(values).all()):
        raise ValueError("public records must be finite (NaN or inf found)")
    values = values.clamp(domain.low, domain.high)
    guarantee = Guarantee(
        mechanism=PUBLIC_MECHANISM,
        epsilon_element=0.0,
        delta_element=0.0,
        epsilon_record=0.0,
        delta_record=0.0,
        elements_per_record=math.prod(values.shape[1:]),
        domain=domain,
        params={"sampling": "none (no noise)"},
        notes=("declared public by the user: sent as it is; no private record is released by it",),
        public_input=True,
    )
    return Release(values, guarantee, values.shape[1:], _token=_RELEASE_TOKEN)


__all__ = ["PUBLIC_MECHANISM", "public_release", "public_seed"]
