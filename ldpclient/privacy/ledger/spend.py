"""Spend accounting: each source's summed per-record charge, the caps, and the checks on both.

Units: epsilon in nats and delta a probability, **per record** (basic composition:
each fresh release adds its ``Guarantee.epsilon_record`` / ``delta_record`` to its
source's total). A key here is the 64-byte identity (tensor key + source key) unless
a name says otherwise; spend is kept per source key (``k[32:]``), and a schema-1
ledger's per-tensor spend (``legacy_spend``, per ``k[:32]``) until its source is seen.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import torch

from ...state.database import Database
from ..guarantee import Guarantee
from .errors import BudgetExceeded
from .schema import chunks, has_legacy, placeholders

# Relative slack on cap comparisons, so that e.g. ten charges of 0.1 fit a cap of 1.0
# despite floating-point summation (1e-9 of the cap: far below any meaningful epsilon).
CAP_RTOL = 1e-9

_ADD_SPEND = (
    "INSERT INTO spend(source_key, epsilon, delta, releases) VALUES (?, ?, ?, ?)"
    " ON CONFLICT(source_key) DO UPDATE SET epsilon = spend.epsilon + excluded.epsilon,"
    " delta = spend.delta + excluded.delta, releases = spend.releases + excluded.releases"
)
#: Every record's spend: per source, and a schema-1 ledger's per tensor not yet adopted.
_ALL_SPEND = "(SELECT epsilon, delta FROM spend UNION ALL SELECT epsilon, delta FROM legacy_spend) AS every_record"


class Spend(NamedTuple):
    """Per-record privacy spend: ``epsilon`` and ``delta`` are float64 tensors ``(N,)`` (per record)."""

    epsilon: torch.Tensor
    delta: torch.Tensor


class Caps(NamedTuple):
    """Per-record caps on a source's total spend (epsilon in nats, delta a probability); None: no cap."""

    epsilon: float | None
    delta: float | None

    @classmethod
    def checked(cls, epsilon: float | None, delta: float | None) -> "Caps":
        return cls(_check_cap("cap_epsilon", epsilon), _check_cap("cap_delta", delta))

    def remaining(self, spent: Spend) -> Spend:
        """Budget left under these caps (``inf`` where there is no cap; never < 0)."""
        eps = (
            torch.full_like(spent.epsilon, math.inf)
            if self.epsilon is None
            else (self.epsilon - spent.epsilon).clamp(min=0.0)
        )
        delta = (
            torch.full_like(spent.delta, math.inf) if self.delta is None else (self.delta - spent.delta).clamp(min=0.0)
        )
        return Spend(eps, delta)


def _check_cap(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or None, got {value!r}") from None
    if math.isnan(v) or v < 0:
        raise ValueError(f"{name} must be >= 0 (or None for no cap), got {value!r}")
    if name == "cap_delta" and v > 1:
        raise ValueError(f"cap_delta must be in [0, 1] (a probability), got {value!r}")
    return v


def _exceeds(total: float, cap: float | None) -> bool:
    return cap is not None and total > cap + CAP_RTOL * max(cap, 1e-300)


def cap_reached(total: float, cap: float | None) -> bool:
    """Whether a record that has spent ``total`` has no budget left under ``cap`` (what
    :meth:`Ledger.summary` counts as ``records_at_cap``); never without a cap."""
    return cap is not None and total >= cap * (1 - CAP_RTOL)


def spend_of(c: Database, keys: Sequence[bytes], table: str = "spend") -> dict[bytes, tuple[float, float]]:
    """Spend per key of ``table``: ``spend`` (per source key) or ``legacy_spend`` (per tensor key, schema 1)."""
    column = "source_key" if table == "spend" else "record_key"
    out: dict[bytes, tuple[float, float]] = {}
    for chunk in chunks(list(dict.fromkeys(keys))):
        q = f"SELECT {column}, epsilon, delta FROM {table} WHERE {column} IN ({placeholders(len(chunk))})"
        for key, eps, delta in c.execute(q, chunk):
            out[bytes(key)] = (float(eps), float(delta))
    return out


def totals(c: Database, keys: Sequence[bytes], legacy: bool) -> Spend:
    """Each identity's total: its source's spend, plus its tensor's schema-1 spend not yet adopted."""
    spend = spend_of(c, [k[32:] for k in keys])
    old = spend_of(c, [k[:32] for k in keys], "legacy_spend") if legacy else {}
    rows = [
        tuple(a + b for a, b in zip(spend.get(k[32:], (0.0, 0.0)), old.get(k[:32], (0.0, 0.0)), strict=True))
        for k in keys
    ]
    return Spend(
        torch.tensor([r[0] for r in rows], dtype=torch.float64), torch.tensor([r[1] for r in rows], dtype=torch.float64)
    )


def check_budget(c: Database, fresh: list[bytes], g: Guarantee, caps: Caps, *, lowered: bool = False) -> None:
    """Refuse (:class:`BudgetExceeded`) when a source would pass a cap: its total so far plus this batch's
    charges to it (``g`` per fresh identity). ``lowered``: the caps were lowered on the ledger while the run was
    under way (the refusal says so)."""
    if caps.epsilon is None and caps.delta is None:
        return
    charges: dict[bytes, int] = {}
    for k in fresh:
        charges[k[32:]] = charges.get(k[32:], 0) + 1
    spend = spend_of(c, list(charges))
    bad_eps: list[float] = []
    bad_delta: list[float] = []
    for k, count in charges.items():
        eps, delta = spend.get(k, (0.0, 0.0))
        if _exceeds(eps + count * g.epsilon_record, caps.epsilon) or _exceeds(
            delta + count * g.delta_record, caps.delta
        ):
            bad_eps.append(math.inf if caps.epsilon is None else max(caps.epsilon - eps, 0.0))
            bad_delta.append(math.inf if caps.delta is None else max(caps.delta - delta, 0.0))
    if not bad_eps:
        return
    rem_e = (min(bad_eps), max(bad_eps))
    rem_d = (min(bad_delta), max(bad_delta))
    shown_caps, left = [], []
    if caps.epsilon is not None:
        shown_caps.append(f"epsilon cap {_fmt(caps.epsilon)}")
        left.append(f"epsilon min {_fmt(rem_e[0])} / max {_fmt(rem_e[1])}")
    if caps.delta is not None:
        shown_caps.append(f"delta cap {_fmt(caps.delta)}")
        left.append(f"delta min {_fmt(rem_d[0])} / max {_fmt(rem_d[1])}")
    msg = (
        f"privacy budget exceeded: {len(bad_eps)} of {len(charges)} records to be freshly released "
        f"would exceed the per-record cap ({', '.join(shown_caps)}). This release costs epsilon "
        f"{_fmt(g.epsilon_record)}, delta {_fmt(g.delta_record)} per record ({g.mechanism}); the "
        f"remaining budget of those records is {', '.join(left)}. Nothing was sampled or charged."
        + (" The cap was lowered on this state while the run was under way (ldpclient budget --set-cap)."
           if lowered else "")
    )
    raise BudgetExceeded(
        msg,
        n_exceeding=len(bad_eps),
        n_fresh=len(charges),
        epsilon_cost=g.epsilon_record,
        delta_cost=g.delta_record,
        remaining_epsilon=rem_e,
        remaining_delta=rem_d,
        cap_epsilon=caps.epsilon,
        cap_delta=caps.delta,
    )


def lock_sources(c: Database, source_keys: Sequence[bytes]) -> None:
    """Inside the caller's transaction, on PostgreSQL: hold each source's spend row (made at zero if new) until
    the commit, so that no other writer checks, releases or charges these sources meanwhile. Rows are taken in
    key order by every writer, so two writers never wait on each other in a circle. SQLite: nothing to do (the
    transaction holds the file's write lock)."""
    if not c.postgresql:
        return
    keys = sorted(set(source_keys))
    for chunk in chunks(keys):
        c.execute(
            "INSERT INTO spend(source_key, epsilon, delta, releases) VALUES"
            f" {','.join(['(?, 0, 0, 0)'] * len(chunk))} ON CONFLICT(source_key) DO NOTHING",
            chunk,
        )
        c.execute(
            f"SELECT source_key FROM spend WHERE source_key IN ({placeholders(len(chunk))})"
            " ORDER BY source_key FOR UPDATE",
            chunk,
        ).fetchall()


def charge(c: Database, fresh: list[bytes], g: Guarantee) -> None:
    """Add ``g``'s per-record charge to the source of each fresh identity (inside the caller's transaction)."""
    c.executemany(_ADD_SPEND, [(k[32:], g.epsilon_record, g.delta_record, 1) for k in fresh])


def adopt_legacy(c: Database, keys: list[bytes]) -> bool:
    """Inside the caller's transaction: move the spend and releases a schema-1 ledger kept per tensor
    onto the source now seen with that tensor (the first source seen adopts them), so they count
    against that source's cap from now on. Returns whether any schema-1 spend is left."""
    source_of: dict[bytes, bytes] = {}
    for k in keys:
        source_of.setdefault(k[:32], k[32:])
    for chunk in chunks(list(source_of)):
        q = ("SELECT record_key, epsilon, delta, releases FROM legacy_spend "
             f"WHERE record_key IN ({placeholders(len(chunk))})")
        for rkey, eps, delta, n in c.execute(q, chunk).fetchall():
            skey = source_of[bytes(rkey)]
            c.execute(_ADD_SPEND, (skey, eps, delta, n))
            c.execute("DELETE FROM legacy_spend WHERE record_key = ?", (rkey,))
            c.execute("UPDATE releases SET source_key = ? WHERE record_key = ? AND source_key IS NULL", (skey, rkey))
    return has_legacy(c)


def epsilon_per_record(c: Database) -> list[float]:
    """Every record's total per-record epsilon, in no particular order: the numbers only, no keys."""
    return [float(r[0]) for r in c.execute(f"SELECT epsilon FROM {_ALL_SPEND}")]


def epsilon_per_record_by_scope(c: Database) -> dict[str, list[float]]:
    """Per scope, the per-record epsilon its stored releases cost each record that has one (numbers only)."""
    out: dict[str, list[float]] = {}
    rows = c.execute(
        "SELECT scope, SUM(epsilon) FROM releases GROUP BY scope, COALESCE(source_key, record_key) ORDER BY scope"
    ).fetchall()
    for scope, eps in rows:
        out.setdefault(str(scope), []).append(float(eps))
    return out


def aggregate(c: Database, caps: Caps) -> dict[str, object]:
    """Over every record: ``records``, ``legacy_records``, ``epsilon``/``delta`` ``{"total", "max", "mean"}``
    (per record), ``records_at_cap`` (no epsilon or delta budget left under ``caps``) and ``records_over_cap``
    (of those, spent more than a cap: charged before the cap was lowered below their spend)."""
    n, tot_e, max_e, tot_d, max_d = c.execute(
        "SELECT COUNT(*), COALESCE(SUM(epsilon),0), COALESCE(MAX(epsilon),0),"
        f" COALESCE(SUM(delta),0), COALESCE(MAX(delta),0) FROM {_ALL_SPEND}"
    ).fetchone()
    n_legacy = c.execute("SELECT COUNT(*) FROM legacy_spend").fetchone()[0]
    n = int(n)
    return {
        "records": n,
        "legacy_records": int(n_legacy),
        "epsilon": {"total": float(tot_e), "max": float(max_e), "mean": float(tot_e) / n if n else 0.0},
        "delta": {"total": float(tot_d), "max": float(max_d), "mean": float(tot_d) / n if n else 0.0},
        "records_at_cap": _count_past(c, caps, 1 - CAP_RTOL, ">="),
        "records_over_cap": _count_past(c, caps, 1 + CAP_RTOL, ">"),
    }


def _count_past(c: Database, caps: Caps, slack: float, op: str) -> int:
    """Records whose epsilon or delta compares ``op`` to its cap times ``slack``; 0 without caps."""
    conds, params = [], []
    for column, cap in (("epsilon", caps.epsilon), ("delta", caps.delta)):
        if cap is not None:
            conds.append(f"{column} {op} ?")
            params.append(cap * slack)
    if not conds:
        return 0
    return int(c.execute(f"SELECT COUNT(*) FROM {_ALL_SPEND} WHERE {' OR '.join(conds)}", params).fetchone()[0])


def verify(c: Database, *, aliases: bool = True) -> list[str]:
    """Problems with the accounting (empty when all is well): a stored release whose charge is not its
    mechanism's, a source (or schema-1 tensor) whose spend is not the sum and count of its stored
    releases' charges, stored releases with no spend. A release of another file of an image counts for the
    source its spend is summed under (``aliases``: the ledger holds :mod:`.same_images`' tables)."""
    problems: list[str] = []
    owner = ("(SELECT r.epsilon, r.delta, COALESCE(a.canonical_key, r.source_key) AS source_key FROM releases r"
             " LEFT JOIN aliases a ON a.source_key = r.source_key WHERE r.source_key IS NOT NULL)"
             if aliases else "(SELECT epsilon, delta, source_key FROM releases WHERE source_key IS NOT NULL)")
    bad = c.execute(
        "SELECT COUNT(*) FROM releases r JOIN mechanisms m ON m.id = r.mechanism_id"
        " WHERE r.epsilon != m.epsilon_record OR r.delta != m.delta_record"
    ).fetchone()[0]
    if bad:
        problems.append(f"{bad} stored releases carry a charge different from their mechanism's")
    rows = c.execute(
        "SELECT s.epsilon, s.delta, s.releases, t.eps, t.delta, t.n FROM spend s LEFT JOIN"
        " (SELECT source_key, SUM(epsilon) AS eps, SUM(delta) AS delta, COUNT(*) AS n"
        f"  FROM {owner} AS owned GROUP BY source_key) t ON t.source_key = s.source_key"
    ).fetchall()
    rows += c.execute(
        "SELECT s.epsilon, s.delta, s.releases, t.eps, t.delta, t.n FROM legacy_spend s LEFT JOIN"
        " (SELECT record_key, SUM(epsilon) AS eps, SUM(delta) AS delta, COUNT(*) AS n"
        "  FROM releases WHERE source_key IS NULL GROUP BY record_key) t ON t.record_key = s.record_key"
    ).fetchall()
    orphans = c.execute(
        f"SELECT COUNT(DISTINCT source_key) FROM {owner} AS owned"
        " WHERE source_key NOT IN (SELECT source_key FROM spend)"
    ).fetchone()[0]
    orphans += c.execute(
        "SELECT COUNT(DISTINCT record_key) FROM releases WHERE source_key IS NULL AND record_key NOT IN"
        " (SELECT record_key FROM legacy_spend)"
    ).fetchone()[0]
    mismatched = 0
    for eps, delta, nrel, seps, sdelta, sn in rows:
        if sn is None or nrel != sn or not math.isclose(eps, seps, rel_tol=1e-9, abs_tol=1e-12) or not (
            math.isclose(delta, sdelta, rel_tol=1e-9, abs_tol=1e-15)
        ):
            mismatched += 1
    if mismatched:
        problems.append(f"{mismatched} records' spend differs from the sum of their stored releases' charges")
    if orphans:
        problems.append(f"{orphans} records have stored releases but no spend")
    return problems


def _fmt(x: float | None) -> str:
    return "none" if x is None else f"{x:.6g}"
