"""LDP mechanisms over batches ``(N, *record_shape)``, one file each, and their registry.

Every mechanism follows the same path in :meth:`~ldpclient.privacy.Mechanism.release`
(:mod:`.elementwise`): validate (NaN/inf, empty, shape), clip to the declared
:class:`~ldpclient.privacy.Domain` (counted per record in ``Release.clipped_elements``),
optionally average-pool by the integer ``reduction`` over the last two axes (data-independent,
before noise), noise every released element independently, and return a
:class:`~ldpclient.privacy.Release` whose :class:`~ldpclient.privacy.Guarantee` states
epsilon/delta per element and per record.

Which randomness path each mechanism uses (see :mod:`ldpclient.privacy.sampling`):

* secure integer path (:mod:`.grid`), the default of every factory: ``laplace``, ``gaussian``,
  ``tldp_laplace``, ``tldp_gaussian`` and ``weighted_tldp`` (``secure=True``), and
  ``discrete_tldp`` (always);
* float path: the same factories with ``secure=False`` (benchmarks; open to the
  floating-point attack).

The modules: :mod:`.registry` (``register_mechanism``, ``make_mechanism``, the names),
:mod:`.grid`, :mod:`.elementwise`, and one file per mechanism (:mod:`.laplace`,
:mod:`.gaussian`, :mod:`.tldp`, :mod:`.discrete_tldp`). Any further module in this package is
imported here too, so a mechanism registered in a new file is found by the CLI, the config,
``make_mechanism`` and the audit without another edit.
"""

from __future__ import annotations

import importlib
import pkgutil

from .discrete_tldp import DiscreteTLDPMechanism, discrete_tldp
from .elementwise import DEFAULT_DELTA, FLOAT_SAMPLING, SECURE_GAUSSIAN_SAMPLING, SECURE_LAPLACE_SAMPLING
from .gaussian import GaussianMechanism, gaussian
from .grid import grid_bits_for
from .laplace import LaplaceMechanism, laplace
from .quantised_rr import QuantisedRandomizedResponse, quantised_rr
from .registry import (
    MechanismEntry,
    basis_mechanism_names,
    delta_mechanism_names,
    factories,
    make_mechanism,
    mechanism_entry,
    mechanism_names,
    register_mechanism,
)
from .tldp import TLDPMechanism, tldp_gaussian, tldp_laplace, weighted_tldp


def _import_every_module() -> None:
    """Import the package's other modules (a mechanism added as a new file registers itself)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_import_every_module()

#: Name -> factory of every registered mechanism (read-only snapshot taken at import).
MECHANISMS = factories()

__all__ = [
    "DEFAULT_DELTA",
    "FLOAT_SAMPLING",
    "MECHANISMS",
    "SECURE_GAUSSIAN_SAMPLING",
    "SECURE_LAPLACE_SAMPLING",
    "DiscreteTLDPMechanism",
    "GaussianMechanism",
    "LaplaceMechanism",
    "MechanismEntry",
    "QuantisedRandomizedResponse",
    "TLDPMechanism",
    "basis_mechanism_names",
    "delta_mechanism_names",
    "discrete_tldp",
    "factories",
    "gaussian",
    "grid_bits_for",
    "laplace",
    "make_mechanism",
    "mechanism_entry",
    "mechanism_names",
    "quantised_rr",
    "register_mechanism",
    "tldp_gaussian",
    "tldp_laplace",
    "weighted_tldp",
]
