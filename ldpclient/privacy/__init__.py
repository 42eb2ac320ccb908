"""On-device local differential privacy: mechanisms, guarantees, releases, ledger."""

from .base import Mechanism
from .guarantee import Domain, Guarantee
from .release import Derived, Release, as_derived, upsample

__all__ = ["Domain", "Guarantee", "Mechanism", "Release", "Derived", "as_derived", "upsample"]

# Ledger and trust-adaptive budgets (H2).
from .ledger import BudgetExceeded, Ledger, LedgerError, Spend, default_ledger_path, default_state_dir
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
