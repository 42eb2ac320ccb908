"""``ldpclient noise --decode``: the releases written as ``label`` sends them, decoded by the decoder ``label``
trains on the same public images (one decoder in the state for both commands), at no privacy cost."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from support.cli_runs import invoke, mock_teacher
from support.image_folders import random_png_folder


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    return (random_png_folder(tmp_path / "private", seed=0, n=20),
            random_png_folder(tmp_path / "public", seed=1, n=200))


def _noise(private: Path, tmp_path: Path, out: str, *extra: str) -> tuple[int, dict, str]:
    res = invoke(["noise", str(private), "--out", str(tmp_path / out), "--size", "8", "--epsilon", "50",
                  "--state-dir", str(tmp_path / "state"), "--seed", "3", "--json", *extra])
    return res.exit_code, json.loads(res.stdout) if res.exit_code == 0 else {}, res.output


def _pixels(folder: Path) -> np.ndarray:
    return np.stack([np.asarray(Image.open(p)) for p in sorted(folder.glob("img*.png"))])


def test_noise_writes_releases_decoded_at_no_privacy_cost_the_same_each_run(tmp_path: Path) -> None:
    private, public = _folders(tmp_path)
    code, raw, output = _noise(private, tmp_path, "raw")
    assert code == 0, output
    assert raw["decoding"] is None  # not asked
    code, decoded, output = _noise(private, tmp_path, "decoded", "--public", str(public), "--decode", "always")
    assert code == 0, output
    decoding = decoded["decoding"]
    assert decoding["chosen"] is True and decoding["public_images"] == 200
    assert decoded["ledger"]["fresh"] == 0 and decoded["ledger"]["reused"] == 20  # the same releases, decoded
    assert decoded["ledger"]["max_spent_epsilon"] == raw["ledger"]["max_spent_epsilon"]
    assert decoded["guarantee"] == raw["guarantee"]  # decoding is post-processing: the same epsilon
    assert not np.array_equal(_pixels(tmp_path / "raw"), _pixels(tmp_path / "decoded"))
    code, again, output = _noise(private, tmp_path, "again", "--public", str(public), "--decode", "always")
    assert code == 0, output
    assert again["decoding"] == decoding
    assert np.array_equal(_pixels(tmp_path / "decoded"), _pixels(tmp_path / "again"))
    code, _, output = _noise(private, tmp_path, "shown", "--public", str(public), "--decode", "always")
    assert code == 0 and (tmp_path / "shown" / "preview.png").is_file()


def test_noise_decode_auto_follows_the_check_of_a_label_run_for_the_same_teacher(tmp_path: Path) -> None:
    private, public = _folders(tmp_path)
    code, before, output = _noise(private, tmp_path, "before", "--public", str(public), "--decode", "auto")
    assert code == 0, output
    assert before["decoding"]["chosen"] is False and "no label run has checked" in before["decoding"]["reason"]
    with mock_teacher() as srv:
        label = invoke(["label", str(private), "--teacher", srv.model_url, "--public", str(public), "--decode",
                        "auto", "--epsilon", "50", "--queries", "100", "--epochs", "1", "--state-dir",
                        str(tmp_path / "state"), "--output", str(tmp_path / "labels.csv"), "--json"])
        assert label.exit_code == 0, label.output
        code, after, output = _noise(private, tmp_path, "after", "--public", str(public), "--decode", "auto",
                                     "--teacher", srv.model_url)
        assert srv.usage()["total"]["images"] == json.loads(label.stdout)["queries"]["sent"]  # noise sent nothing
    assert code == 0, output
    checked, followed = json.loads(label.stdout)["decoding"], after["decoding"]
    assert followed["decoder"] == checked["decoder"]  # the same public images, mechanism and seed: one decoder
    assert followed["chosen"] is checked["chosen"]
    assert followed["reason"].endswith(checked["reason"][:100]) or checked["reason"][:100] in followed["reason"]


def test_noise_refuses_a_public_image_that_is_private_and_says_why_it_cannot_decode(tmp_path: Path) -> None:
    private, public = _folders(tmp_path)
    (public / "copy.png").write_bytes((private / "img03.png").read_bytes())
    code, _, output = _noise(private, tmp_path, "copied", "--public", str(public), "--decode", "always")
    assert code != 0 and "are also in the private images" in output and "Traceback" not in output
    assert not (tmp_path / "copied").exists() or not any((tmp_path / "copied").iterdir())  # nothing written
    code, _, output = _noise(private, tmp_path, "unused", "--public", str(public))
    assert code == 2 and "--decode always" in output  # --public alone would do nothing: said, not ignored
    few = random_png_folder(tmp_path / "few", seed=2, n=30)
    code, doc, output = _noise(private, tmp_path, "few_out", "--public", str(few), "--decode", "always")
    assert code == 0, output
    assert doc["decoding"]["chosen"] is False and "200 public images" in doc["decoding"]["reason"]
    code, doc, output = _noise(private, tmp_path, "pixels", "--public", str(few), "--decode", "always",
                               "--basis", "pool")
    assert code == 0, output
    assert doc["decoding"]["chosen"] is False and "pixels" in doc["decoding"]["reason"]


def test_noise_leaves_out_a_near_copy_of_a_private_image_with_public_skip_copies(tmp_path: Path) -> None:
    private, public = _folders(tmp_path)
    Image.open(private / "img03.png").transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(public / "mirrored.png")
    code, _, output = _noise(private, tmp_path, "refused", "--public", str(public), "--decode", "always")
    assert code != 0 and "mirrored.png" in output and "--public-skip-copies" in output and "Traceback" not in output
    code, doc, output = _noise(private, tmp_path, "skipped", "--public", str(public), "--decode", "always",
                               "--public-skip-copies")
    assert code == 0, output
    assert [s["path"] for s in doc["public_skipped"]] == ["mirrored.png"]
    assert "img03.png" in doc["public_skipped"][0]["reason"]
    (public / "mirrored.png").unlink()
    code, without, output = _noise(private, tmp_path, "without", "--public", str(public), "--decode", "always")
    assert code == 0, output
    assert doc["decoding"]["decoder"] == without["decoding"]["decoder"]  # decoded into the images left alone
