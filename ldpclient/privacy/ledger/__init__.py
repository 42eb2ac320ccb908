"""The privacy ledger: what each private record has spent, and its stored releases.

A :class:`Ledger` is a SQLite file on the device. For every private record it
keeps

* the record's **spend**: the sum of the per-record (epsilon, delta) of every
  *fresh* release of that record, across all mechanisms and scopes (basic
  composition), and
* each **release** it made: the noised values (the LDP output, never the input),
  keyed by (record, mechanism identity, scope). The mechanism identity is the
  canonical JSON of ``mechanism.config()``, the record shape and the per-record
  charge ``guarantee(record_shape)`` gives.

Asking again for the same record, mechanism and scope returns the stored release
at no cost (post-processing of a release is free; re-noising is not). A fresh
release is charged, and refused *before any sampling* when it would push a
record over the per-record cap (:class:`BudgetExceeded`).

**Spend is per source, not per tensor.** A record has two keyed identities:

* its **source**: what the record was made from. For a folder run that is the
  image file's bytes (:func:`source_id_of_bytes`, given as ``sources=``); an
  application may pass its own ids. Without ``sources`` the ledger uses the record
  at a canonical dtype and value scale (:meth:`Ledger.source_keys`): the values
  mapped by the mechanism's declared domain onto 0..255 steps, so the same image as
  float16, float32 or float64, or in another declared value range, is one source.
  The per-record cap sums every release of a source, across teachers, shapes,
  value ranges, dtypes and mechanisms, so no teacher can reset an image's spend by
  publishing another input shape or range.
* its **tensor**: the exact values released (dtype, shape, bytes). A stored
  release is reused only for the same tensor, source, mechanism and scope.

Both are ``HMAC-SHA256(secret, domain tag + bytes)`` with a 32-byte per-ledger
secret kept beside the database (``<path>.key``, mode 0600). The database holds no raw inputs and no plain hash of
them, so it does
not fingerprint images for anyone without the key. Losing the key file makes the
ledger unable to recognise its records; the ledger then refuses to open rather
than silently treating every record as new.

Crash safety: the cap check, the sampling and the write of both the charges and
the released values happen inside one ``BEGIN IMMEDIATE`` transaction (WAL
journal, ``synchronous=FULL``), and nothing is returned before ``COMMIT`` has
returned. A kill before the commit leaves no charge and no release (the sampled
noise died with the process and was never seen); a kill after it leaves both, so
a re-run reuses the stored release instead of charging again.

Units: epsilon in nats, delta a probability; both **per record** (the ledger
charges ``Guarantee.epsilon_record`` / ``delta_record``).

One file per concern: :mod:`.schema` (the SQLite file, its tables and migration),
:mod:`.identity` (the secret and the keyed tensor and source identities),
:mod:`.store` (the stored releases and mechanism identities), :mod:`.spend` (the
per-source spend, the caps and the consistency checks), and :mod:`.ledger` (the
:class:`Ledger` that runs one release through them in one transaction).
"""

from ...state import default_state_dir
from .errors import BudgetExceeded, LedgerError
from .ledger import Ledger, default_ledger_path
from .spend import Spend, cap_reached

__all__ = [
    "Ledger",
    "LedgerError",
    "BudgetExceeded",
    "Spend",
    "cap_reached",
    "default_state_dir",
    "default_ledger_path",
]
