"""On-device local differential privacy: what an application uses to noise records and keep their spend.

Mechanisms (``laplace``, ``gaussian``, ``tldp_laplace``, ``tldp_gaussian``, ``weighted_tldp``,
``discrete_tldp``, ``quantised_rr``, or ``make_mechanism`` by name; ``register_mechanism`` adds one) turn raw
records into a :class:`Release`
carrying its :class:`Guarantee`; post-processing makes :class:`Derived` rows; a :class:`Ledger`
keeps each image's spend and stored releases; :class:`TrustPolicy` sets per-teacher budgets.
The calibration helpers (``calibrate_sigma``, ``epsilon_for_sigma``, ``discrete_tldp_epsilon``)
answer "what epsilon for this noise". The machinery below them (samplers, zCDP conversions,
solvers, generators) lives in its own modules: ``ldpclient.privacy.sampling``,
``discrete_gaussian``, ``zcdp``, ``discrete``, ``release``.
"""

from .analytic_gaussian import calibrate_sigma, epsilon_for_sigma
from .base import Mechanism
from .discrete import discrete_tldp_epsilon
from .guarantee import Domain, Guarantee
from .ledger import BudgetExceeded, Ledger, LedgerError, Spend
from .mechanisms import (
    MECHANISMS,
    DiscreteTLDPMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    QuantisedRandomizedResponse,
    TLDPMechanism,
    discrete_tldp,
    gaussian,
    laplace,
    make_mechanism,
    quantised_rr,
    register_mechanism,
    tldp_gaussian,
    tldp_laplace,
    weighted_tldp,
)
from .pca import PcaBasis, fit_pca
from .release import Derived, Release
from .trust import TrustPolicy

__all__ = [
    # types
    "Domain",
    "Guarantee",
    "Mechanism",
    "Release",
    "Derived",
    # mechanisms and calibration
    "laplace",
    "fit_pca",
    "PcaBasis",
    "gaussian",
    "tldp_laplace",
    "tldp_gaussian",
    "weighted_tldp",
    "discrete_tldp",
    "quantised_rr",
    "make_mechanism",
    "register_mechanism",
    "MECHANISMS",
    "LaplaceMechanism",
    "GaussianMechanism",
    "TLDPMechanism",
    "DiscreteTLDPMechanism",
    "QuantisedRandomizedResponse",
    "calibrate_sigma",
    "epsilon_for_sigma",
    "discrete_tldp_epsilon",
    # ledger and trust-adaptive budgets
    "Ledger",
    "LedgerError",
    "BudgetExceeded",
    "Spend",
    "TrustPolicy",
]
