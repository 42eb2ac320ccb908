"""Our exact samplers against OpenDP's: the same law, and what each costs per million draws.

Run:  .venv/bin/python benchmarks/bench_opendp_samplers.py [--draws 1000000] [--out
benchmarks/results/opendp_samplers.jsonl]
      (OpenDP comes with the ``dev`` and ``bench`` extras)

The secure release paths add integer noise in grid units drawn by our own samplers
(:class:`ldpclient.privacy.sampling.DiscreteLaplaceSampler`, :class:`ldpclient.privacy.discrete_gaussian.
DiscreteGaussianSampler`). For each law and scale below, ``--draws`` draws from ours (fixed seed) and as many from
OpenDP's exact sampler of the same law (``then_laplace`` on integers: ``P(z) ∝ e^(-|z|/scale)``; ``then_gaussian``
on integers: ``P(z) ∝ e^(-z²/(2σ²))``; OpenDP draws from the operating system and takes no seed), then a
two-sample chi-square test of homogeneity over the integers (the run of integers around the mode holding at least
40 pooled draws each, one bin per tail beyond it): the p-value, against the stated significance 1e-6. A control
row draws ours at a scale 2 % off, which the test must reject. Each row also times both samplers (one thread,
one run). One JSON line per row to ``--out``.

``tests/privacy/test_opendp_samplers.py`` runs the same comparison at 50,000 draws per case in ``make test`` and at
1,000,000 (the slow mark: this script is what covers it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ldpclient.privacy.discrete_gaussian import discrete_gaussian_sampler
from ldpclient.privacy.sampling import discrete_laplace_sampler, make_generator

#: (law, scale in grid units: the Laplace scale b, or the Gaussian sigma with sigma² an integer variance).
CASES = [("laplace", 0.5), ("laplace", 3.0), ("laplace", 37.5), ("gaussian", 1.0), ("gaussian", 5.0),
         ("gaussian", 40.0)]
#: The significance each comparison is held to (a false alarm once in a million runs).
ALPHA = 1e-6
#: Pooled draws each bin of the chi-square test holds at least.
MIN_BIN = 40


def opendp_draws(law: str, scale: float, n: int) -> np.ndarray:
    """``n`` draws of OpenDP's exact integer sampler of ``law`` at ``scale`` (its noise on a vector of zeros)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    metric = dp.l1_distance(T=int) if law == "laplace" else dp.l2_distance(T=int)
    noise = dp.m.then_laplace(scale=scale) if law == "laplace" else dp.m.then_gaussian(scale=scale)
    measurement = (dp.vector_domain(dp.atom_domain(T=int)), metric) >> noise
    return np.asarray(measurement([0] * n), dtype=np.int64)


def our_draws(law: str, scale: float, n: int, seed: int) -> np.ndarray:
    """``n`` draws of our secure sampler of ``law`` at ``scale`` (the Gaussian's variance ``round(scale²)``)."""
    generator = make_generator(seed=seed)
    if law == "laplace":
        z = discrete_laplace_sampler(scale).sample((n,), generator)
    else:
        z = discrete_gaussian_sampler(round(scale * scale)).sample((n,), generator)
    return torch.as_tensor(z).to(torch.int64).numpy()


def homogeneity_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample chi-square p-value over integer bins: the run of integers around the mode that each hold at least
    :data:`MIN_BIN` pooled draws, one bin per tail beyond it (folded into the run's end bin when thinner)."""
    from scipy import stats

    lo, hi = int(min(a.min(), b.min())), int(max(a.max(), b.max()))
    counts = np.stack([np.bincount(a - lo, minlength=hi - lo + 1), np.bincount(b - lo, minlength=hi - lo + 1)])
    pooled = counts.sum(axis=0)
    thick = pooled >= MIN_BIN
    left = right = int(np.argmax(pooled))
    while left > 0 and thick[left - 1]:
        left -= 1
    while right < len(pooled) - 1 and thick[right + 1]:
        right += 1
    columns = [counts[:, k] for k in range(left, right + 1)]
    below, above = counts[:, :left].sum(axis=1), counts[:, right + 1:].sum(axis=1)
    if below.sum() >= MIN_BIN:
        columns.insert(0, below)
    else:
        columns[0] = columns[0] + below
    if above.sum() >= MIN_BIN:
        columns.append(above)
    else:
        columns[-1] = columns[-1] + above
    table = np.stack(columns, axis=1)
    if table.shape[1] < 3:
        raise ValueError("too few bins for a chi-square test")
    return float(stats.chi2_contingency(table, correction=False).pvalue)


def compare(law: str, scale: float, n: int, *, ours_scale: float | None = None, seed: int = 11) -> dict:
    """One row: the p-value of ours (at ``ours_scale``, default ``scale``) against OpenDP's at ``scale``, and each
    sampler's seconds for the ``n`` draws."""
    start = time.perf_counter()
    ours = our_draws(law, ours_scale or scale, n, seed)
    mid = time.perf_counter()
    theirs = opendp_draws(law, scale, n)
    end = time.perf_counter()
    return {"law": law, "scale": scale, "ours_scale": ours_scale or scale, "draws": n,
            "p_value": homogeneity_pvalue(ours, theirs), "ours_s": round(mid - start, 4),
            "opendp_s": round(end - mid, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/opendp_samplers.jsonl"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [compare(law, scale, args.draws) for law, scale in CASES]
    rows.append({**compare("laplace", 3.0, args.draws, ours_scale=3.06), "control": "ours 2 % off"})
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            row["verdict"] = "same law" if row["p_value"] > ALPHA else "different"
            fh.write(json.dumps(row) + "\n")
            print(f"{row['law']:8} scale {row['scale']:>5g} (ours {row['ours_scale']:g}): p = {row['p_value']:.3g} "
                  f"({row['verdict']}); ours {row['ours_s']:.3f} s, OpenDP {row['opendp_s']:.2f} s "
                  f"({row['opendp_s'] / max(row['ours_s'], 1e-9):.0f}x) for {row['draws']:,} draws")


if __name__ == "__main__":
    main()
