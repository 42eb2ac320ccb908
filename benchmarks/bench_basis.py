"""What one release carries about its record, by release basis: the teacher's label of each record's own
release (SIDP accuracy; chance 10 %), and of its noise-free reconstruction (the ceiling of a basis).

Runs on the real-data sets of ``bench_adapt.py`` (digits at 28x28, MNIST-5k and its coloured 32x32 version, the
same cached teachers; colour keeps K luminance and K // 4 coefficients per chroma axis)
through the library's mechanisms: average pooling by 4 with Laplace noise (the default) against the ``dct``
basis (Laplace with an L1 clip and Gaussian with an L2 clip, at several coefficient counts, default clip
bounds; randomized response on a quantised code of the same coefficients, ``quantised-rr``). Each figure is the
mean over ``--seeds`` release seeds; releases are clipped to [0, 1] (the default
post-processing's last step) before the teacher sees them::

    .venv/bin/python benchmarks/bench_basis.py --dataset digits mnist --eps 10 20 50 100 --seeds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402

from ldpclient.privacy import Domain, gaussian, laplace, make_mechanism  # noqa: E402
from ldpclient.privacy.basis import dct_layout  # noqa: E402


def variants(eps: float, coefficients: list[int], spectra: dict[int, tuple] | None = None) -> dict[str, object]:
    """The release designs compared; ``spectra``: per K, the public images' coefficient means and scales (adds
    ``quantised-rr`` with its cells and bits from them)."""
    out: dict[str, object] = {"pool 4, laplace": laplace(eps, per="record", reduction=4)}
    for k in coefficients:
        out[f"dct {k}, laplace L1"] = laplace(eps, per="record", basis="dct", coefficients=k)
        out[f"dct {k}, gaussian L2"] = gaussian(eps, 1e-5, per="record", basis="dct", coefficients=k)
        out[f"dct {k}, quantised-rr"] = make_mechanism("quantised-rr", epsilon=eps, per="record", coefficients=k)
        if spectra:
            out[f"dct {k}, quantised-rr, public spectrum"] = make_mechanism(
                "quantised-rr", epsilon=eps, per="record", coefficients=k, spectrum=spectra[k])
    return out


def public_spectrum(images: torch.Tensor, k: int) -> tuple[list[float], list[float]]:
    """The mean and standard deviation of each of the K kept coefficients over public ``images``."""
    coef = dct_layout(tuple(images.shape[1:]), Domain(0.0, 1.0), "l2", k, None).forward(images.double())
    return coef.mean(0).tolist(), coef.std(0).clamp_min(1e-3).tolist()


def sidp(teacher: torch.nn.Module, mech, x: torch.Tensor, y: torch.Tensor, seed: int) -> float:
    rel = mech.release(x, generator=torch.Generator().manual_seed(seed))
    values = rel.upsampled("bilinear").values if rel.released_shape != rel.record_shape else rel.values
    with torch.no_grad():
        return float((teacher(values.clamp(0, 1)).argmax(1) == y).float().mean())


def ceiling(teacher: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, k: int) -> tuple[float, float, float]:
    """Teacher accuracy on noise-free reconstructions from ``k`` coefficients: unclipped, and clipped to the
    default L1 bound (what the noise is added to); and the share of records that bound clips."""
    layout = dct_layout(tuple(x.shape[1:]), Domain(0.0, 1.0), "l1", k, None)
    coef = layout.forward(x.double())
    clipped, over = layout.clip(coef)
    with torch.no_grad():
        accs = []
        for c in (coef, clipped):
            rebuilt = layout.inverse(c).float().clamp(0, 1)
            accs.append(float((teacher(rebuilt).argmax(1) == y).float().mean()))
    return accs[0], accs[1], float(over.float().mean())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["digits", "mnist"], choices=bench_adapt.DATASETS)
    p.add_argument("--eps", type=float, nargs="+", default=[10.0, 20.0, 50.0, 100.0])
    p.add_argument("--coefficients", type=int, nargs="+", default=[25, 64, 100])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--teacher", choices=bench_adapt.TEACHERS, default="small_cnn", help="the cached teacher")
    p.add_argument("--public", type=int, default=None,
                   help="also quantised-rr with its spectrum from this many of the set's public (held-out) images")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.dataset:
        label, tx, ty, px, py = bench_adapt.load_dataset(name, 28)
        teacher = bench_adapt.cached_teacher(label, tx, ty, args.teacher)
        print(f"\n{label}: {len(px)} private records; teacher on noise-free dct reconstructions (unclipped / clipped"
              " to the default L1 bound), and the share of records that bound clips:")
        for k in args.coefficients:
            full, clipped, share = ceiling(teacher, px, py, k)
            print(f"  {k} coefficients: {100 * full:.1f} / {100 * clipped:.1f} %; {100 * share:.0f} % clipped")
        spectra = None
        if args.public:
            public = bench_adapt.public_images(name, 28, args.public)
            spectra = {k: public_spectrum(public, k) for k in args.coefficients}
        names = list(variants(1.0, args.coefficients, spectra))
        print(f"\n| {label}: SIDP accuracy, % | " + " | ".join(f"eps {e:g}" for e in args.eps) + " |")
        print("|---|" + "---|" * len(args.eps))
        table = {n: [] for n in names}
        for eps in args.eps:
            for n, mech in variants(eps, args.coefficients, spectra).items():
                accs = [sidp(teacher, mech, px, py, seed) for seed in range(args.seeds)]
                sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
                table[n].append(f"{100 * statistics.mean(accs):.1f} ± {100 * sd:.1f}")
        for n in names:
            print(f"| {n} | " + " | ".join(table[n]) + " |")


if __name__ == "__main__":
    main()
