"""Reconstruction attack: estimate the private records from the teacher's logged queries.

Two attackers are measured:

* **per query**: each query is denoised on its own and compared with what it
  stands for (its source record, or the clean average of its two Sup sources);
* **linked** (upper bound): the attacker also knows which queries share a record
  (the linkage attack says how realistic that is), pools them by least squares
  (mean of Rand queries, exact solve of Sup pairs) and denoises the per-record
  estimate; it is compared with the record itself.

Figures: MSE, PSNR (of the mean MSE) and SSIM in the domain's units, and, when a
teacher is given, how often the teacher labels the reconstruction as it labels
the original (for a Sup query: as either source). Baselines: the same figures for
noise-free queries (no-noise), and for a random *other* record used as the
"reconstruction" (chance).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from .denoise import DenoiserBank
from .linking import check_sources, least_squares_records, source_means
from .metrics import mean_psnr, mse, ssim

Classifier = Callable[[torch.Tensor], torch.Tensor]


def _labels(teacher: Classifier, x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    outs = []
    with torch.no_grad():
        for c in x.split(chunk):
            y = torch.as_tensor(teacher(c))
            outs.append(y.argmax(1) if y.dim() == 2 else y.long())
    return torch.cat(outs)


def _figures(recon: torch.Tensor, target: torch.Tensor, data_range: float) -> dict:
    return {
        "mse": float(mse(recon, target).mean()),
        "psnr_db": mean_psnr(recon, target, data_range),
        "ssim": float(ssim(recon, target, data_range).mean()),
    }


def _teacher_agreement(teacher: Classifier, recon: torch.Tensor, source_labels: torch.Tensor) -> float:
    pred = _labels(teacher, recon)
    valid = source_labels >= 0
    return float(((source_labels == pred[:, None]) & valid).any(1).double().mean())


def _derangement(n: int, g: torch.Generator) -> torch.Tensor:
    shift = int(torch.randint(1, n, (), generator=g)) if n > 1 else 0
    perm = torch.randperm(n, generator=g)
    out = torch.empty(n, dtype=torch.long)
    out[perm] = perm[(torch.arange(n) + shift) % n]
    return out


def _per_query_attack(
    queries: torch.Tensor,
    sources: torch.Tensor,
    originals: torch.Tensor,
    bank: DenoiserBank,
    teacher: Optional[Classifier],
    data_range: float,
    g: torch.Generator,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Per-query attacker with its no-noise and chance baselines; returns (figures, reconstructions, derangement)."""
    n = originals.shape[0]
    target = source_means(originals, sources)
    best = bank.best
    recon = bank.candidates[best](queries)
    per_query = {"denoiser": best, **_figures(recon, target, data_range)}
    per_query["all_denoisers_mse"] = {
        name: float(mse(fn(queries), target).mean()) for name, fn in bank.candidates.items()
    }
    noise_free = bank.candidates["clip"](target)
    base_no_noise = _figures(noise_free, target, data_range)
    other = _derangement(n, g)
    chance_sources = torch.where(sources >= 0, other[sources.clamp_min(0)], sources)
    chance_img = source_means(originals, chance_sources)
    base_chance = _figures(chance_img, target, data_range)
    src_labels = None
    if teacher is not None:
        orig_labels = _labels(teacher, originals.float())
        src_labels = torch.where(sources >= 0, orig_labels[sources.clamp_min(0)], torch.full_like(sources, -1))
        per_query["teacher_agreement"] = _teacher_agreement(teacher, recon, src_labels)
        base_no_noise["teacher_agreement"] = _teacher_agreement(teacher, noise_free, src_labels)
        base_chance["teacher_agreement"] = _teacher_agreement(teacher, chance_img, src_labels)
    return {**per_query, "no_noise": base_no_noise, "chance": base_chance}, recon, other


def _linked_attack(
    queries: torch.Tensor,
    sources: torch.Tensor,
    originals: torch.Tensor,
    recon: torch.Tensor,
    rb: DenoiserBank,
    other: torch.Tensor,
    teacher: Optional[Classifier],
    data_range: float,
    low: float,
) -> tuple[dict[str, object], Optional[dict]]:
    """Linked (least-squares per record) attacker with its baselines; returns (figures, examples or None)."""
    n = originals.shape[0]
    estimates, covered = least_squares_records(queries, sources, n)
    idx = covered.nonzero().flatten()
    linked: dict[str, object] = {"records_covered": int(idx.numel())}
    if not idx.numel():
        return linked, None
    lrecon = rb.candidates[rb.best](estimates[idx])
    orig = originals[idx].float()
    linked.update({"denoiser": rb.best, **_figures(lrecon, orig, data_range)})
    lchance = originals[other[idx]].float()
    linked_chance = _figures(lchance, orig, data_range)
    if teacher is not None:
        ol = _labels(teacher, orig)[:, None]
        linked["teacher_agreement"] = _teacher_agreement(teacher, lrecon, ol)
        linked_chance["teacher_agreement"] = _teacher_agreement(teacher, lchance, ol)
    # no noise: the least-squares estimate from noise-free queries is the record itself
    clean_est, _ = least_squares_records(source_means(originals, sources), sources, n)
    clean_rec = rb.candidates["clip"](clean_est[idx])
    linked_clean = _figures(clean_rec, orig, data_range)
    if teacher is not None:
        linked_clean["teacher_agreement"] = _teacher_agreement(teacher, clean_rec, ol)
    linked["no_noise"] = linked_clean
    linked["chance"] = linked_chance
    m = min(8, idx.numel())
    first_q = torch.tensor([int((sources == int(r)).any(1).nonzero()[0]) for r in idx[:m]], dtype=torch.long)
    examples = {
        "original": orig[:m],
        "query": queries[first_q].clamp(low, low + data_range),
        "per_query": recon[first_q],
        "linked": lrecon[:m],
    }
    return linked, examples


def reconstruction_attack(
    queries: torch.Tensor,
    sources: torch.Tensor,
    originals: torch.Tensor,
    bank: DenoiserBank,
    *,
    record_bank: Optional[DenoiserBank] = None,
    teacher: Optional[Classifier] = None,
    data_range: float = 1.0,
    low: float = 0.0,
    seed: int = 0,
) -> dict:
    """Run both reconstruction attackers and their baselines; returns a JSON-ready dict.

    ``queries`` ``(Q, C, H, W)`` as the teacher saw them; ``sources`` ``(Q, k)``
    indices into ``originals`` ``(N, C, H, W)`` (-1 unused; queries with no source
    are ignored); ``bank``: denoisers for this augment (the attacker uses its
    ``best``, chosen on synthetic data); ``record_bank``: denoisers for single
    releases, used on the linked per-record estimates (default: ``bank``);
    ``teacher``: callable mapping images to labels or logits.
    Also returns ``"examples"``: a few (original, per-query, linked) images for the figure.
    """
    n = originals.shape[0]
    sources = check_sources(sources, queries.shape[0], n)
    has = (sources >= 0).any(1)
    queries, sources = queries[has].float(), sources[has]
    if queries.shape[0] == 0:
        raise ValueError("no query has a known source record")
    g = torch.Generator().manual_seed(seed)
    res: dict = {"num_queries": int(queries.shape[0]), "num_records": int(n)}
    res["per_query"], recon, other = _per_query_attack(queries, sources, originals, bank, teacher, data_range, g)
    linked, examples = _linked_attack(
        queries, sources, originals, recon, record_bank or bank, other, teacher, data_range, low
    )
    if examples is not None:
        res["examples"] = examples
    res["linked"] = linked
    return res
