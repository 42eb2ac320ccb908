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
from typing import Any

__version__ = "0.1.0"

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ldpclient' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
