"""Randomized response on a quantised code (``--mechanism quantised-rr``): pure epsilon-LDP per record, exact.

The record's K lowest-frequency DCT coefficients (the ``dct`` basis's layout, :mod:`ldpclient.privacy.basis`)
are quantised into a B-bit code (:mod:`ldpclient.privacy.quantise`: a fixed spectrum model, bits by reverse
water-filling, equal-probability cells), and the code is released by k-ary randomized response over all
``k = 2**B`` codes: the true code with probability ``p = e**eps / (e**eps + k - 1)``, each other code with
``(1 - p) / (k - 1)``. Any two records' output probabilities differ by at most the factor ``e**eps``, whatever
the quantiser does, so the guarantee is exact and needs no clip bound. The release's values are the coded
coefficients read back as numbers (post-processing); :meth:`~ldpclient.privacy.Release.upsampled` rebuilds the
records by the inverse transform, as for a Laplace ``dct`` release.

Sampling: a fresh code, uniform over all k, replaces the true one when a uniform 62-bit integer is below
``T``, the smallest integer with ``T / 2**62 >= k / (e**eps + k - 1)`` (computed in 60-digit decimals); then
``P(true) / P(other) = 1 + k (2**62 - T) / T <= e**eps``, checked exactly, and that realised epsilon is in the
guarantee's params. The uniform code takes the low bits of uniform 62-bit integers: integer arithmetic only,
no float rounding for an attacker to read (the secure path of DESIGN.md).

B follows from epsilon (:func:`~ldpclient.privacy.quantise.best_total_bits`: the B that passes on the most bits
intact, about ``eps / ln 2`` less a few), unless given. **This release is as informative as its epsilon
allows**: at 100 per record it sends the record's quantised image itself about 99 times in 100, so whatever
an attacker can read from an image at that quantisation it reads here. Laplace noise at the same epsilon
spreads its noise over every coefficient and carries far less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction
from typing import Sequence

import torch

from ..basis import CoefficientLayout, DctLayout
from ..guarantee import Domain, release_caution
from ..preprocess import check_epsilon
from ..quantise import MAX_BITS, CoefficientCode, best_total_bits, check_spectrum, code_for, spectrum_of
from ..sampling import ONE, gaussian_noise, uniform_int62
from .elementwise import Elementwise, Params, Plan, PlanValues, fmt
from .registry import register_mechanism

#: How the release is drawn (``Guarantee.params["sampling"]``).
RR_SAMPLING = "secure: randomized response from uniform 62-bit integers"


def resample_units(epsilon: float, total_bits: int) -> int:
    """T in ``[1, 2**62]``: a uniform code replaces the true one when a uniform 62-bit integer is below T, so
    ``T / 2**62`` is at least ``k / (e**eps + k - 1)`` with ``k = 2**total_bits`` (rounded up, plus one unit)."""
    with localcontext() as ctx:
        ctx.prec = 60
        k = Decimal(2) ** total_bits
        share = k / (Decimal(epsilon).exp() + k - 1)
        units = int((share * ONE).to_integral_value(rounding=ROUND_CEILING)) + 1
    return min(max(units, 1), ONE)


def realised_epsilon(total_bits: int, units: int) -> Decimal:
    """The privacy loss of the sampler, ``ln(1 + k (2**62 - T) / T)`` in nats, to 60 digits."""
    if units >= ONE:
        return Decimal(0)
    ratio = 1 + Fraction(2**total_bits * (ONE - units), units)
    with localcontext() as ctx:
        ctx.prec = 60
        return (Decimal(ratio.numerator) / Decimal(ratio.denominator)).ln()


def truth_probability(total_bits: int, units: int) -> float:
    """P(the released code is the true one) = ``1 - (T / 2**62) (k - 1) / k``."""
    share = units / ONE
    return 1.0 - share * (1.0 - 2.0 ** -total_bits)


@dataclass(frozen=True, kw_only=True)
class CodeValues(PlanValues):
    """``code``: the coefficients' quantisation into one code; ``units``: the chance of a uniform code, in units of
    ``2**-62``."""

    code: CoefficientCode
    units: int


@register_mechanism("quantised-rr", rank=70)
class QuantisedRandomizedResponse(Elementwise[CodeValues]):
    """k-ary randomized response on a B-bit code of the record's K lowest DCT coefficients: pure epsilon-LDP per
    record (see module doc). Epsilon is per record; the basis is ``dct`` only.

    ``bits``: the code's length B (None: :func:`~ldpclient.privacy.quantise.best_total_bits` for epsilon);
    ``spectrum``: ``(mean, scale)``, K numbers each in the domain's units, that place the quantiser's cells and
    allocate the bits (None: the fixed model, :func:`~ldpclient.privacy.quantise.model_spectrum`). It must not
    come from the private records (estimate it from public images). ``coefficients``: K as for ``dct``.
    """

    name = "quantised-rr"
    #: Only names the layout's clip bound, which this release never uses (randomized response needs no clip).
    coefficient_norm = "l2"

    def __init__(
        self,
        epsilon: float,
        *,
        per: str | None = None,
        domain: Domain = Domain(0.0, 1.0),
        reduction: int = 1,
        basis: str = "dct",
        coefficients: int | None = None,
        clip_norm: float | None = None,
        bits: int | None = None,
        spectrum: tuple[Sequence[float], Sequence[float]] | None = None,
    ) -> None:
        if basis != "dct":
            raise ValueError(f"{self.name} releases a code of DCT coefficients: basis dct only (--basis dct), "
                             f"got {basis!r}")
        if clip_norm is not None:
            raise ValueError(f"{self.name} clips no norm (randomized response needs none): leave out clip_norm "
                             "(--clip-norm)")
        super().__init__(per=per, domain=domain, reduction=reduction, basis="dct", coefficients=coefficients)
        self.epsilon = check_epsilon(epsilon)
        if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or bits < 1):
            raise ValueError(f"bits must be None or a positive int, got {bits!r}")
        self.bits = bits
        self.spectrum = spectrum

    def _extra_config(self) -> dict[str, object]:
        cfg: dict[str, object] = {"epsilon": self.epsilon, "bits": self.bits}
        if self.spectrum is not None:
            mean, scale = self.spectrum
            cfg["spectrum"] = spectrum_of([*mean, *scale])
        return cfg

    def _make_coefficient_plan(self, record_shape: tuple[int, ...], layout: CoefficientLayout) -> Plan[CodeValues]:
        if not isinstance(layout, DctLayout):
            raise ValueError(f"{self.name} releases a code of DCT coefficients: basis dct only")
        k = layout.coefficients
        spectrum = None if self.spectrum is None else check_spectrum(self.spectrum, k)
        capacity = k * MAX_BITS
        if self.bits is not None and self.bits > capacity:
            raise ValueError(f"bits {self.bits} is more than {k} coefficients hold ({capacity}, {MAX_BITS} each)")
        total = self.bits if self.bits is not None else best_total_bits(self.epsilon, capacity)
        code = code_for(layout, self.domain, total, spectrum)
        units = resample_units(self.epsilon, total)
        loss = realised_epsilon(total, units)
        if loss > Decimal(self.epsilon):  # the sampler's loss must be within the claim (exact decimal comparison)
            raise AssertionError(f"randomized response realises epsilon {loss} above {self.epsilon!r}")
        realised = min(math.nextafter(float(loss), math.inf), self.epsilon)  # a float never below the loss
        p_true = truth_probability(total, units)
        coded = int((code.bits > 0).sum())
        params: Params = {
            "per": "record", "basis": "dct", "coefficients": k, "luminance_coefficients": int(layout.kept[0].numel()),
            "code_bits": total, "coded_coefficients": coded, "most_bits": int(code.bits.max()),
            "spectrum": "model" if spectrum is None else "given", "truth_probability": p_true,
            "resample_probability": units / ONE, "epsilon_realised": realised, "reduction": 1,
            "released_shape": [k], "released_elements": k, "sampling": RR_SAMPLING,
        }
        notes = [
            f"record-level release: the {k} lowest-frequency orthonormal DCT coefficients of the record, quantised"
            f" into a {total}-bit code ({coded} coefficients coded, at most {int(code.bits.max())} bits each, cells"
            " of equal probability under a fixed spectrum model); no norm is clipped",
            f"k-ary randomized response over the 2^{total} codes: the true code is released with probability"
            f" {p_true:.4g}, any other with equal probability; pure LDP, epsilon {fmt(self.epsilon)} per record"
            f" (the sampler realises {realised:.6g}, checked exactly)",
            str(release_caution(params)),
            f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] before the transform;"
            " one coefficient may carry the whole difference, so the per-element figures equal the per-record ones",
        ]
        g = self._guarantee(self.epsilon, 0.0, self.epsilon, 0.0, k, params, notes)
        return Plan(g, k, CodeValues(layout=layout, code=code, units=units))

    def _release_coefficients(self, x: torch.Tensor, plan: Plan[CodeValues], gen: torch.Generator) -> torch.Tensor:
        """Coded coefficients ``(N, K)`` float64: each record's true code, or with probability ``T / 2**62`` a
        uniform code (both drawn for every record, so the draws do not depend on the data)."""
        layout, code = plan.values.coefficient_layout, plan.values.code
        levels = code.encode(layout.forward(x))
        n = levels.shape[0]
        resample = uniform_int62((n,), gen) < plan.values.units
        fresh = code.uniform(uniform_int62((n, levels.shape[1]), gen))
        return code.decode(torch.where(resample.unsqueeze(1), fresh, levels))

    def _noise(self, shape: tuple[int, ...], plan: Plan[CodeValues], gen: torch.Generator) -> torch.Tensor:
        """LDPKiT-Rand's second layer: Gaussian noise at each coefficient's quantisation error scale
        (``scale * 2**-bits``; post-processing of a release)."""
        code = plan.values.code
        return gaussian_noise(shape, 1.0, gen) * code.error_scale()


#: The factory by its CLI name: ``quantised_rr(epsilon, per="record", domain=..., coefficients=..., bits=...)``.
quantised_rr = QuantisedRandomizedResponse
