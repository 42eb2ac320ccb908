"""The one list of names for each user-facing choice: CLI choices and help, config validation,
library checks, audit options and error messages all derive from these tuples.

Torch-free on purpose, so that the CLI builds its choices without importing the numeric stack.
The modules that implement the choices implement exactly these names (``tests/test_names.py``
checks the mechanism factories, their delta parameter, the CLI and the audit against them).
"""

from __future__ import annotations

#: LDP mechanisms, by the name ``--mechanism`` takes (factories: ``ldpclient.privacy.MECHANISMS``).
MECHANISMS: tuple[str, ...] = ("laplace", "gaussian", "tldp-laplace", "tldp-gaussian", "tldp-weighted", "discrete-tldp")
#: The mechanisms with a delta (they take ``--delta`` and ``--allow-large-delta``).
DELTA_MECHANISMS: tuple[str, ...] = ("gaussian", "tldp-gaussian", "tldp-weighted")
#: Query expansions, by the name ``--augment`` takes: Sup pairs, Rand second noise layer, none (= SIDP).
AUGMENTATIONS: tuple[str, ...] = ("sup", "rand", "none")
#: The query-plan kind (``ldpclient.transfer.augment.QueryPlan``) each augmentation builds.
PLAN_KINDS: dict[str, str] = {"sup": "sup", "rand": "rand", "none": "identity"}
#: What an epsilon counts: one released element, or a whole record (the sum over its elements).
EPSILON_UNITS: tuple[str, ...] = ("element", "record")


def choice_list(names: tuple[str, ...]) -> str:
    """``a, b or c``: a list of names for help texts and error messages."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


__all__ = ["AUGMENTATIONS", "DELTA_MECHANISMS", "EPSILON_UNITS", "MECHANISMS", "PLAN_KINDS", "choice_list"]
