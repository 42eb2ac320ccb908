"""ldpclient: label private images with a remote teacher that only ever sees LDP releases.

The front door::

    import ldpclient
    result = ldpclient.label("private/", "http://127.0.0.1:8080/v2/models/digits", epsilon=50)
    result.labels, result.confidences, result.guarantee.epsilon_record

and the layers below it, for those who wire the stages themselves: ``connect`` (a
teacher by address), the mechanism factories (``laplace``, ``gaussian``, ...,
``make_mechanism``) and ``Domain``, ``Ledger`` (per-image privacy spend and stored
releases), ``QueryClient`` with ``Journal`` and ``CostMeter`` (batches, resume, money),
``KnowledgeTransfer`` (release, expand, query, train, adapt, label) and ``TensorRecords``.
Names are imported on first use, so ``import ldpclient`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .names import VERSION as __version__

if TYPE_CHECKING:  # what a type checker sees of the lazy exports below (the redundant aliases re-export them)
    from .api import (
        LabelResult as LabelResult,
    )
    from .api import (
        label as label,
    )
    from .io.records import (
        TensorRecords as TensorRecords,
    )
    from .privacy import (
        Domain as Domain,
    )
    from .privacy import (
        Guarantee as Guarantee,
    )
    from .privacy import (
        Ledger as Ledger,
    )
    from .privacy import (
        discrete_tldp as discrete_tldp,
    )
    from .privacy import (
        gaussian as gaussian,
    )
    from .privacy import (
        laplace as laplace,
    )
    from .privacy import (
        make_mechanism as make_mechanism,
    )
    from .privacy import (
        tldp_gaussian as tldp_gaussian,
    )
    from .privacy import (
        tldp_laplace as tldp_laplace,
    )
    from .privacy import (
        weighted_tldp as weighted_tldp,
    )
    from .teachers import (
        CostMeter as CostMeter,
    )
    from .teachers import (
        Journal as Journal,
    )
    from .teachers import (
        QueryClient as QueryClient,
    )
    from .teachers import (
        Teacher as Teacher,
    )
    from .teachers import (
        connect as connect,
    )
    from .transfer.pipeline import (
        KnowledgeTransfer as KnowledgeTransfer,
    )
    from .transfer.settings import (
        AdaptationSettings as AdaptationSettings,
    )
    from .transfer.settings import (
        PlanSettings as PlanSettings,
    )
    from .transfer.settings import (
        TrainingSettings as TrainingSettings,
    )

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "label": "ldpclient.api",
    "LabelResult": "ldpclient.api",
    "connect": "ldpclient.teachers",
    "QueryClient": "ldpclient.teachers",
    "Journal": "ldpclient.teachers",
    "CostMeter": "ldpclient.teachers",
    "Teacher": "ldpclient.teachers",
    "Ledger": "ldpclient.privacy",
    "Domain": "ldpclient.privacy",
    "Guarantee": "ldpclient.privacy",
    "laplace": "ldpclient.privacy",
    "gaussian": "ldpclient.privacy",
    "tldp_laplace": "ldpclient.privacy",
    "tldp_gaussian": "ldpclient.privacy",
    "weighted_tldp": "ldpclient.privacy",
    "discrete_tldp": "ldpclient.privacy",
    "make_mechanism": "ldpclient.privacy",
    "KnowledgeTransfer": "ldpclient.transfer.pipeline",
    "PlanSettings": "ldpclient.transfer.settings",
    "TrainingSettings": "ldpclient.transfer.settings",
    "AdaptationSettings": "ldpclient.transfer.settings",
    "TensorRecords": "ldpclient.io.records",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ldpclient' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
