"""Look-alikes against copies (issue 87): how often the ledger's near-copy check refuses a public image that is not
a copy, on larger public sets than ``bench_fingerprint.py``'s, and what the rules tried against it cost in copies.

For each set, 1,000 private images and every other image of the set as public ones (digits 797, MNIST 4,000,
Fashion-MNIST 8,000, CIFAR-10 8,000; Fashion-MNIST and CIFAR-10 from ``../shared/data``): the check's own search
(:func:`~ldpclient.privacy.ledger.fingerprint.closest`) of every public image among the private images'
fingerprints, and of 200 copies of private images of each kind ``bench_fingerprint.COPY_KINDS`` makes. A row per set
and kind: how many reach ``NEAR`` (refused today), and how many each rule tried would refuse:

* ``ratio R``: refused only where the best match is at least ``1 / R`` times nearer (in ``1 - cosine``) than the
  best match among the other private images (the ratio test of image matching: a copy stands out from its
  original's look-alikes, a look-alike does not);
* ``symmetric 0.999``: a match found through a mirror or a quarter turn (``fingerprint.SYMMETRIES``) needs a cosine
  of 0.999, as such a copy alone loses nothing; with ``--combos``, also on copies that combine a mirror or a turn
  with another edit.

Each refused public image is listed with the private image it was matched to, the cosine, the second-best private
image's, the variant and the two images' pixel correlation (as they are).

    .venv/bin/python benchmarks/bench_lookalikes.py --combos --out benchmarks/results/fingerprint_lookalikes.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fingerprint  # noqa: E402

from ldpclient.privacy.ledger import fingerprint as fp  # noqa: E402

PRIVATE = 1000
COPIES = 200
RATIOS = (0.5, 0.3)
SYMMETRIC_NEAR = 0.999
SETS = ("digits", "mnist", "fashion", "cifar10")
K = bench_fingerprint.COPY_KINDS
COMBOS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mirrored, brighter x1.15": lambda x: K["brighter x1.15"](K["mirrored"](x)),
    "mirrored, jpeg q60": lambda x: K["jpeg q60"](K["mirrored"](x)),
    "turned 90, gamma 0.8": lambda x: K["gamma 0.8"](K["turned 90"](x)),
    "mirrored, centre crop 2 px": lambda x: K["centre crop 2 px"](K["mirrored"](x)),
    "turned 180, 2x upscale": lambda x: K["2x upscale"](K["turned 180"](x)),
}


def parts(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(private, public)`` images of a set, ``(N, C, H, W)`` float32 in [0, 1]: the first 1,000 of a seeded order
    (digits), or the sets' fixed splits' private part and the rest but the teacher's (MNIST: the rest)."""
    def scaled(a: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(a).float() / 255.0
        return x[:, None] if x.dim() == 3 else x

    if name == "digits":
        from ldpclient.io.datasets import load_digits_images
        x, _ = load_digits_images(28)
        order = torch.from_numpy(np.random.default_rng(0).permutation(len(x)))
        return x[order[:PRIVATE]], x[order[PRIVATE:]]
    if name == "mnist":
        import mnist5k
        split = mnist5k.split()
        return scaled(split["private"][0]), torch.cat([scaled(split["teacher"][0]), scaled(split["held_out"][0])])
    import cifar10
    import fashion
    split = cifar10.split() if name == "cifar10" else fashion.split()
    return scaled(split["private"][0]), torch.cat([scaled(split["public"][0]), scaled(split["held_out"][0])])


def _second(block: torch.Tensor, query: fp.Query, at: torch.Tensor) -> torch.Tensor:
    """Each image's largest cosine with the stored images but the one it was matched to (``at``)."""
    out = torch.full((len(at),), -math.inf)
    for a in at.unique().tolist():
        rows = (at == a).nonzero().flatten()
        keep = torch.ones(len(block), dtype=torch.bool)
        keep[a] = False
        sub = fp.Query(query.prints[rows], tuple(g[rows] for g in query.grey))
        out[rows] = fp.closest([block[keep]], sub).similarity
    return out


def measure(images: torch.Tensor, block: torch.Tensor) -> dict[str, torch.Tensor]:
    """The check's match of each image (cosine, private image, variant) and, where refused, the second best."""
    query = fp.query(images)
    near = fp.closest([block], query)
    second = torch.full_like(near.similarity, -math.inf)
    refused = (near.similarity >= fp.NEAR).nonzero().flatten()
    if len(refused):
        sub = fp.Query(query.prints[refused], tuple(g[refused] for g in query.grey))
        second[refused] = _second(block, sub, near.at[refused])
    return {"cosine": near.similarity, "at": near.at, "variant": near.variant, "second": second}


def counts(m: dict[str, torch.Tensor]) -> dict[str, int]:
    refused = m["cosine"] >= fp.NEAR
    symmetric = (m["variant"] > 0) & (m["variant"] < fp.SYMMETRIES)
    out = {"refused": int(refused.sum()),
           f"symmetric {SYMMETRIC_NEAR}": int((refused & (~symmetric | (m["cosine"] >= SYMMETRIC_NEAR))).sum())}
    for r in RATIOS:
        out[f"ratio {r}"] = int((refused & ((1 - m["cosine"]) <= r * (1 - m["second"]))).sum())
    return out


def run_set(name: str, combos: bool) -> list[dict[str, Any]]:
    private, public = parts(name)
    block = next(iter(fp.prints_of([private])))
    m = measure(public, block)
    pairs = []
    for k in (m["cosine"] >= fp.NEAR).nonzero().flatten().tolist():
        j = int(m["at"][k])
        corr = float(np.corrcoef(public[k].flatten().numpy(), private[j].flatten().numpy())[0, 1])
        pairs.append({"public": k, "private": j, "cosine": round(float(m["cosine"][k]), 4),
                      "second": round(float(m["second"][k]), 4), "variant": int(m["variant"][k]),
                      "pixel_correlation": round(corr, 3)})
    rows = [{"set": name, "kind": "public (not copies)", "n": len(public), **counts(m), "pairs": pairs}]
    print(rows[0] | {"pairs": len(pairs)}, flush=True)
    chosen = torch.randperm(len(private), generator=torch.Generator().manual_seed(0))[:COPIES].tolist()
    kinds = {**K, **(COMBOS if combos else {})}
    for kind, make in kinds.items():
        if kind in bench_fingerprint.COLOUR_KINDS and private.shape[1] == 1:
            continue
        made = torch.stack([make(private[k]) for k in chosen])
        rows.append({"set": name, "kind": kind, "n": len(made), **counts(measure(made, block))})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--combos", action="store_true", help="also copies that combine a mirror or turn with an edit")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [row for name in args.sets for row in run_set(name, args.combos)]
    if args.out is not None:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
