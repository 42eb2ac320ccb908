"""Mechanism throughput on a batch of 1000 x 1 x 28 x 28: secure (default) vs float sampling vs OpenDP.

Run:  .venv/bin/python benchmarks/bench_mechanisms.py [--repeats 7] [--opendp-elements 20000]
      (OpenDP comes from the ``bench`` extra: ``.venv/bin/pip install opendp``)

Every figure is the median of ``--repeats`` interleaved rounds (one thread), so the
ratios are measured within one run on the same (shared) machine:

* raw float sampling: ``torch.distributions.Laplace(0, b).sample`` (float32 and float64)
  and ``torch.randn`` float64 of 784,000 elements: the cost of drawing the numbers alone;
* every mechanism's full ``release`` (validation, clipping, noise, keep decisions,
  float32 output) at epsilon = 1 per element (delta = 1e-5), once on the default secure
  integer path and once with ``secure=False`` (float64 sampling);
* discrete TLDP (always secure): ``release`` on uint8 pixels, eps = 5 per element, p = 0.05;
* OpenDP's exact samplers (``then_laplace`` and ``then_gaussian`` on a vector of ints, at
  the secure releases' scales in grid units), timed on the first ``--opendp-elements``
  elements (they are too slow for the whole batch at every repeat) and extrapolated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from ldpclient.privacy import Domain, discrete_tldp, gaussian, laplace, tldp_gaussian, tldp_laplace, weighted_tldp


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def opendp_per_element(kind: str, scale: float, data: list[int]) -> float | None:
    """Seconds per element of OpenDP's exact integer ``kind`` ('laplace' or 'gaussian') sampler."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    metric = dp.l1_distance(T=int) if kind == "laplace" else dp.l2_distance(T=int)
    space = dp.vector_domain(dp.atom_domain(T=int)), metric
    meas = space >> (dp.m.then_laplace(scale=scale) if kind == "laplace" else dp.m.then_gaussian(scale=scale))
    meas(data[:100])
    return statistics.median(timed(lambda: meas(data)) for _ in range(3)) / len(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--opendp-elements", type=int, default=20_000)
    args = ap.parse_args()
    torch.set_num_threads(1)

    shape = (1000, 1, 28, 28)
    n = 1000 * 28 * 28
    g = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=g)
    xi = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    weights = torch.rand(28, 28, generator=g)

    lap32 = torch.distributions.Laplace(torch.tensor(0.0), torch.tensor(1.0))
    lap64 = torch.distributions.Laplace(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    mechanisms = {
        "laplace": lambda secure: laplace(1.0, secure=secure, per="element"),
        "gaussian": lambda secure: gaussian(1.0, 1e-5, secure=secure, per="element"),
        "tldp-laplace": lambda secure: tldp_laplace(1.0, secure=secure, per="element"),
        "tldp-gaussian": lambda secure: tldp_gaussian(1.0, 1e-5, secure=secure, per="element"),
        "tldp-weighted": lambda secure: weighted_tldp(1.0, weights, secure=secure, per="element"),
    }
    m_disc = discrete_tldp(5.0, p=0.05, domain=Domain(0, 255, integer=True), per="element")

    cases: dict[str, Callable[[], object]] = {
        "raw torch Laplace f32": lambda: lap32.sample(shape),
        "raw torch Laplace f64": lambda: lap64.sample(shape),
        "raw torch.randn f64": lambda: torch.randn(shape, dtype=torch.float64, generator=g),
    }
    built = {}
    for name, make in mechanisms.items():
        for secure in (True, False):
            m = built[(name, secure)] = make(secure)
            cases[f"{name} release ({'secure' if secure else 'float'})"] = lambda m=m: m.release(x, generator=g)
    cases["discrete-tldp release (secure)"] = lambda: m_disc.release(xi, generator=g)
    for fn in cases.values():  # warm-up (tables, allocator)
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.repeats):
        for k, fn in cases.items():
            times[k].append(timed(fn))
    med = {k: statistics.median(v) for k, v in times.items()}

    print(f"batch {shape}, {n} elements, median of {args.repeats} rounds, 1 thread")
    print(f"{'case':34s} {'ms':>9s} {'Melem/s':>9s} {'/raw lap f32':>12s} {'/raw randn64':>12s} {'secure/float':>12s}")
    for k, t in med.items():
        pair = ""
        if k.endswith("(secure)") and k.replace("(secure)", "(float)") in med:
            pair = f"{t / med[k.replace('(secure)', '(float)')]:12.2f}"
        print(
            f"{k:34s} {t * 1e3:9.2f} {n / t / 1e6:9.2f} {t / med['raw torch Laplace f32']:12.2f}"
            f" {t / med['raw torch.randn f64']:12.2f} {pair}"
        )

    data = [int(v) for v in xi.flatten()[: args.opendp_elements].tolist()]
    p_lap = built[("laplace", True)].guarantee(shape[1:]).params
    p_gau = built[("gaussian", True)].guarantee(shape[1:]).params
    for kind, scale, ours in (
        ("laplace", p_lap["scale_grid_units"], "laplace release (secure)"),
        ("gaussian", p_gau["sigma"] / p_gau["grid"], "gaussian release (secure)"),
    ):
        per = opendp_per_element(kind, float(scale), data)
        if per is None:
            print("opendp not installed: skipping the OpenDP comparison")
            break
        rate = 1.0 / per
        print(
            f"OpenDP exact discrete {kind} (scale {scale:.4g} grid units): {rate / 1e6:.3f} Melem/s"
            f" (timed on {len(data)} elements); ours (full release) / OpenDP: {n / med[ours] / rate:.0f}x"
        )


if __name__ == "__main__":
    main()
