"""What ``label --decode auto`` decides, and what the decoder it weighs does to the teacher's reading of releases.

For each set, epsilon, kind of public images and seed, this runs the library's own pieces as a label run does,
with the set's cached teacher in process (no student is trained):

* the private images are released once (the default release: Laplace per record, 64 DCT coefficients, the default
  L1 clip; colour: 64 + 16 + 16);
* a quarter of the public images (at most 200, :func:`ldpclient.transfer.defaults.decode_check_images`) is held
  out; the decoder decodes into the rest (:func:`ldpclient.transfer.decoder.fit_decoder`);
* the check (:func:`ldpclient.transfer.decode_check.decode_verdict`): the held-out images sent clean, raw and
  decoded, and the first 200 private releases raw and decoded.

Public images: ``same`` (the set's held-out part), ``classes`` (its images of classes 0-4 only), ``other`` (another
source: MNIST for scikit-learn digits, scikit-learn digits for MNIST, colourised MNIST for colour digits). Columns:
the teacher's accuracy against the truth on all private releases, raw and decoded; how often the class with the most
posterior weight (the teacher's clean answers on the decoder's public images, weighted by the posterior) is the
truth, what the release tells of the class given these public images; the shares of them a chat teacher that
declines below 50 % confidence would decline (the teacher's top softmax probability below 0.5); how many seeds
chose the decoder (with the first refusal's reason)::

    .venv/bin/python benchmarks/bench_decode_check.py --dataset digits mnist colour-digits --eps 20 50 100 --seeds 3

``--same-count N`` gives the decoder more public images of the set's distribution than its public part holds (the
teacher's own images make up the rest); ``--arch resnet`` asks the residual teacher; ``--basis pca`` releases on the
principal components of the public images (``label --basis pca``: 16, colour 16 + 4 + 4, fitted on all of them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_adapt  # noqa: E402

from ldpclient.privacy import Domain, fit_pca, laplace  # noqa: E402
from ldpclient.privacy.base import Mechanism  # noqa: E402
from ldpclient.privacy.release import Release  # noqa: E402
from ldpclient.transfer.decode_check import decode_verdict  # noqa: E402
from ldpclient.transfer.decoder import ReleaseDecoder, fit_decoder  # noqa: E402
from ldpclient.transfer.defaults import decode_check_images, decode_check_records  # noqa: E402

#: The public images of another source, per set.
OTHER = {"digits": "mnist", "mnist": "digits", "colour-digits": "mnist-colour", "fashion": "mnist",
         "cifar10": "mnist-colour"}


def labels(teacher: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([teacher(part).argmax(1) for part in images.split(512)])


def unsure(teacher: torch.nn.Module, images: torch.Tensor, below: float = 0.5) -> float:
    """The share of ``images`` the teacher's top softmax probability is below ``below`` on: what a chat teacher that
    says "cannot tell" below it (the mock's ``--chat-abstain-below``) would decline."""
    with torch.no_grad():
        top = torch.cat([teacher(part).softmax(1).amax(1) for part in images.split(512)])
    return float((top < below).float().mean())


def release_mechanism(basis: str, eps: float, public: torch.Tensor) -> Mechanism:
    """The default release at ``eps`` per record: ``dct`` (64 coefficients, colour 64 + 16 + 16) or ``pca`` (fitted on
    all of ``public``, as ``label --basis pca`` fits it: 16 components, colour 16 + 4 + 4)."""
    if basis == "pca":
        return laplace(eps, per="record", basis=fit_pca(public, Domain(0.0, 1.0)))
    return laplace(eps, per="record", basis="dct", coefficients=64)


def one(teacher: torch.nn.Module, eps: float, px: torch.Tensor, py: torch.Tensor, public: torch.Tensor,
        seed: int, basis: str = "dct") -> tuple[float, float, bool, str, float, float, float]:
    """Raw and decoded accuracy on every private release, the check's decision and reason, the shares of the
    private releases, raw and decoded, that a teacher declining below 50 % confidence would decline, and the
    accuracy of the class the posterior over the public images gives most weight (their clean answers weighted).
    ``basis``: :func:`release_mechanism`'s."""
    mech = release_mechanism(basis, eps, public)
    release = mech.release(px, generator=torch.Generator().manual_seed(seed))
    order = torch.randperm(len(public), generator=torch.Generator().manual_seed(100 + seed))
    k = decode_check_images(len(public))
    check, train = public[order[:k]], public[order[k:]]
    decoder = fit_decoder(mech, train, seed=seed)
    held = mech.release(check, generator=torch.Generator().manual_seed(200 + seed), public=True)
    m = decode_check_records(len(px))
    raw_all = labels(teacher, release.upsampled().values.clamp(0, 1))
    decoded_all = labels(teacher, decoder.decoded(release).values)
    clean, raw = labels(teacher, check), labels(teacher, held.upsampled().values.clamp(0, 1))
    verdict = decode_verdict(clean.numpy(), raw.numpy(), labels(teacher, decoder.decoded(held).values).numpy(),
                             raw_all[:m].numpy(), decoded_all[:m].numpy())
    return (float((raw_all == py).float().mean()), float((decoded_all == py).float().mean()), verdict.chosen,
            verdict.reason, unsure(teacher, release.upsampled().values.clamp(0, 1)),
            unsure(teacher, decoder.decoded(release).values), _posterior_class(teacher, decoder, release, py))


def _posterior_class(teacher: torch.nn.Module, decoder: ReleaseDecoder, release: Release, truth: torch.Tensor) -> float:
    """How often the class with the most posterior weight (the teacher's clean answers on the decoder's public
    images) is the truth: what the release says of the class, given these public images, without the teacher's
    reading of a decoded image."""
    answers = labels(teacher, decoder.images.reshape(-1, *decoder.record_shape).to(torch.float32))
    votes = torch.cat([decoder.posterior(part) @ torch.nn.functional.one_hot(answers, 10).to(torch.float64)
                       for part in release.values.split(256)])
    return float((votes.argmax(1) == truth).float().mean())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["digits"], choices=sorted(OTHER))
    p.add_argument("--eps", type=float, nargs="+", default=[20.0, 50.0, 100.0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--public", nargs="+", default=["same", "classes", "other"], choices=["same", "classes", "other"])
    p.add_argument("--same-count", type=int, default=None,
                   help="public images of the same distribution: the set's public part first, then as many of the "
                   "teacher's own images as it lacks (default: the public part)")
    p.add_argument("--arch", default="small_cnn", choices=bench_adapt.TEACHERS, help="the teacher's network")
    p.add_argument("--basis", default="dct", choices=["dct", "pca"], help="the release basis (pca: --basis pca's "
                   "default, fitted on the public images)")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    for name in args.dataset:
        label, tx, ty, px, py = bench_adapt.load_dataset(name, 28)
        teacher = bench_adapt.cached_teacher(label, tx, ty, args.arch).eval()
        publics = {"same": _same(bench_adapt.public_images(name, 28, None), tx, args.same_count),
                   "classes": bench_adapt.public_images(name, 28, None, shift="classes"),
                   "other": bench_adapt.public_images(OTHER[name], 28, None)}
        for kind, images in publics.items():
            if images.shape[1:] != px.shape[1:]:  # another source at the set's size and channels
                images = torch.nn.functional.interpolate(images, size=px.shape[-2:], mode="bilinear")
                images = images.expand(-1, px.shape[1], -1, -1).contiguous()
            publics[kind] = images
        clean = 100 * float((labels(teacher, px) == py).float().mean())
        print(f"\n{label} ({args.arch} teacher, basis {args.basis}): {len(px)} private images, teacher {clean:.1f} % "
              "on the clean ones; "
              "public images: "
              + ", ".join(f"{k} {len(publics[k])}" for k in args.public))
        print("\n| public | epsilon | raw | decoded | the posterior's class | declined below 50 %: raw / decoded "
              "| decoder chosen | a reason it was refused |")
        print("|---|---|---|---|---|---|---|---|")
        for kind in args.public:
            if decode_check_images(len(publics[kind])) == 0:
                print(f"| {kind} | - | - | - | - | - | never | fewer than 200 public images: no decoder |")
                continue
            for eps in args.eps:
                t0 = time.perf_counter()
                runs = [one(teacher, eps, px, py, publics[kind], seed, args.basis) for seed in range(args.seeds)]
                raw, dec, raw_unsure, dec_unsure, vote = ([r[i] for r in runs] for i in (0, 1, 4, 5, 6))
                refused = next((r[3] for r in runs if not r[2]), "")
                print(f"| {kind} | {eps:g} | {_ms(raw)} | {_ms(dec)} | {_ms(vote)} | {_ms(raw_unsure)} / "
                      f"{_ms(dec_unsure)} | "
                      f"{sum(r[2] for r in runs)} of {len(runs)} | {refused} |  ({time.perf_counter() - t0:.0f} s)",
                      flush=True)


def _same(public: torch.Tensor, teacher_images: torch.Tensor, count: int | None) -> torch.Tensor:
    """``count`` public images of the set's distribution: its public part, then the teacher's images it lacks."""
    if count is None:
        return public
    return torch.cat([public, teacher_images[:max(0, count - len(public))]])[:count]


def _ms(values: list[float]) -> str:
    return (f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}" if len(values) > 1
            else f"{100 * values[0]:.1f}")


if __name__ == "__main__":
    main()
