"""The mechanism a run names: one builder for ``label``, ``noise`` and ``audit``.

Options are the CLI's: ``name`` one of :func:`ldpclient.privacy.mechanisms.mechanism_names`, ``epsilon`` in nats
per ``per`` (``element`` or ``record``), ``delta`` (mechanisms with a delta; default
:func:`ldpclient.privacy.defaults.delta`), ``reduce`` the average-pooling factor before noise,
``value_range`` the teacher's input range (the mechanism's domain; ``discrete-tldp`` is always on
the integers 0..255), ``record_shape`` ``(C, H, W)``, ``basis`` the release basis (``--basis``) with its
``coefficients`` and ``clip_norm``, and for ``pca`` the public images it is fitted on.
"""

from __future__ import annotations

import math

import torch

from ..names import choice_list
from ..privacy import defaults as privacy_defaults
from ..privacy.base import Mechanism
from ..privacy.guarantee import Domain
from ..privacy.mechanisms import MechanismEntry, basis_mechanism_names, make_mechanism, mechanism_entry
from ..privacy.pca import PcaBasis, fit_pca


def mechanism_for(
    name: str,
    *,
    epsilon: float,
    per: str,
    delta: float | None,
    reduce: int | None,
    value_range: tuple[float, float],
    record_shape: tuple[int, ...],
    secure: bool = privacy_defaults.secure(),
    allow_large_delta: bool = False,
    allow_weak_privacy: bool = False,
    basis: str = "pool",
    coefficients: int | None = None,
    clip_norm: float | None = None,
    pca: PcaBasis | None = None,
) -> Mechanism:
    """The mechanism ``name`` with these options, checked against ``record_shape`` before any data is touched.

    ``basis`` (``--basis``): ``pool``, ``dct`` (:mod:`ldpclient.privacy.basis`) or ``pca``
    (:mod:`ldpclient.privacy.pca`), with ``coefficients`` and ``clip_norm`` (None: the record shape's defaults).
    ``pca`` releases in the basis ``pca`` (:func:`fit_public_basis`); without one, in
    :meth:`~ldpclient.privacy.pca.PcaBasis.unfitted` (its guarantee is known; a release is refused). A per-record
    epsilon above :func:`~ldpclient.privacy.defaults.epsilon_ceiling` is refused unless ``allow_weak_privacy``
    (CLI ``--allow-weak-privacy``).
    """
    entry = mechanism_entry(name)
    reduce = reduce or 1
    kwargs: dict[str, object] = {"epsilon": epsilon, "per": per, "reduction": reduce,
                              **_basis_options(entry, basis, reduce, per, coefficients, clip_norm)}
    if basis == "pca":
        kwargs.update(basis=pca or PcaBasis.unfitted(record_shape, coefficients), coefficients=None)
    if entry.takes_delta:
        kwargs["delta"] = delta if delta is not None else privacy_defaults.delta()
        if entry.accepts("allow_large_delta"):
            kwargs["allow_large_delta"] = allow_large_delta
    default_domain = entry.default("domain")
    if not (isinstance(default_domain, Domain) and default_domain.integer):  # discrete TLDP stays on 0..255
        kwargs["domain"] = Domain(float(value_range[0]), float(value_range[1]))
    if entry.accepts("secure"):  # discrete TLDP is always on the secure path
        kwargs["secure"] = secure
    if entry.requires("weights"):
        kwargs["weights"] = centre_weights(record_shape[-2:])
    try:
        mech = make_mechanism(name, **kwargs)
    except OverflowError:
        raise _too_large(epsilon) from None
    if record_shape[-1] % reduce or record_shape[-2] % reduce:
        raise ValueError(
            f"--reduce {reduce} does not divide the teacher's input size {record_shape[-2]}x{record_shape[-1]}"
        )
    try:
        g = mech.guarantee(record_shape)  # validates shape-dependent parameters
    except OverflowError:
        raise _too_large(epsilon) from None
    check_epsilon_ceiling(g.epsilon_record, allow_weak_privacy)
    return mech


def _too_large(epsilon: float) -> ValueError:
    return ValueError(f"--epsilon {epsilon:g} is too large to calibrate any noise for; choose a smaller --epsilon")


def _basis_options(entry: MechanismEntry, basis: str, reduce: int, per: str, coefficients: int | None,
                   clip_norm: float | None) -> dict[str, object]:
    """The mechanism's options of the release basis (none for ``pool``); ValueError for options that do not go
    with it."""
    if basis == "pool":
        if coefficients is not None or clip_norm is not None:
            raise ValueError("--coefficients and --clip-norm apply to --basis dct and pca only")
        if not entry.releases_pixels:
            raise ValueError(f"--mechanism {entry.name} releases DCT coefficients only (--basis dct): give "
                             "--epsilon-unit record and no --reduce")
        return {}
    if not entry.takes_basis:
        raise ValueError(f"--basis {basis} takes --mechanism {choice_list(basis_mechanism_names())}, not "
                         f"{entry.name}")
    if reduce != 1:
        raise ValueError(f"--basis {basis} releases coefficients of the whole image: give --reduce 1")
    if per != "record":
        raise ValueError(f"--basis {basis} releases one record-level vector: give --epsilon-unit record")
    return {"basis": basis, "coefficients": coefficients, "clip_norm": clip_norm}


def fit_public_basis(public: torch.Tensor, value_range: tuple[float, float], coefficients: int | None) -> PcaBasis:
    """The ``--basis pca`` basis of ``public`` images ``(P, C, H, W)`` in ``value_range``'s units, with
    ``coefficients`` (None: the default): fitted once per command, then given to :func:`mechanism_for`."""
    return fit_pca(public, Domain(float(value_range[0]), float(value_range[1])), coefficients)


def check_epsilon_ceiling(epsilon_record: float, allow_weak_privacy: bool) -> None:
    """Refuse (ValueError, one line) a per-record epsilon above the ceiling unless the user allowed it."""
    ceiling = privacy_defaults.epsilon_ceiling()
    if not math.isfinite(epsilon_record):
        raise ValueError(f"--epsilon gives an infinite per-record epsilon ({epsilon_record}); choose a smaller "
                         "--epsilon")
    if epsilon_record > ceiling and not allow_weak_privacy:
        raise ValueError(
            f"per-record epsilon {epsilon_record:.6g} is above the ceiling {ceiling:g}, where the releases come close "
            "to sending the images (a curious teacher can link and rebuild them); lower --epsilon, raise "
            "--reduce, or pass "
            "--allow-weak-privacy"
        )


def centre_weights(hw: tuple[int, ...]) -> torch.Tensor:
    """Default weight matrix of ``tldp-weighted``: 0 in the centre, rising to 1 at the border.

    Keep probability is ``p (1 - w)``: the centre keeps the published TLDP
    probability, the border is always noised. Shape: the record's spatial size
    ``(H, W)``; weights in [0, 1], data-independent.
    """
    h, w = int(hw[0]), int(hw[1])
    ys = torch.linspace(-1, 1, h).abs().unsqueeze(1)
    xs = torch.linspace(-1, 1, w).abs().unsqueeze(0)
    return torch.maximum(ys, xs).clamp(0, 1)


__all__ = ["centre_weights", "check_epsilon_ceiling", "fit_public_basis", "mechanism_for"]
