"""Mechanism throughput on a batch of 1000 x 1 x 28 x 28, as ratios to raw torch Laplace sampling.

Run:  nice -n 10 .venv/bin/python benchmarks/bench_mechanisms.py [--repeats 7] [--opendp-elements 20000]

Every figure is the median of ``--repeats`` interleaved rounds (one thread), so the
ratios are measured within one run on the same (shared) machine:

* raw torch Laplace: ``torch.distributions.Laplace(0, b).sample`` of 784,000 elements
  (float32, the natural baseline) and the same in float64;
* TLDP-Laplace, weighted TLDP, Laplace: full ``release`` (validation, clipping, noise,
  keep decisions, float32 output) at epsilon = 1 per element;
* discrete TLDP (secure integer path): full ``release`` on uint8 pixels, eps = 5 per element, p = 0.05;
* OpenDP's exact discrete Laplace (``make_laplace`` on a vector of ints, same scale),
  timed on a subset of ``--opendp-elements`` elements (it is too slow for the whole batch
  at every repeat) and reported per element.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ldpclient.privacy import Domain, discrete_tldp, laplace, tldp_laplace, weighted_tldp


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


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
    m_tldp = tldp_laplace(1.0)
    m_w = weighted_tldp(1.0, weights)
    m_lap = laplace(1.0)
    m_disc = discrete_tldp(5.0, p=0.05, domain=Domain(0, 255, integer=True))
    b_disc = m_disc.guarantee(shape[1:]).params["b"]

    cases = {
        "raw torch Laplace f32": lambda: lap32.sample(shape),
        "raw torch Laplace f64": lambda: lap64.sample(shape),
        "tldp-laplace release": lambda: m_tldp.release(x, generator=g),
        "tldp-weighted release": lambda: m_w.release(x, generator=g),
        "laplace release": lambda: m_lap.release(x, generator=g),
        "discrete-tldp release (secure)": lambda: m_disc.release(xi, generator=g),
    }
    for fn in cases.values():  # warm-up (tables, allocator)
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.repeats):
        for k, fn in cases.items():
            times[k].append(timed(fn))

    opendp_per_element = None
    try:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
        meas = space >> dp.m.then_laplace(scale=float(b_disc))
        data = [int(v) for v in xi.flatten()[: args.opendp_elements].tolist()]
        meas(data[:100])
        od = [timed(lambda: meas(data)) for _ in range(3)]
        opendp_per_element = statistics.median(od) / len(data)
    except ImportError:
        print("opendp not installed: skipping the OpenDP comparison")

    med = {k: statistics.median(v) for k, v in times.items()}
    base32, base64 = med["raw torch Laplace f32"], med["raw torch Laplace f64"]
    print(f"batch {shape}, {n} elements, median of {args.repeats} rounds, 1 thread")
    print(f"{'case':34s} {'ms':>9s} {'Melem/s':>9s} {'time/raw f32':>13s} {'time/raw f64':>13s}")
    for k, t in med.items():
        print(f"{k:34s} {t * 1e3:9.2f} {n / t / 1e6:9.2f} {t / base32:13.2f} {t / base64:13.2f}")
    if opendp_per_element is not None:
        od_rate = 1.0 / opendp_per_element
        ours = n / med["discrete-tldp release (secure)"]
        print(
            f"{'OpenDP discrete Laplace':34s} {opendp_per_element * n * 1e3:9.2f} {od_rate / 1e6:9.2f}"
            f"   (timed on {args.opendp_elements} elements, extrapolated to the batch; scale b={b_disc:.4g})"
        )
        print(f"secure discrete TLDP throughput / OpenDP exact discrete Laplace: {ours / od_rate:.1f}x")


if __name__ == "__main__":
    main()
