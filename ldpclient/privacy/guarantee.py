"""Privacy guarantees: what one release of one record costs, per element and per record.

The unit of privacy is one private record (one image/tensor). Every guarantee is
stated twice: for one released element and for the whole record (the composition
over the record's released elements). Both are (epsilon, delta) pairs; delta is a
probability in [0, 1], epsilon is in nats (natural log), >= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..io.document import Document, JSONDict, integer, number, text


@dataclass(frozen=True)
class Domain:
    """Declared value range of every element of a record, before noising.

    ``low``/``high`` are inclusive bounds in the caller's units (e.g. [0, 1] for
    float images, 0..255 for uint8 pixels). Sensitivity comes from this range,
    never from the data. ``integer=True`` declares the integer domain
    {low, low+1, ..., high} used by the discrete mechanisms.
    """

    low: float = 0.0
    high: float = 1.0
    integer: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(f"domain bounds must be finite, got [{self.low}, {self.high}]")
        if not self.high > self.low:
            raise ValueError(f"domain high must exceed low, got [{self.low}, {self.high}]")
        if self.integer and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError(f"integer domain needs integer bounds, got [{self.low}, {self.high}]")

    @classmethod
    def uint8(cls) -> "Domain":
        """The integer domain {0..255} of 8-bit pixels (for uint8 tensors as they come from image files)."""
        return cls(0, 255, integer=True)

    @property
    def width(self) -> float:
        """Per-element sensitivity: the largest change of one element, ``high - low``."""
        return self.high - self.low

    def as_dict(self) -> JSONDict:
        return {"low": self.low, "high": self.high, "integer": self.integer}


@dataclass(frozen=True)
class Guarantee:
    """The (epsilon, delta) cost of releasing one record once with one mechanism.

    ``epsilon_element``/``delta_element``: LDP guarantee of one released element
    (neighbouring inputs differ in that element only, anywhere in the domain).
    ``epsilon_record``/``delta_record``: guarantee for the whole record, i.e. any
    two records of the declared shape and domain; this is the figure that the
    ledger charges and that reports always show.
    ``elements_per_record``: number of *released* elements (after any reduction
    before noise), which is what the per-record figure composes over.
    ``params``: the mechanism's parameters (scales, keep probability, ...).
    ``notes``: plain-language caveats (e.g. why a published claim does not hold).
    """

    mechanism: str
    epsilon_element: float
    delta_element: float
    epsilon_record: float
    delta_record: float
    elements_per_record: int
    domain: Domain
    params: Document = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    public_input: bool = False

    def __post_init__(self) -> None:
        for name in ("epsilon_element", "epsilon_record"):
            v = getattr(self, name)
            if math.isnan(v) or v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        for name in ("delta_element", "delta_record"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        if self.elements_per_record < 1:
            raise ValueError("elements_per_record must be >= 1")

    @property
    def is_pure(self) -> bool:
        """True when delta per record is exactly 0 (pure epsilon-LDP)."""
        return self.delta_record == 0.0

    def for_public_input(self) -> "Guarantee":
        """The same mechanism applied to a public (non-private) input: costs nothing.

        Used by the data-free baseline, whose records are blank images.
        """
        return Guarantee(
            mechanism=self.mechanism,
            epsilon_element=0.0,
            delta_element=0.0,
            epsilon_record=0.0,
            delta_record=0.0,
            elements_per_record=self.elements_per_record,
            domain=self.domain,
            params=dict(self.params),
            notes=self.notes + ("input is public (blank record): no private information is released",),
            public_input=True,
        )

    def summary(self) -> str:
        """One line for reports: per-record figure first, then per element."""
        return (
            f"{self.mechanism}: per record (eps={_fmt(self.epsilon_record)}, delta={_fmt(self.delta_record)})"
            f" over {self.elements_per_record} released elements;"
            f" per element (eps={_fmt(self.epsilon_element)}, delta={_fmt(self.delta_element)})"
        )

    @property
    def sampling(self) -> str:
        """How the noise was drawn (secure integer path or float64), as the mechanism states it."""
        return str(self.params.get("sampling", "unknown"))

    def as_dict(self) -> JSONDict:
        return {
            "mechanism": self.mechanism,
            "per_record": {"epsilon": self.epsilon_record, "delta": self.delta_record},
            "per_element": {"epsilon": self.epsilon_element, "delta": self.delta_element},
            "elements_per_record": self.elements_per_record,
            "sampling": self.sampling,
            "domain": self.domain.as_dict(),
            "params": dict(self.params),
            "notes": list(self.notes),
            "public_input": self.public_input,
        }


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def coefficients_named(params: Document) -> str | None:
    """What the coefficients of a release in a basis are, from its guarantee's ``params`` ("low-frequency DCT
    coefficients", "principal-component coefficients (fitted on the public images)"); None for pixels."""
    basis = params.get("basis")
    if basis == "dct":
        return "low-frequency DCT coefficients"
    if basis == "pca":
        return "principal-component coefficients (fitted on the public images)"
    return None


def coefficient_treatment(params: Document) -> str:
    """What a release in a basis did to its coefficient vector, from its guarantee's ``params``: "clipped to L1 norm
    8 and noised" (Laplace, Gaussian) or "quantised into a 138-bit code and released by randomized response"
    (``quantised-rr``)."""
    if "code_bits" in params:
        return f"quantised into a {integer(params, 'code_bits')}-bit code and released by randomized response"
    return f"clipped to {text(params, 'clip_norm_kind')} norm {number(params, 'clip_norm'):.4g} and noised"


def release_caution(params: Document) -> str | None:
    """What a user must read before choosing a release that passes the record on nearly intact (``quantised-rr``:
    the true code with ``params["truth_probability"]``); None for a release that noises every value."""
    if "truth_probability" not in params:
        return None
    share = 100.0 * number(params, "truth_probability")
    return (f"this release is as informative as its epsilon allows: the teacher receives the image's quantised low "
            f"frequencies themselves in {share:.3g} % of releases (docs/privacy.md)")
