"""The mechanism a run names: one builder for ``label``, ``noise`` and ``audit``.

Options are the CLI's: ``name`` one of :data:`ldpclient.names.MECHANISMS`, ``epsilon`` in nats
per ``per`` (``element`` or ``record``), ``delta`` (mechanisms with a delta; default
:func:`ldpclient.transfer.defaults.delta`), ``reduce`` the average-pooling factor before noise,
``value_range`` the teacher's input range (the mechanism's domain; ``discrete-tldp`` is always on
the integers 0..255), ``record_shape`` ``(C, H, W)``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..names import DELTA_MECHANISMS
from ..transfer import defaults


def mechanism_for(
    name: str,
    *,
    epsilon: float,
    per: str,
    delta: float | None,
    reduce: int | None,
    value_range: tuple[float, float],
    record_shape: tuple[int, ...],
    secure: bool = True,
    allow_large_delta: bool = False,
) -> Any:
    """The mechanism ``name`` with these options, checked against ``record_shape`` before any data is touched."""
    from ..privacy import make_mechanism
    from ..privacy.guarantee import Domain

    reduce = reduce or 1
    kwargs: dict[str, Any] = {"epsilon": epsilon, "per": per, "reduction": reduce}
    if name in DELTA_MECHANISMS:
        kwargs["delta"] = delta if delta is not None else defaults.delta()
        kwargs["allow_large_delta"] = allow_large_delta
    if name != "discrete-tldp":  # discrete TLDP is always on the secure path, on 0..255
        kwargs["domain"] = Domain(float(value_range[0]), float(value_range[1]))
        kwargs["secure"] = secure
    if name == "tldp-weighted":
        kwargs["weights"] = centre_weights(record_shape[-2:])
    mech = make_mechanism(name, **kwargs)
    if record_shape[-1] % reduce or record_shape[-2] % reduce:
        raise ValueError(
            f"--reduce {reduce} does not divide the teacher's input size {record_shape[-2]}x{record_shape[-1]}"
        )
    mech.guarantee(record_shape)  # validates shape-dependent parameters
    return mech


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


__all__ = ["centre_weights", "mechanism_for"]
