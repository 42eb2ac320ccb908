"""The privacy defaults, one function each: the mechanism, epsilon and its unit, delta, the release basis and the
pooling factor a run uses unless told otherwise, the ceiling above which a per-record epsilon is refused, and the
level a data-free run's blank queries are noised at. The command line, the config file, the front door, the plan
and the audit all read them here.
"""

from __future__ import annotations

__all__ = ["MIN_RELEASED_SIDE", "basis", "delta", "epsilon", "epsilon_ceiling", "epsilon_element", "epsilon_unit",
           "free_query_epsilon", "free_query_mechanism", "mechanism", "reduction", "secure"]


def mechanism() -> str:
    """The LDP mechanism a run uses unless told otherwise (a name of ``ldpclient.privacy.MECHANISMS``).

    Laplace: pure epsilon-DP, no delta. At the default per-record epsilon the analytic Gaussian
    (delta 1e-5) labelled as well, within a seed's spread, on both image sizes measured.
    """
    return "laplace"


def epsilon() -> float:
    """Default epsilon (nats) per whole record (:func:`epsilon_unit`).

    Per record, so that one default means the same guarantee whatever the image size and the
    reduction (a per-element default grows with the number of released elements). 100 is where
    the private releases measured clearly above the data-free baseline at 28x28; it is a weak
    formal guarantee, and the report says so beside every figure.
    """
    return 100.0


def epsilon_unit() -> str:
    """Whether the default epsilon counts per released ``element`` or per ``record``: per ``record``."""
    return "record"


def delta() -> float:
    """Delta of the Gaussian mechanisms when none is given (per :func:`epsilon_unit`): the factories' own."""
    from .mechanisms import DEFAULT_DELTA

    return DEFAULT_DELTA


def secure() -> bool:
    """Whether a run draws its noise on the secure integer path (``--secure``): yes; float sampling is open to the
    floating-point attack on the noise."""
    return True


def epsilon_ceiling() -> float:
    """Largest per-record epsilon (nats) a run accepts without ``--allow-weak-privacy``: 500.

    From the privacy audit (28x28 digits, 719 private
    records): at 392 per record the teacher re-identifies 6.5 % of the SIDP queries
    (chance 0.14 %) and labels 22 % of its reconstructions like the originals (chance
    10 %); at 784 it re-identifies 40 % and agrees on 52 %; at 1,568 (the LDPKiT paper's
    2 per pixel) 89 % and 87 %. Above 500 a release is close to sending the image.
    """
    return 500.0


def free_query_epsilon() -> float:
    """Per-record epsilon (nats) at which a data-free run noises its blank queries: ``label --epsilon 0`` and
    the ``--baseline`` run.

    Blank images hold nothing private, so their noise level costs nothing and is a free choice; it is not the
    private run's epsilon. Of the grid 5, 10, 20, 30, 100, 300 per record, 20 has the best worse-of-two mean
    (adapted, 3 seeds): 89.0 % on scikit-learn digits at 28x28 and 91.9 % on MNIST-5k; the private run's old level,
    100, gave 64.5 and 77.0 %.
    """
    return 20.0


def free_query_mechanism(mechanism: str) -> str:
    """The mechanism that noises a data-free run's blank queries (``--epsilon 0``, ``--baseline``) beside a run
    of ``mechanism``: that mechanism where it releases pooled pixels (as the free level was measured), else
    ``laplace`` (a ``quantised-rr`` run's baseline: a blank image's code carries nothing to label)."""
    from .mechanisms import mechanism_entry

    try:
        return mechanism if mechanism_entry(mechanism).releases_pixels else "laplace"
    except ValueError:
        return mechanism


def basis(mechanism: str, epsilon_unit: str, given_reduce: int | None, epsilon: float) -> str:
    """The release basis when ``--basis`` is not given: ``dct`` where it applies, else ``pool``.

    ``dct`` for a mechanism with a basis (laplace, gaussian), epsilon per record (> 0) and no ``--reduce``
    asked for; ``pool`` otherwise (per-element epsilons, an explicit pooling factor, the TLDP family, and the
    data-free mode, whose blank queries are noised as the study measured them). At the default 100 per record
    it labelled MNIST 93.8 ± 0.1 % against pooling's 78.4 ± 3.8 %, and digits 92.0 ± 1.4 % against 92.7 ± 1.0 %.
    """
    from .mechanisms import mechanism_entry

    try:
        takes_basis = mechanism_entry(mechanism).takes_basis
    except ValueError:
        return "pool"
    if takes_basis and epsilon_unit == "record" and given_reduce is None and epsilon > 0:
        return "dct"
    return "pool"


#: Smallest side (pixels) of a released record that the default reduction keeps.
MIN_RELEASED_SIDE = 7


def reduction(input_shape: tuple[int, ...]) -> int:
    """Default average-pooling factor for records of ``input_shape`` (..., H, W).

    The largest factor dividing both H and W that keeps at least ``MIN_RELEASED_SIDE`` pixels
    per side (28x28 -> 4, i.e. 7x7 released; 8x8 -> 1; 32x32 -> 4; 224x224 -> 32). Fewer
    released elements mean less epsilon per record for the same noise per element, or less
    noise per element for the same epsilon per record.
    """
    h, w = int(input_shape[-2]), int(input_shape[-1])
    best = 1
    for r in range(1, min(h, w) + 1):
        if h % r == 0 and w % r == 0 and min(h, w) // r >= MIN_RELEASED_SIDE:
            best = r
    return best


def epsilon_element(epsilon: float, epsilon_unit: str, input_shape: tuple[int, ...], reduce: int) -> float:
    """The per-element epsilon of a pooled release of records of ``input_shape`` at factor ``reduce``:
    ``epsilon`` itself per ``element``, else spread evenly over the ``C x (H / reduce) x (W / reduce)``
    released elements (what the pooling mechanisms do with an epsilon per ``record``)."""
    if epsilon_unit == "element":
        return float(epsilon)
    c = int(input_shape[-3]) if len(input_shape) >= 3 else 1
    released = c * (int(input_shape[-2]) // int(reduce)) * (int(input_shape[-1]) // int(reduce))
    return float(epsilon) / max(1, released)
