"""Helpers shared by the attacks: source tables of queries and per-record least squares."""

from __future__ import annotations

import torch


def check_sources(sources: torch.Tensor, num_queries: int, num_records: int) -> torch.Tensor:
    """Validate a ``(Q, k)`` int64 source table (``-1`` = unused slot) and return it as int64.

    A 1-D ``(Q,)`` table is read as one source per query.
    """
    s = torch.as_tensor(sources)
    if s.dim() == 1:
        s = s[:, None]
    if s.dim() != 2 or s.shape[0] != num_queries:
        raise ValueError(f"sources must be (Q, k) with Q={num_queries}, got shape {tuple(s.shape)}")
    s = s.long()
    if s.numel() and (s.max() >= num_records or s.min() < -1):
        raise ValueError(f"sources must index records in [0, {num_records}) or be -1")
    return s


def source_means(records: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """What each query stands for without noise: the mean of its source records ``(Q, ...)``.

    Queries without any source (public/blank) get zeros.
    """
    valid = sources >= 0
    k = valid.sum(1).clamp_min(1)
    out = torch.zeros((sources.shape[0], *records.shape[1:]), dtype=torch.float32)
    for slot in range(sources.shape[1]):
        sel = valid[:, slot]
        out[sel] += records[sources[sel, slot]].float()
    return out / k.view(-1, *([1] * (records.dim() - 1)))


def least_squares_records(
    queries: torch.Tensor, sources: torch.Tensor, num_records: int, ridge: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-record estimates from queries that are averages of their sources' releases.

    Solves ``min_r sum_q ||q - mean_{s in sources(q)} r_s||^2`` (plus a tiny ridge)
    through the ``(N, N)`` normal equations, never a ``(Q, N)`` matrix. With
    SIDP/Rand queries this is the mean of each record's queries; with Sup pairs it
    recovers each record's release exactly when its pair graph has an odd cycle.
    Returns ``(estimates (N, ...), covered (N,) bool)``; uncovered records are 0.
    """
    q = queries.double().flatten(1)
    valid = sources >= 0
    k = valid.sum(1)
    has = k > 0
    q, s, k, valid = q[has], sources[has], k[has].double(), valid[has]
    ata = torch.zeros(num_records, num_records, dtype=torch.float64)
    atq = torch.zeros(num_records, q.shape[1], dtype=torch.float64)
    slots = s.shape[1]
    for a in range(slots):
        va = valid[:, a]
        atq.index_add_(0, s[va, a], q[va] / k[va, None])
        for b in range(slots):
            vb = va & valid[:, b]
            flat = s[vb, a] * num_records + s[vb, b]
            ata.view(-1).index_add_(0, flat, 1.0 / k[vb] ** 2)
    covered = ata.diagonal() > 0
    idx = covered.nonzero().flatten()
    est = torch.zeros(num_records, q.shape[1], dtype=torch.float64)
    if idx.numel():
        sub = ata[idx][:, idx]
        lam = ridge * float(sub.diagonal().max())
        sub = sub + lam * torch.eye(idx.numel(), dtype=torch.float64)
        est[idx] = torch.linalg.solve(sub, atq[idx])
    return est.float().view(num_records, *queries.shape[1:]), covered
