"""Validation and data-independent preprocessing applied to raw records before noise.

Everything here runs *before* the noise is added and never looks at the data to
choose a parameter: clip to the declared domain, optionally reduce by an integer
average-pooling factor over the last two axes (the guarantee then counts only the
released elements), and validate the mechanism's parameters. Bad input raises
``ValueError`` with a message naming the problem.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..names import EPSILON_UNITS, choice_list
from .guarantee import Domain


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """A privacy parameter: finite and > 0 (nats)."""
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {epsilon!r}") from None
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {epsilon!r}")
    return value


#: Largest delta a mechanism accepts unless forced (``allow_large_delta=True``, CLI ``--allow-large-delta``).
MAX_DELTA = 1e-2


def check_delta(delta: float, name: str = "delta", *, allow_large: bool = True) -> float:
    """A delta in the open interval (0, 1); above :data:`MAX_DELTA` only with ``allow_large``."""
    try:
        value = float(delta)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {delta!r}") from None
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {delta!r}")
    if not allow_large and value > MAX_DELTA:
        raise ValueError(
            f"{name}={value:g} is above {MAX_DELTA:g}: with that probability a record may be released in the clear;"
            " choose a delta below 1/(number of records), or force it with allow_large_delta=True (--allow-large-delta)"
        )
    return value


def delta_warning(delta_record: float, n_records: int) -> str | None:
    """A one-line warning when a per-record delta exceeds ``1 / n_records`` (else ``None``).

    Delta is the probability that the guarantee fails for a record; above 1/n one of the
    n records is expected to be exposed.
    """
    if n_records >= 1 and delta_record > 1.0 / n_records:
        return (
            f"per-record delta {delta_record:.3g} exceeds 1/n = {1.0 / n_records:.3g} for {n_records} records:"
            " about one record is expected to lose its guarantee; choose a smaller delta"
        )
    return None


def check_probability(p: float, name: str = "p", *, allow_zero: bool = True) -> float:
    """A probability in [0, 1) (or (0, 1) when ``allow_zero`` is False)."""
    try:
        value = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {p!r}") from None
    low_ok = value >= 0.0 if allow_zero else value > 0.0
    if not (math.isfinite(value) and low_ok and value < 1.0):
        raise ValueError(f"{name} must be in {'[0' if allow_zero else '(0'}, 1), got {p!r}")
    return value


def check_per(per: str | None) -> str:
    """``per`` must be one of :data:`ldpclient.names.EPSILON_UNITS`, named at every call: epsilon means one thing
    per call, and the library does not guess (the command line's ``--epsilon`` is per image unless
    ``--epsilon-unit element``; ``laplace(100)`` once meant 100 per element, 4,900 per 7x7 image)."""
    if per is None:
        raise ValueError("name the unit of epsilon: per='record' (a whole image, what --epsilon means) or "
                         "per='element' (one released pixel or coefficient); got neither")
    if per not in EPSILON_UNITS:
        raise ValueError(f"per must be {choice_list(EPSILON_UNITS)}, got {per!r}")
    return per


def check_reduction(reduction: int) -> int:
    """Average-pooling factor: a positive int (bools and floats are rejected)."""
    if isinstance(reduction, bool) or not isinstance(reduction, int) or reduction < 1:
        raise ValueError(f"reduction must be a positive int, got {reduction!r}")
    return reduction


def check_domain(domain: Domain) -> Domain:
    if not isinstance(domain, Domain):
        raise ValueError(f"domain must be an ldpclient.privacy.Domain, got {type(domain).__name__}")
    return domain


def released_shape(record_shape: Sequence[int], reduction: int) -> tuple[int, ...]:
    """Record shape after average pooling by ``reduction`` over the last two axes.

    Raises ``ValueError`` when the record has fewer than 2 axes (and reduction > 1)
    or the factor does not divide H and W.
    """
    shape = tuple(int(s) for s in record_shape)
    if any(s <= 0 for s in shape):
        raise ValueError(f"record shape {shape} has an empty axis")
    if reduction == 1:
        return shape
    if len(shape) < 2:
        raise ValueError(f"reduction {reduction} needs records with >= 2 axes (H, W), got shape {shape}")
    h, w = shape[-2:]
    if h % reduction or w % reduction:
        raise ValueError(f"reduction {reduction} does not divide the record's H x W = {h} x {w}")
    return shape[:-2] + (h // reduction, w // reduction)


def elements(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def validate_records(records: torch.Tensor, domain: Domain, reduction: int) -> tuple[int, ...]:
    """Check a batch ``(N, *record_shape)``; return ``record_shape``.

    Rejects non-tensors, empty batches/records, non-real dtypes and NaN/inf values.
    """
    if not isinstance(records, torch.Tensor):
        raise ValueError(f"records must be a torch.Tensor (N, *record_shape), got {type(records).__name__}")
    if records.dim() < 2:
        raise ValueError(
            f"records must have a batch axis and at least one record axis (N, *record_shape), "
            f"got shape {tuple(records.shape)}"
        )
    if records.numel() == 0:
        raise ValueError(f"records tensor is empty (shape {tuple(records.shape)})")
    if records.is_complex() or records.dtype == torch.bool:
        raise ValueError(f"records must be a real numeric tensor, got dtype {records.dtype}")
    record_shape = tuple(int(s) for s in records.shape[1:])
    released_shape(record_shape, reduction)
    return record_shape


def _value_range(records: torch.Tensor) -> tuple[float, float]:
    """(min, max) in one pass; NaN/inf raise ``ValueError`` (aminmax propagates NaN)."""
    lo, hi = torch.aminmax(records.detach().reshape(-1))
    lo_f, hi_f = float(lo), float(hi)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        bad = int((~torch.isfinite(records)).sum())
        raise ValueError(f"records contain {bad} NaN/inf values; clean them before noising")
    return lo_f, hi_f


def clip_to_domain(records: torch.Tensor, domain: Domain) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip to ``[domain.low, domain.high]`` in float64.

    Returns ``(clipped float64 tensor, clipped_elements (N,) int64)`` where the count
    is per record, of elements that were outside the domain. For an integer domain
    the clipped values are also rounded to the nearest integer (a fixed,
    data-independent map; half-way cases round to even as ``torch.round`` does).
    """
    x = records.detach().to(dtype=torch.float64)
    outside = (x < domain.low) | (x > domain.high)
    counts = outside.reshape(x.shape[0], -1).sum(dim=1).to(torch.int64)
    x = x.clamp(domain.low, domain.high)
    if domain.integer:
        x = torch.round(x)
    return x, counts


def average_pool(x: torch.Tensor, reduction: int) -> torch.Tensor:
    """Average pooling by ``reduction`` over the last two axes of ``(N, ..., H, W)`` (float64)."""
    if reduction == 1:
        return x
    *lead, h, w = x.shape
    k = reduction
    return x.reshape(*lead, h // k, k, w // k, k).mean(dim=(-3, -1))


def check_dtype_for_domain(records: torch.Tensor, domain: Domain, *, round_inputs: bool = False) -> int:
    """Refuse what the domain would silently reinterpret; return how many elements rounding changes.

    * integer tensors (e.g. uint8 pixels 0..255) on a float domain are refused: scale them
      (``x.float() / 255`` for [0, 1]) or declare ``Domain.uint8()``;
    * floats with non-integer values on an integer domain are refused unless
      ``round_inputs`` (then the count of rounded elements is returned).
    """
    is_float = records.is_floating_point()
    if not domain.integer and not is_float:
        hint = " (e.g. x.float() / 255 for uint8 pixels)" if records.dtype == torch.uint8 else ""
        raise ValueError(
            f"records are {str(records.dtype).replace('torch.', '')} but the domain [{domain.low:g}, {domain.high:g}]"
            f" is continuous: scale them to the domain{hint}, or declare an integer domain such as Domain.uint8()"
        )
    if domain.integer and is_float:
        fractional = int((records.detach() != torch.round(records.detach())).sum())
        if fractional and not round_inputs:
            raise ValueError(
                f"{fractional} values are not integers but the domain {{{int(domain.low)}..{int(domain.high)}}} is an"
                " integer domain: convert the records (e.g. (x * 255).round().to(torch.uint8)), or pass"
                " round_inputs=True to have them rounded"
            )
        return fractional
    return 0


def prepare(
    records: torch.Tensor, domain: Domain, reduction: int, *, round_inputs: bool = False
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Validate, clip, reduce: the full data-independent preprocessing before noise.

    Refuses dtype/domain mismatches (:func:`check_dtype_for_domain`); elements rounded
    because ``round_inputs`` was asked are counted with the clipped ones.

    Returns ``(x, clipped_elements, record_shape)`` where ``x`` is float64
    ``(N, *released_shape)``, or the input itself (float32/float64/integer dtype, not
    copied) when nothing needs clipping, rounding or pooling. For an integer domain the pooled mean is rounded to
    the nearest integer, so the released elements stay in {low..high}.
    """
    record_shape = validate_records(records, domain, reduction)
    lo, hi = _value_range(records)
    rounded = check_dtype_for_domain(records, domain, round_inputs=round_inputs)
    exact_dtype = records.dtype in (torch.float32, torch.float64) or not records.is_floating_point()
    if reduction == 1 and domain.low <= lo and hi <= domain.high and exact_dtype and (
        not domain.integer or not records.is_floating_point()
    ):
        # Fast path: nothing to clip, round or pool; the values are used as they are (no copy).
        return records.detach(), torch.zeros(records.shape[0], dtype=torch.int64), record_shape
    x, counts = clip_to_domain(records, domain)
    if rounded:
        x_in = records.detach().to(torch.float64).clamp(domain.low, domain.high)
        counts = counts + (x_in != torch.round(x_in)).reshape(x.shape[0], -1).sum(dim=1).to(torch.int64)
    x = average_pool(x, reduction)
    if domain.integer and reduction > 1:
        x = torch.round(x)
    return x, counts, record_shape


def check_weights(weights: object, record_shape: Sequence[int] | None = None, reduction: int = 1) -> torch.Tensor:
    """Weight matrix of weighted TLDP: float64 ``(H, W)`` with every value in [0, 1].

    With ``record_shape`` given, H x W must equal the record's last two axes before
    reduction (then average-pooled by ``reduction``) or after it (the released
    resolution, used as is); a mismatch names both shapes.
    """
    if isinstance(weights, torch.Tensor):
        w = weights.detach().to(dtype=torch.float64, device="cpu")
    else:
        try:
            w = torch.as_tensor(weights, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError("weights must be a 2-D array of numbers in [0, 1], got "
                             f"{type(weights).__name__}") from None
    if w.dim() != 2:
        raise ValueError(f"weights must be a 2-D (H, W) matrix over the spatial axes, got shape {tuple(w.shape)}")
    if w.numel() == 0:
        raise ValueError("weights matrix is empty")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("weights contain NaN/inf values")
    if bool((w < 0).any()) or bool((w > 1).any()):
        raise ValueError(
            f"weights must lie in [0, 1], got values in [{float(w.min()):.4g}, {float(w.max()):.4g}]"
        )
    if record_shape is not None:
        shape = tuple(int(v) for v in record_shape)
        full = shape[-2:] if len(shape) >= 2 else shape
        released = released_shape(shape, reduction)[-2:] if len(shape) >= 2 else shape
        if tuple(w.shape) == full:
            return average_pool(w, reduction)
        if tuple(w.shape) == released:
            return w
        at = f" or the released {released} (reduction {reduction})" if reduction > 1 else ""
        raise ValueError(
            f"weights shape {tuple(w.shape)} does not match these records: expected the record's spatial axes"
            f" {full}{at}; record shape {shape}"
        )
    return w
