"""Linkage / re-identification: which candidate record does a logged query come from?

The attacker holds a candidate set that contains the true records (the strongest
auxiliary knowledge: e.g. it guesses the private images are among a public pool)
and links each query to the nearest candidate. Scores tried: L1 distance to the
raw query (maximum likelihood for Laplace noise), L2 to the raw query (maximum
likelihood for Gaussian noise) and L2 to the denoised query. For Sup queries (the
average of two records' releases) a hit is the nearest candidate being either
source of the best-fitting pair of candidates, searched among the ``pair_pool``
nearest candidates.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from .linking import check_sources, source_means

Denoiser = Callable[[torch.Tensor], torch.Tensor]


def _topk_distances(queries: torch.Tensor, candidates: torch.Tensor, p: float, k: int, chunk: int = 256):
    cand = candidates.flatten(1).float()
    idx_out, dist_out = [], []
    for q in queries.flatten(1).float().split(chunk):
        d = torch.cdist(q, cand, p=p)
        v, i = torch.topk(d, k, dim=1, largest=False)
        idx_out.append(i)
        dist_out.append(v)
    return torch.cat(idx_out), torch.cat(dist_out)


def _best_pairs(queries: torch.Tensor, candidates: torch.Tensor, nearest: torch.Tensor, p: float) -> torch.Tensor:
    """For each query, the pair of ``nearest`` candidates whose average is closest to it: ``(Q, 2)``. In L2 from
    inner products (``|(a + b) / 2 - q|^2 = |q|^2 - q.a - q.b + (|a|^2 + 2 a.b + |b|^2) / 4``, in float64), else
    from the averages themselves."""
    m = nearest.shape[1]
    a, b = torch.triu_indices(m, m, offset=1)
    cand = candidates.flatten(1).float()
    q = queries.flatten(1).float()
    out = torch.empty(q.shape[0], 2, dtype=torch.long)
    if p == 2.0:
        gram = cand.double() @ cand.double().T  # (N, N)
        across = q.double() @ cand.double().T  # (Q, N)
    for start in range(0, q.shape[0], 64):
        nb = nearest[start:start + 64]
        ia, ib = nb[:, a], nb[:, b]  # (B, P)
        if p == 2.0:
            qa, qb = across[start:start + 64].gather(1, ia), across[start:start + 64].gather(1, ib)
            d = (gram[ia, ia] + 2 * gram[ia, ib] + gram[ib, ib]) / 4 - qa - qb  # |q|^2 is the same for all pairs
        else:
            mix = (cand[ia] + cand[ib]) / 2  # (B, P, D)
            d = (mix - q[start:start + 64, None]).abs().pow(p).sum(2)
        best = d.argmin(1)
        out[start:start + 64, 0] = ia.gather(1, best[:, None]).squeeze(1)
        out[start:start + 64, 1] = ib.gather(1, best[:, None]).squeeze(1)
    return out


def _linkable(
    queries: torch.Tensor, sources: torch.Tensor, candidates: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The queries with a known source and their sources, checked: at least 2 candidates of the queries' shape,
    one or two sources a query (ValueError)."""
    n = candidates.shape[0]
    if n < 2:
        raise ValueError("linkage needs at least 2 candidates")
    if queries.shape[1:] != candidates.shape[1:]:
        raise ValueError(f"queries {tuple(queries.shape[1:])} and candidates {tuple(candidates.shape[1:])} differ "
                         "in shape")
    sources = check_sources(sources, queries.shape[0], n)
    has = (sources >= 0).any(1)
    queries, sources = queries[has], sources[has]
    if queries.shape[0] == 0:
        raise ValueError("no query has a known source record")
    if (sources >= 0).sum(1).max() > 2:
        raise ValueError("linkage handles queries with one or two source records")
    return queries, sources


def _hits(q: torch.Tensor, p: float, candidates: torch.Tensor, sources: torch.Tensor, two: torch.Tensor,
          sel2: torch.Tensor, pool: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Whether each query's nearest candidate (in L``p``) is one of its ``sources``; for the two-source queries
    ``sel2`` (of ``two``), whether the best pair among the ``pool`` nearest holds a source, and whether it is
    exactly the pair (None without such queries)."""
    idx, _ = _topk_distances(q, candidates, p, pool)
    hit = (sources == idx[:, :1]).any(1)
    exact = None
    if sel2.numel():
        pairs = _best_pairs(q[sel2], candidates, idx[sel2], p)
        s2 = sources[sel2]
        any_hit = (pairs[:, :1] == s2).any(1) | (pairs[:, 1:] == s2).any(1)
        exact = ((pairs[:, 0] == s2[:, 0]) & (pairs[:, 1] == s2[:, 1])) | (
            (pairs[:, 0] == s2[:, 1]) & (pairs[:, 1] == s2[:, 0])
        )
        hit = hit.clone()
        hit[sel2] = any_hit
        hit = hit[torch.cat([(~two).nonzero().flatten(), sel2])]
    return hit, exact


def linkage_attack(
    queries: torch.Tensor,
    sources: torch.Tensor,
    candidates: torch.Tensor,
    *,
    denoiser: Optional[Denoiser] = None,
    pair_pool: int = 16,
    max_pair_queries: int = 2000,
) -> dict:
    """Re-identification rates of queries against ``candidates`` (which include every source).

    ``queries``: ``(Q, C, H, W)``; ``sources``: ``(Q, k)`` candidate indices, ``-1``
    unused (queries without a source are skipped). Returns, per score, the top-1
    hit rate (nearest candidate is a source of the query), the best score's rate,
    the chance rate (sources per query / N) and the same attack on noise-free
    queries (the no-noise baseline). For two-source (Sup) queries also the exact
    pair rate against its chance 1 / C(N, 2); their top-1 hit means the best pair
    (searched among the ``pair_pool`` nearest candidates) contains a source, with
    chance 1 - C(N-2, 2) / C(N, 2).
    """
    n = candidates.shape[0]
    queries, sources = _linkable(queries, sources, candidates)
    two = (sources >= 0).sum(1) == 2
    scores: dict[str, tuple[torch.Tensor, float]] = {"l1_raw": (queries, 1.0), "l2_raw": (queries, 2.0)}
    if denoiser is not None:
        scores["l2_denoised"] = (denoiser(queries), 2.0)
    out: dict = {"num_queries": int(queries.shape[0]), "num_candidates": int(n), "top1": {}}
    sel2 = two.nonzero().flatten()[:max_pair_queries]

    def hits(q: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        return _hits(q, p, candidates, sources, two, sel2, min(pair_pool, n))

    for name, (q, p) in scores.items():
        hit, exact = hits(q, p)
        out["top1"][name] = float(hit.double().mean())
        if exact is not None:
            out.setdefault("pair", {})[name] = float(exact.double().mean())
    best = max(out["top1"], key=out["top1"].__getitem__)
    out["best_score"] = best
    out["top1_rate"] = out["top1"][best]
    # chance: a random candidate (one source) or a random pair (two sources) names a source
    chance_two = 1.0 - (n - 2) * (n - 3) / (n * (n - 1))
    frac_two = float(two.double().mean())
    out["chance_top1"] = (1 - frac_two) / n + frac_two * chance_two
    clean_hit, clean_exact = hits(source_means(candidates, sources), 2.0)
    out["no_noise_top1"] = float(clean_hit.double().mean())
    if clean_exact is not None:
        out["pair_rate"] = max(out["pair"].values())
        out["chance_pair"] = 1.0 / math.comb(n, 2)
        out["no_noise_pair"] = float(clean_exact.double().mean())
    return out
