"""On-device local differential privacy: mechanisms, guarantees, releases, ledger."""

from .base import Mechanism
from .guarantee import Domain, Guarantee
from .release import Derived, Release, as_derived, upsample

__all__ = ["Domain", "Guarantee", "Mechanism", "Release", "Derived", "as_derived", "upsample"]

# Mechanisms, calibration and secure sampling (H1).
from .analytic_gaussian import calibrate_sigma, epsilon_for_sigma
from .discrete import discrete_tldp_epsilon, solve_b, solve_p
from .mechanisms import (
    MECHANISMS,
    DiscreteTLDPMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    TLDPMechanism,
    discrete_tldp,
    gaussian,
    laplace,
    make_mechanism,
    tldp_gaussian,
    tldp_laplace,
    weighted_tldp,
)
from .sampling import DiscreteLaplaceSampler, make_generator

__all__ += [
    "laplace",
    "gaussian",
    "tldp_laplace",
    "tldp_gaussian",
    "weighted_tldp",
    "discrete_tldp",
    "make_mechanism",
    "MECHANISMS",
    "LaplaceMechanism",
    "GaussianMechanism",
    "TLDPMechanism",
    "DiscreteTLDPMechanism",
    "calibrate_sigma",
    "epsilon_for_sigma",
    "discrete_tldp_epsilon",
    "solve_b",
    "solve_p",
    "DiscreteLaplaceSampler",
    "make_generator",
]

# Ledger and trust-adaptive budgets (H2).
from ..state import default_state_dir
from .ledger import BudgetExceeded, Ledger, LedgerError, Spend, default_ledger_path
from .trust import TrustPolicy

__all__ += [
    "Ledger",
    "LedgerError",
    "BudgetExceeded",
    "Spend",
    "default_state_dir",
    "default_ledger_path",
    "TrustPolicy",
]
