"""The release store: each fresh release's noised values, kept to be returned again at no cost.

A release is stored under (tensor key + source key, mechanism identity, scope). The
mechanism identity is the canonical JSON of ``mechanism.config()``, the record shape
and the per-record charge ``guarantee(record_shape)`` gives; each identity has one row
in ``mechanisms``. Values are kept in the release's own dtype and shape, C order.
Nothing here charges: :mod:`.spend` does, in the same transaction.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import torch

from ...state.database import Database
from ..base import Mechanism
from ..guarantee import Guarantee
from ..release import _RELEASE_TOKEN, Release
from .errors import LedgerError
from .identity import dtype_name, rows_as_bytes
from .schema import chunks, placeholders, transaction
from .spend import CAP_RTOL


@dataclass(frozen=True)
class StoredMechanism:
    """A mechanism identity's row: its id, canonical identity and per-record charge."""

    id: int
    identity: str
    guarantee: Guarantee


@dataclass
class Fresh:
    """The records noised in one release call: ``values`` ``(F, *released_shape)`` (row j is the j-th fresh
    key), each row's clipped-element count, and each fresh key's row."""

    values: torch.Tensor
    clipped: list[int]
    row: dict[bytes, int]


#: A stored release: its values and clipped-element count.
Stored = tuple[torch.Tensor, int]


def canonical_json(obj: object) -> str:
    """Sorted, compact JSON with finite numbers only (a mechanism identity must be one string)."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"mechanism.config() must be JSON-serialisable with finite numbers: {exc}") from None


def mechanism_identity(mechanism: Mechanism, record_shape: tuple[int, ...]) -> tuple[str, Guarantee]:
    """The canonical identity of ``mechanism`` on records of ``record_shape``, and its per-record charge.

    The charge is part of the identity: should the accounting of a configuration ever change, its old
    releases are not reused under a charge they were not made with."""
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"expected an ldpclient.privacy Mechanism, got {type(mechanism).__name__}")
    g = mechanism.guarantee(record_shape)
    if not isinstance(g, Guarantee):
        raise TypeError(f"{type(mechanism).__name__}.guarantee() must return a Guarantee")
    for name in ("epsilon_record", "delta_record"):
        if not math.isfinite(getattr(g, name)):
            raise ValueError(f"mechanism guarantee {name} must be finite to be charged, got {getattr(g, name)}")
    identity = canonical_json(
        {"config": mechanism.config(), "record_shape": list(record_shape), "charge": [g.epsilon_record, g.delta_record]}
    )
    return identity, g


def register_mechanism(c: Database, mechanism: Mechanism, identity: str, g: Guarantee) -> StoredMechanism:
    """The ``mechanisms`` row of ``identity``, inserted (in its own transaction) the first time it is seen."""
    row = c.execute("SELECT id FROM mechanisms WHERE identity = ?", (identity,)).fetchone()
    if row is None:
        name = mechanism.name
        with transaction(c):  # another process may insert it first: then its row is the one
            c.execute(
                "INSERT INTO mechanisms(identity, name, epsilon_record, delta_record, guarantee)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(identity) DO NOTHING",
                (identity, str(name), g.epsilon_record, g.delta_record, canonical_json(g.as_dict())),
            )
        row = c.execute("SELECT id FROM mechanisms WHERE identity = ?", (identity,)).fetchone()
    return StoredMechanism(int(row[0]), identity, g)


def stored_releases(c: Database, keys: list[bytes], mech_id: int, scope: str) -> dict[bytes, Stored]:
    """Stored releases of (tensor + source) ``keys`` for this mechanism and scope; a release a
    schema-1 ledger made (no source yet) matches its tensor whatever the source."""
    wanted: dict[bytes, list[bytes]] = {}
    for k in keys:
        wanted.setdefault(k[:32], []).append(k)
    out: dict[bytes, Stored] = {}
    for chunk in chunks(list(wanted)):
        q = (
            "SELECT record_key, source_key, dtype, shape, data, clipped FROM releases"
            f" WHERE mechanism_id = ? AND scope = ? AND record_key IN ({placeholders(len(chunk))})"
        )
        for rkey, skey, dtype, shape, data, clipped in c.execute(q, (mech_id, scope, *chunk)):
            matches = [k for k in wanted[bytes(rkey)] if skey is None or k[32:] == bytes(skey)]
            if not matches:
                continue
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            t = t.view(_dtype_from_name(dtype)).reshape(json.loads(shape)).clone()
            for k in matches:
                out[k] = (t, int(clipped))
    return out


def store_fresh(c: Database, fresh: list[bytes], values: Fresh, mech: StoredMechanism, scope: str) -> None:
    """Insert the fresh releases (inside the caller's transaction), each with its per-record charge."""
    g = mech.guarantee
    now = time.time()
    dtype, shape_json = dtype_name(values.values.dtype), json.dumps(list(values.values.shape[1:]))
    rows = [  # row j of the values is the j-th fresh key
        (k[:32], k[32:], mech.id, scope, g.epsilon_record, g.delta_record, dtype, shape_json, data, clipped, now)
        for k, data, clipped in zip(fresh, rows_as_bytes(values.values), values.clipped, strict=True)
    ]
    c.executemany(
        "INSERT INTO releases(record_key, source_key, mechanism_id, scope, epsilon, delta, dtype, shape, data,"
        " clipped, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def assemble(
    mechanism: Mechanism,
    keys: list[bytes],
    first: dict[bytes, int],
    stored: dict[bytes, Stored],
    fresh: Fresh | None,
    g: Guarantee,
    record_shape: tuple[int, ...],
) -> Release:
    """The Release in input order (guarantee ``g`` per release of one record); no database access.

    ``first``: each key's first position in ``keys`` (later copies of a fresh key are marked ``reused``).
    Values keep the fresh release's dtype (stored rows are converted to it); with nothing fresh, the stored one."""
    n = len(keys)
    fresh_row = fresh.row if fresh is not None else {}
    fresh_clipped = fresh.clipped if fresh is not None else []
    fresh_pos, fresh_rows, stored_pos, stored_values = [], [], [], []
    clipped_out, reused = [0] * n, [True] * n
    for i, k in enumerate(keys):
        j = fresh_row.get(k)
        if j is not None:
            fresh_pos.append(i)
            fresh_rows.append(j)
            clipped_out[i] = fresh_clipped[j]
            reused[i] = first[k] != i
        else:
            v, cl = stored[k]
            stored_values.append(v)
            stored_pos.append(i)
            clipped_out[i] = cl
    kept = torch.stack(stored_values) if stored_values else None
    like = fresh.values if fresh is not None else kept
    assert like is not None  # every key is fresh or stored
    values = torch.empty((n, *like.shape[1:]), dtype=like.dtype)
    if fresh is not None:
        values[torch.tensor(fresh_pos)] = fresh.values[torch.tensor(fresh_rows)]
    if kept is not None:
        values[torch.tensor(stored_pos)] = kept.to(like.dtype)
    return Release(
        values,
        g,
        record_shape,
        reduction=int(mechanism.reduction),
        basis=mechanism.reconstruction(record_shape),
        clipped_elements=torch.tensor(clipped_out, dtype=torch.int64),
        reused=torch.tensor(reused, dtype=torch.bool),
        _token=_RELEASE_TOKEN,
    )


def by_mechanism(c: Database) -> list[dict[str, object]]:
    """One entry per (mechanism, scope) with stored releases: name, config, record shape, scope, count and
    the per-record charge of each release."""
    rows = c.execute(
        "SELECT m.name, m.identity, r.scope, COUNT(*), m.epsilon_record, m.delta_record"
        " FROM releases r JOIN mechanisms m ON m.id = r.mechanism_id"
        " GROUP BY m.id, r.scope ORDER BY m.name, r.scope, m.id"
    ).fetchall()
    out = []
    for name, identity, scope, count, eps, delta in rows:
        ident = json.loads(identity)  # {"config", "record_shape", "charge"}
        out.append(
            {
                "mechanism": name,
                "config": ident["config"],
                "record_shape": ident["record_shape"],
                "scope": scope,
                "releases": int(count),
                "epsilon_per_release": float(eps),
                "delta_per_release": float(delta),
            }
        )
    return out


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise LedgerError(f"stored release has unknown dtype {name!r}")
    return dtype


def sample_fresh(
    mechanism: Mechanism,
    records: torch.Tensor,
    first: dict[bytes, int],
    fresh: list[bytes],
    g: Guarantee,
    generator: torch.Generator | None,
) -> Fresh:
    """Noise the fresh records once each; refuse a release costing more per record (eps nats, delta) than ``g``."""
    idx = torch.tensor([first[k] for k in fresh], dtype=torch.int64)
    rel = mechanism.release(records[idx], generator=generator)
    if not isinstance(rel, Release) or len(rel) != len(fresh):
        raise LedgerError(
            f"{type(mechanism).__name__}.release returned {type(rel).__name__} "
            f"of wrong length for {len(fresh)} records"
        )
    rg = rel.guarantee
    if rg.epsilon_record > g.epsilon_record * (1 + CAP_RTOL) or (
        rg.delta_record > g.delta_record * (1 + CAP_RTOL)
    ):
        raise LedgerError(
            f"{type(mechanism).__name__}.release reported a larger per-record cost "
            f"(epsilon {rg.epsilon_record}, delta {rg.delta_record}) than its guarantee() "
            f"(epsilon {g.epsilon_record}, delta {g.delta_record}); nothing was charged or returned"
        )
    return Fresh(
        rel._values.detach().cpu().contiguous(), rel.clipped_elements.tolist(), {k: j for j, k in enumerate(fresh)}
    )
