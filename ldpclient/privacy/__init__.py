"""On-device local differential privacy: mechanisms, guarantees, releases, ledger."""

from ..state import default_state_dir
from . import zcdp
from .analytic_gaussian import calibrate_sigma, epsilon_for_sigma
from .base import Mechanism
from .discrete import discrete_tldp_epsilon, solve_b, solve_p
from .discrete_gaussian import DiscreteGaussianSampler
from .guarantee import Domain, Guarantee
from .ledger import BudgetExceeded, Ledger, LedgerError, Spend, default_ledger_path
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
from .release import Derived, Release, as_derived, upsample
from .sampling import DiscreteLaplaceSampler, make_generator
from .trust import TrustPolicy

__all__ = [
    # types
    "Domain",
    "Guarantee",
    "Mechanism",
    "Release",
    "Derived",
    "as_derived",
    "upsample",
    # mechanisms, calibration and secure sampling
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
    "DiscreteGaussianSampler",
    "zcdp",
    "make_generator",
    # ledger and trust-adaptive budgets
    "Ledger",
    "LedgerError",
    "BudgetExceeded",
    "Spend",
    "default_state_dir",
    "default_ledger_path",
    "TrustPolicy",
]
