"""On-device local differential privacy: mechanisms, guarantees, releases, ledger."""

from .base import Mechanism
from .guarantee import Domain, Guarantee
from .release import Derived, Release, as_derived, upsample

__all__ = ["Domain", "Guarantee", "Mechanism", "Release", "Derived", "as_derived", "upsample"]
