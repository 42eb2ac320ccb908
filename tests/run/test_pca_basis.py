"""``--basis pca``: ``label`` and ``noise`` release in a basis fitted on the ``--public`` images, never on a private
one, at the guarantee of a ``dct`` release of as many coefficients."""

from __future__ import annotations

import json
from pathlib import Path

from ldpclient.privacy import laplace
from support.cli_runs import invoke, mock_teacher
from support.image_folders import random_png_folder


def _label(url: str, private: Path, tmp_path: Path, name: str, *extra: str) -> tuple[int, dict, str]:
    res = invoke(["label", str(private), "--teacher", url, "--basis", "pca", "--epsilon", "50", "--queries", "60",
                  "--epochs", "1", "--state-dir", str(tmp_path / "state"), "--output", str(tmp_path / f"{name}.csv"),
                  "--json", *extra])
    return res.exit_code, json.loads(res.stdout) if res.exit_code == 0 else {}, res.output


def test_label_releases_in_the_basis_of_the_public_images_whatever_the_private_ones(tmp_path: Path) -> None:
    public = random_png_folder(tmp_path / "public", seed=1, n=40)
    first = random_png_folder(tmp_path / "first", seed=0, n=12)
    second = random_png_folder(tmp_path / "second", seed=2, n=12)
    with mock_teacher() as srv:
        code, a, output = _label(srv.model_url, first, tmp_path, "a", "--public", str(public))
        assert code == 0, output
        code, b, output = _label(srv.model_url, second, tmp_path, "b", "--public", str(public))
        assert code == 0, output
    config = a["mechanism"]["config"]
    assert config["basis"] == "pca" and config["coefficients"] == 16 and len(config["basis_digest"]) == 16
    assert b["mechanism"]["config"] == config  # fitted on the public images alone: the same basis for both folders
    dct = laplace(50, per="record", basis="dct", coefficients=16).guarantee((1, 8, 8))
    assert a["guarantee"]["per_record"]["epsilon"] == dct.epsilon_record  # the default clip of 16 coefficients
    assert a["guarantee"]["params"]["clip_norm"] == dct.params["clip_norm"]


def test_a_run_without_enough_public_images_stops_before_anything_is_sent(tmp_path: Path) -> None:
    private = random_png_folder(tmp_path / "private", seed=0, n=12)
    few = random_png_folder(tmp_path / "few", seed=1, n=10)
    with mock_teacher() as srv:
        code, _, output = _label(srv.model_url, private, tmp_path, "none")
        assert code == 2 and "--basis pca is fitted on public images: give --public DIR" in output
        code, _, output = _label(srv.model_url, private, tmp_path, "few", "--public", str(few))
        assert code == 2 and "16 components need more than 16" in output and "Traceback" not in output
        assert srv.usage()["total"]["images"] == 0


def test_noise_writes_pca_releases_fitted_on_its_public_images(tmp_path: Path) -> None:
    private = random_png_folder(tmp_path / "private", seed=0, n=8)
    public = random_png_folder(tmp_path / "public", seed=1, n=40)
    args = ["noise", str(private), "--size", "8", "--epsilon", "50", "--basis", "pca", "--state-dir",
            str(tmp_path / "state"), "--json"]
    res = invoke([*args, "--out", str(tmp_path / "out"), "--public", str(public)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["guarantee"]["params"]["basis"] == "pca" and report["counts"]["noised"] == 8
    assert len(list((tmp_path / "out").glob("img*.png"))) == 8
    res = invoke([*args, "--out", str(tmp_path / "bare")])
    assert res.exit_code == 2 and "give --public DIR" in res.output


def test_audit_simulates_a_pca_client_from_the_public_images_of_its_run(tmp_path: Path) -> None:
    private = random_png_folder(tmp_path / "private", seed=0, n=12)
    public = random_png_folder(tmp_path / "public", seed=1, n=40)
    other = random_png_folder(tmp_path / "other", seed=3, n=40)
    with mock_teacher() as srv:
        code, _, output = _label(srv.model_url, private, tmp_path, "run", "--public", str(public), "--report",
                                 str(tmp_path / "run.json"))
        assert code == 0, output
    args = ["audit", "--private", str(private), "--run", str(tmp_path / "run.json"), "--sweep", "50", "--no-rme",
            "--no-empirical", "--cnn-steps", "0", "--max-queries", "20", "--out", str(tmp_path / "audit"), "--json"]
    res = invoke(args)
    assert res.exit_code == 2 and "give --public DIR" in res.output
    res = invoke([*args, "--public", str(other)])
    assert res.exit_code == 2 and "give the --public folder the run was given" in res.output
    res = invoke([*args, "--public", str(public)])
    assert res.exit_code == 0, res.output
