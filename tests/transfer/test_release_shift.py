"""Whether the private images are like the public ones, read from the releases alone: the release shift, and the
verdict that rests on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ldpclient.privacy import Domain, fit_pca, laplace
from ldpclient.run.check_file import CheckSet
from ldpclient.run.check_score import check_evidence
from ldpclient.run.verdict import DOUBTFUL, NOT_WORTH, USABLE, judge
from ldpclient.transfer.release_shift import release_shift
from support.cli_runs import invoke, mock_teacher
from support.image_folders import random_png_folder

BALANCED = [36] * 10
ANSWERS = [400, 300, 350, 380, 420, 390, 310, 330, 560, 360]


def _images(n: int, seed: int, half_lit: bool = False) -> torch.Tensor:
    """Uniform random pixels; ``half_lit``: the left half at least 0.7, the right half at most 0.3."""
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
    if half_lit:
        x[..., :4] = 0.7 + 0.3 * x[..., :4]
        x[..., 4:] = 0.3 * x[..., 4:]
    return x


@pytest.mark.parametrize("basis", ["dct", "pca"])
def test_releases_of_images_like_the_public_ones_stay_under_the_limit_and_others_do_not(basis: str) -> None:
    public = _images(300, 0)
    mech = laplace(50, per="record", basis=fit_pca(public, Domain(0.0, 1.0)) if basis == "pca" else "dct")
    for seed in range(3):
        alike = mech.release(_images(200, 10 + seed), generator=torch.Generator().manual_seed(seed)).values
        found = release_shift(mech, public, alike, seed=1)
        assert found is not None and not found.unlike, found
        other = mech.release(_images(200, 10 + seed, half_lit=True), generator=torch.Generator().manual_seed(seed))
        shifted = release_shift(mech, public, other.values, seed=1)
        assert shifted is not None and shifted.unlike and shifted.shift > 10 * shifted.limit, shifted
    assert release_shift(laplace(50, per="record", basis="pool"), public, public.flatten(1), seed=1) is None


def test_unlike_public_images_make_labels_doubtful_without_a_check_set_and_a_reason_with_one() -> None:
    base = dict(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, public_held_out=(450, 500))
    assert judge(**base, release_shift=(1.1, 1.7)).level == USABLE  # type: ignore[arg-type]
    unlike = judge(**base, release_shift=(30.0, 1.7))  # type: ignore[arg-type]
    assert unlike.level == DOUBTFUL and "do not look like releases of the public images" in unlike.reasons[0]
    names = [f"img{k:03d}.png" for k in range(100)]
    check = check_evidence(CheckSet({n: k % 10 for k, n in enumerate(names)}, "check.csv"), names,
                           [k % 10 for k in range(100)], None)
    checked = judge(**base, check=check, release_shift=(30.0, 1.7))  # type: ignore[arg-type]
    assert checked.level == USABLE and any("do not look like" in r for r in checked.reasons)


def _half_lit_folder(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for k, image in enumerate(_images(n, 7, half_lit=True)):
        Image.fromarray((255 * image[0].numpy()).round().astype(np.uint8)).save(folder / f"lit{k:02d}.png")
    return folder


def test_a_run_says_when_its_public_images_are_unlike_its_private_ones(tmp_path: Path) -> None:
    private = random_png_folder(tmp_path / "private", seed=0, n=60)
    alike, lit = random_png_folder(tmp_path / "alike", seed=1, n=60), _half_lit_folder(tmp_path / "lit", 60)
    reports = {}
    with mock_teacher() as srv:
        for name, public in (("alike", alike), ("lit", lit)):
            res = invoke(["label", str(private), "--teacher", srv.model_url, "--public", str(public), "--epsilon",
                          "50", "--queries", "60", "--epochs", "1", "--state-dir", str(tmp_path / name),
                          "--output", str(tmp_path / f"{name}.csv"), "--json"])
            assert res.exit_code == 0, res.output
            reports[name] = json.loads(res.stdout)
    assert reports["alike"]["release_shift"]["unlike"] is False
    assert reports["lit"]["release_shift"]["unlike"] is True
    assert reports["lit"]["verdict"]["level"] in (DOUBTFUL, NOT_WORTH)  # never usable on such public images
    assert any("do not look like releases of the public images" in r for r in reports["lit"]["verdict"]["reasons"])
    assert not any("do not look like" in r for r in reports["alike"]["verdict"]["reasons"])
