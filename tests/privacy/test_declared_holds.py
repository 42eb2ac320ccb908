"""What the user declared holds everywhere: the privacy cap lives in the ledger, the ledger knows which
images are private (near copies included), and every state file is versioned. Through the command line against
the real mock teacher on 127.0.0.1; tiny folders (12 images), so what is checked is what was charged, sent and
billed, not accuracy.
"""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ldpclient.cli.errors import EXIT_PRIVACY_CAP, EXIT_USAGE
from support.cli_runs import charged_images, invoke, label_args, mock_teacher, paid_batches, private_folder

# ---------------------------------------------------------------- the cap lives in the ledger


def _budget(tmp_path: Path, *extra: str) -> dict:
    res = invoke(["budget", "--state-dir", str(tmp_path / "state"), "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _noise(folder: Path, url: str, tmp_path: Path, *extra: str):
    return invoke(["noise", str(folder), "--out", str(tmp_path / "noised"), "--teacher", url, "--reduce", "2",
                 "--epsilon", "4", "--epsilon-unit", "element", "--state-dir", str(tmp_path / "state"), *extra])


def test_a_cap_set_once_holds_for_a_later_noise_without_one(tmp_path: Path) -> None:
    """The issue's case: runs with a cap, then a preview without one pushed every image past it."""
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        # 4 x 4 elements x 4 = 64 each
        first = invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "100"))
        assert first.exit_code == 0, first.output
        spent = _budget(tmp_path)["epsilon"]["max"]
        again = _noise(folder, srv.model_url, tmp_path, "--epsilon", "3")  # a fresh release: 48 more
        assert again.exit_code == EXIT_PRIVACY_CAP, again.output
        assert "privacy cap" in again.stderr
    summary = _budget(tmp_path)
    assert summary["epsilon"]["max"] == pytest.approx(spent) and summary["cap_epsilon"] == 100
    assert summary["records_over_cap"] == 0
    assert [h["origin"] for h in summary["cap_history"]] == ["--privacy-cap"]


def test_a_higher_cap_is_refused_until_raised_explicitly_and_the_raise_is_recorded(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "100")).exit_code == 0
        charged, paid = charged_images(tmp_path), paid_batches(tmp_path)
        higher = invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "200"))
        assert higher.exit_code == EXIT_USAGE, higher.output
        line = higher.stderr.strip().splitlines()[-1]
        assert "--privacy-cap 200 is above the privacy cap this state holds (epsilon 100 per image)" in line
        assert "ldpclient budget --set-cap 200" in line
        dry = invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "200", "--dry-run"))
        assert dry.exit_code == EXIT_USAGE and "budget --set-cap 200" in dry.stderr
        assert (charged_images(tmp_path), paid_batches(tmp_path)) == (charged, paid)
        raised = _budget(tmp_path, "--set-cap", "200")
        assert raised["cap_epsilon"] == 200
        assert [h["origin"] for h in raised["cap_history"]] == ["--privacy-cap", "budget --set-cap"]
        noise = _noise(folder, srv.model_url, tmp_path, "--epsilon", "3", "--json")  # 48 more: 112 of 200
        assert noise.exit_code == 0, noise.output
        assert json.loads(noise.stdout)["ledger"]["cap_epsilon"] == 200


def test_lowering_the_cap_below_the_spend_freezes_those_images_and_budget_says_over(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path)).exit_code == 0  # 64 per image, no cap
        lowered = _budget(tmp_path, "--set-cap", "10")
        charged = lowered["records"]  # 24 pairs of 12 images may leave one out: never released, never charged
        assert charged >= 11 and lowered["records_at_cap"] == charged and lowered["records_over_cap"] == charged
        text = invoke(["budget", "--state-dir", str(tmp_path / "state")])
        assert f"{charged} of them over it" in text.output
        reused = invoke(label_args(folder, srv.model_url, tmp_path))  # the stored releases: nothing fresh to charge
        assert reused.exit_code == 0, reused.output
        fresh = _noise(folder, srv.model_url, tmp_path, "--epsilon", "0.5")
        assert fresh.exit_code == EXIT_PRIVACY_CAP, fresh.output
        assert _budget(tmp_path, "--set-cap", "none")["cap_epsilon"] is None


def test_set_cap_refuses_a_value_that_is_not_an_epsilon(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path)).exit_code == 0
    for bad in ("-1", "nan", "inf", "lots"):
        res = invoke(["budget", "--state-dir", str(tmp_path / "state"), "--set-cap", bad])
        assert res.exit_code == EXIT_USAGE and "--set-cap must be a per-image epsilon" in res.stderr, bad


def test_the_library_ledger_keeps_the_cap_too(tmp_path: Path) -> None:
    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import Ledger
    from ldpclient.privacy.ledger.errors import CapRaiseRefused

    path = tmp_path / "ledger.sqlite"
    x = torch.rand(4, 1, 8, 8)
    with Ledger(path, cap_epsilon=5.0) as led:
        led.release(laplace(4.0 / 64, per="element"), x, scope="t")  # 4 per image of 64 elements
    with Ledger(path) as led:  # no cap given: the ledger's holds
        assert led.cap_epsilon == 5.0
        with pytest.raises(Exception, match="cap"):
            led.release(laplace(2.0 / 64, per="element"), x, scope="t")
    with pytest.raises(CapRaiseRefused):
        Ledger(path, cap_epsilon=6.0)
    with Ledger(path, cap_epsilon=4.5) as led:  # lower: recorded, holds from now on
        assert [h["epsilon"] for h in led.cap_history()] == [5.0, 4.5]
    with Ledger(path) as led:
        assert led.cap_epsilon == 4.5


# ---------------------------------------------------------------- the ledger knows which images are private


def _smooth(n: int, seed: int, side: int = 28) -> list[np.ndarray]:
    """Distinct smooth 8-bit grey images (a few random blobs each): what a photo looks like to a fingerprint."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / side
    out = []
    for _ in range(n):
        img = np.zeros((side, side))
        for _ in range(4):
            cy, cx, s, a = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), rng.uniform(0.05, 0.2), rng.uniform(-1, 1)
            img += a * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        img = (img - img.min()) / (img.max() - img.min() + 1e-9)
        out.append((img * 255).round().astype(np.uint8))
    return out


def _write(folder: Path, images: list[np.ndarray], prefix: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for k, img in enumerate(images):
        Image.fromarray(img).save(folder / f"{prefix}{k:02d}.png")


def _args28(folder: Path, url: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["label", str(folder), "--teacher", url, "--state-dir", str(tmp_path / "state"), "--output",
            str(tmp_path / "out" / "labels.csv"), "--epsilon", "20", "--queries", "24", "--batch-size", "8",
            "--epochs", "1", "--price", "0.01", "--max-retry-time", "0", *extra]


def test_an_image_the_ledger_charged_is_refused_as_public_from_any_folder(tmp_path: Path) -> None:
    """The issue's case: after `noise priv`, `label pub --public priv` sent all the private images as they are."""
    folder = private_folder(tmp_path)
    other = tmp_path / "other"
    _write(other, _smooth(12, 5, 8), "o")
    with mock_teacher() as srv:
        assert _noise(folder, srv.model_url, tmp_path, "--privacy-cap", "100").exit_code == 0
        res = invoke(label_args(other, srv.model_url, tmp_path, "--public", str(folder), "--privacy-cap", "100"))
        assert res.exit_code == EXIT_USAGE, res.output
        line = res.stderr.strip().splitlines()[-1]
        assert "12 image(s) are private images" in line
        assert "charged as a private image" in line and "nothing was sent" in line
        assert srv.usage()["total"]["images"] == 0 and paid_batches(tmp_path) == 0


def test_near_copies_of_private_images_are_refused_as_public_and_distinct_images_are_not(tmp_path: Path) -> None:
    """A quality-90 JPEG of a private PNG, a 2x upscale, a brighter copy, a copy cropped by 1 pixel a side, one
    cropped off-centre (2 pixels off the top and left) and one moved 2 pixels right (the left edge repeated)."""
    private = _smooth(12, 1)
    _write(tmp_path / "private", private, "p")
    near = tmp_path / "near"
    near.mkdir()
    jpeg = io.BytesIO()
    Image.fromarray(private[0]).save(jpeg, "JPEG", quality=90)
    (near / "copy.jpg").write_bytes(jpeg.getvalue())
    Image.fromarray(private[1]).resize((56, 56), Image.BICUBIC).save(near / "up.png")
    Image.fromarray(np.clip(private[2].astype(int) * 1.15, 0, 255).astype(np.uint8)).save(near / "bright.png")
    Image.fromarray(private[3][1:-1, 1:-1]).save(near / "crop.png")
    Image.fromarray(private[4][2:, 2:]).save(near / "offcentre.png")
    Image.fromarray(np.concatenate([private[5][:, :1]] * 2 + [private[5][:, :-2]], 1)).save(near / "shifted.png")
    _write(tmp_path / "distinct", _smooth(30, 2), "d")
    with mock_teacher(image_size=28) as srv:
        first = invoke(_args28(tmp_path / "private", srv.model_url, tmp_path))
        assert first.exit_code == 0, first.output
        paid = paid_batches(tmp_path)
        for name in ("copy.jpg", "up.png", "bright.png", "crop.png", "offcentre.png", "shifted.png"):
            one = tmp_path / f"pub-{name}"
            one.mkdir()
            (one / name).write_bytes((near / name).read_bytes())
            res = invoke(_args28(tmp_path / "private", srv.model_url, tmp_path, "--public", str(one)))
            assert res.exit_code == EXIT_USAGE, (name, res.output)
            assert "a near copy of a private image" in res.stderr, name
        assert paid_batches(tmp_path) == paid  # nothing sent for any of them
        ok = invoke(_args28(tmp_path / "private", srv.model_url, tmp_path, "--public", str(tmp_path / "distinct"),
                          "--json"))
        assert ok.exit_code == 0, ok.output


def test_mirrored_turned_inverted_and_re_encoded_copies_of_this_runs_own_images_are_refused_on_a_first_run(
        tmp_path: Path) -> None:
    """Nothing charged yet: the copies are of the private images the same run labels, not of the ledger's."""
    private = _smooth(12, 3)
    _write(tmp_path / "private", private, "p")
    jpeg = io.BytesIO()
    Image.fromarray(private[6]).save(jpeg, "JPEG", quality=80)
    copies = {"mirrored.png": private[0][:, ::-1], "turned90.png": np.rot90(private[1]).copy(),
              "turned180.png": np.rot90(private[2], 2).copy(), "inverted.png": 255 - private[3],
              "turned5.png": np.asarray(Image.fromarray(private[4]).rotate(5, resample=Image.BILINEAR)
                                        .crop((2, 2, 26, 26)).resize((28, 28), Image.BILINEAR)),
              "bright.png": np.clip(private[5].astype(int) * 1.15, 0, 255).astype(np.uint8)}
    with mock_teacher(image_size=28) as srv:
        for name, image in [*copies.items(), ("copy.jpg", None)]:
            one = tmp_path / f"pub-{name}"
            one.mkdir()
            if image is None:
                (one / name).write_bytes(jpeg.getvalue())
            else:
                Image.fromarray(np.ascontiguousarray(image)).save(one / name)
            res = invoke(_args28(tmp_path / "private", srv.model_url, tmp_path, "--public", str(one)))
            assert res.exit_code == EXIT_USAGE, (name, res.output)
            line = res.stderr.strip().splitlines()[-1]
            assert "a near copy of a private image" in line and "nothing was sent" in line, name
        assert srv.usage()["total"]["images"] == 0 and paid_batches(tmp_path) == 0 and charged_images(tmp_path) == 0


def test_copies_in_a_public_folder_are_named_with_their_private_twins_and_can_be_left_out(tmp_path: Path) -> None:
    """A large public folder holding a few re-cropped copies of private images (as CIFAR-10's train set holds some of
    its test photos): the refusal names each copy with the private image it copies; --public-skip-copies leaves them
    out (never sent) and lists each in the report, and the rest are sent."""
    private = _smooth(12, 3)
    _write(tmp_path / "private", private, "img")
    public = _smooth(10, 9)
    public[2] = np.asarray(Image.fromarray(private[7]).crop((1, 1, 27, 27)).resize((28, 28), Image.BILINEAR))
    public[6] = private[4][:, ::-1].copy()
    _write(tmp_path / "public", public, "pub")
    with mock_teacher(image_size=28) as srv:
        refused = invoke(_args28(tmp_path / "private", srv.model_url, tmp_path, "--public", str(tmp_path / "public")))
        assert refused.exit_code == EXIT_USAGE, refused.output
        line = refused.stderr.strip().splitlines()[-1]
        assert "2 image(s) are private images" in line and "--public-skip-copies" in line
        assert "'pub02.png': a near copy of a private image, 'img07.png'" in line
        assert "'pub06.png': a near copy of a private image, 'img04.png'" in line
        assert srv.usage()["total"]["images"] == 0 and paid_batches(tmp_path) == 0
        ok = invoke(_args28(tmp_path / "private", srv.model_url, tmp_path, "--public", str(tmp_path / "public"),
                            "--public-skip-copies"))
        assert ok.exit_code == 0, ok.output
        sent = srv.usage()["total"]["images"]
    report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
    skipped = {s["path"]: s["reason"] for s in report["public_skipped"]}
    assert set(skipped) == {"pub02.png", "pub06.png"} and "'img07.png'" in skipped["pub02.png"]
    assert report["queries"]["public_sent"] == 8 and sent == 24 + 8  # the private queries and 8 public images


def test_the_mirror_checks_copies_are_checked_before_anything_is_sent(tmp_path: Path) -> None:
    """A copy the mirror check would send is refused like a public image (here the check's mirrored copy is, by
    construction, a private image)."""
    from types import SimpleNamespace

    from ldpclient.privacy.ledger import Ledger
    from ldpclient.run.public_images import known_private, refuse_known_private

    private = torch.from_numpy(np.stack(_smooth(6, 4))).float()[:, None] / 255
    public = torch.from_numpy(np.stack(_smooth(4, 8))).float()[:, None] / 255
    carriers = SimpleNamespace(records=public, printable_paths=[f"pub{k}.png" for k in range(4)])
    own = SimpleNamespace(records=private, printable_paths=[f"img{k}.png" for k in range(6)])
    check = SimpleNamespace(images=torch.cat([public[:2].flip(-1), private[:1], public[1:2]]), sample=np.array([0, 3]),
                            size=2)
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        assert known_private(ledger, carriers, domain=None, private=own) == {}  # the images pass
        copies = known_private(ledger, carriers, domain=None, private=own, check=check)
    assert list(copies) == [0] and "mirror check's copy is a near copy of a private image, 'img0.png'" in copies[0]
    with pytest.raises(ValueError, match="'pub0.png': its mirror check's copy is a near copy of a private image, "
                                         "'img0.png'"):
        refuse_known_private(carriers, copies, "--public 'p'")


# ---------------------------------------------------------------- every state file is versioned


def _set_meta(path: Path, version: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))


@pytest.mark.parametrize("what", ["ledger", "journal", "journal-column", "runs"])
def test_a_state_file_from_a_newer_version_is_refused_before_anything_is_sent_or_paid(tmp_path: Path,
                                                                                       what: str) -> None:
    folder = private_folder(tmp_path)
    state = tmp_path / "state"
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path)).exit_code == 0
        if what == "ledger":
            _set_meta(state / "ledger.sqlite", "6")
        elif what == "journal":
            _set_meta(state / "journal.sqlite", "3")
        elif what == "journal-column":  # the case: schema 3 with one new NOT NULL column
            with sqlite3.connect(state / "journal.sqlite") as db:
                db.execute("ALTER TABLE batches ADD COLUMN region TEXT NOT NULL DEFAULT 'eu'")
        else:
            runs = json.loads((state / "runs.json").read_text())
            (state / "runs.json").write_text(json.dumps({**runs, "_schema": 3}))
        billed = srv.usage()["total"]["images"]
        other = private_folder(tmp_path / "more")  # another folder: a run that would noise, send and pay
        res = invoke(label_args(other, srv.model_url, tmp_path))
        assert res.exit_code == EXIT_USAGE, res.output
        line = res.stderr.strip().splitlines()[-1]
        assert "was written by a newer ldpclient" in line and "nothing was sent, paid or charged" in line
        assert srv.usage()["total"]["images"] == billed


def test_an_older_ledger_and_journal_are_migrated_in_place(tmp_path: Path) -> None:
    """Schema 2 ledgers (no caps, no fingerprints) and unversioned journals open and are stamped."""
    folder = private_folder(tmp_path)
    state = tmp_path / "state"
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path)).exit_code == 0
        with sqlite3.connect(state / "ledger.sqlite") as db:
            db.execute("DROP TABLE caps")
            db.execute("DROP TABLE fingerprints")
        _set_meta(state / "ledger.sqlite", "2")
        with sqlite3.connect(state / "journal.sqlite") as db:
            db.execute("DROP TABLE meta")
        paid = paid_batches(tmp_path)
        for _ in range(2):  # migrated, then opened as it is
            again = invoke(label_args(folder, srv.model_url, tmp_path))
            assert again.exit_code == 0, again.output
        assert paid_batches(tmp_path) == paid  # the journal's answers were kept
    for name in ("ledger.sqlite", "journal.sqlite"):
        with sqlite3.connect(state / name) as db:
            version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        assert version == {"ledger.sqlite": "5", "journal.sqlite": "2"}[name]


def test_a_checkpoint_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    from ldpclient.state import NewerStateFile
    from ldpclient.transfer.student import build_student, load_checkpoint, save_checkpoint

    path = tmp_path / "student.pt"
    save_checkpoint(path, build_student("small_cnn", in_channels=1, num_classes=3, image_size=8), "small_cnn",
                    {"in_channels": 1, "num_classes": 3, "image_size": 8})
    load_checkpoint(path)
    blob = torch.load(path, weights_only=True)
    torch.save({**blob, "schema": 99}, path)
    with pytest.raises(NewerStateFile, match="newer ldpclient"):
        load_checkpoint(path)


# ---------------------------------------------------------------- public folders get the private folder's care


def test_files_skipped_in_the_public_folder_are_counted_and_reported(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    public = tmp_path / "public"
    _write(public, _smooth(6, 9, 8), "q")
    good = (public / "q00.png").read_bytes()
    (public / "truncated.png").write_bytes(good[: len(good) // 2])
    (public / "notes.txt").write_text("not an image")
    with mock_teacher() as srv:
        res = invoke(label_args(folder, srv.model_url, tmp_path, "--public", str(public)))
        assert res.exit_code == 0, res.output
        assert "0 private, 2 public files" in " ".join(res.output.split())
    report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
    assert report["counts"]["public_skipped"] == 2 and report["counts"]["public_images"] == 6
    assert sorted(s["path"] for s in report["public_skipped"]) == ["notes.txt", "truncated.png"]


def test_an_empty_public_folder_is_named_as_the_public_folder(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("nothing here")
    with mock_teacher() as srv:
        res = invoke(label_args(folder, srv.model_url, tmp_path, "--public", str(tmp_path / "empty")))
        assert res.exit_code == EXIT_USAGE, res.output
        line = res.stderr.strip().splitlines()[-1]
        assert f"--public folder {str(tmp_path / 'empty')!r} contains no image files" in line
        assert "private folder" not in line and srv.usage()["total"]["images"] == 0


# ---------------------------------------------------------------- every option bounded, every conflict refused


@pytest.mark.parametrize(("extra", "words"), [
    (["--warmup", "99999999999999999999999"], "--warmup must be from 0 to 200 epochs"),
    (["--epochs", "1000000"], "--epochs must be from 1 to 1000"),
    (["--augment", "rand", "--queries", "99999999999"], "--queries 99999999999 is more than 1000 per image"),
    (["--workers", "100000"], "--workers must be from 1 to 64"),
    (["--train-batch-size", "10000000"], "--train-batch-size must be from 1 to 65536"),
    (["--flip", "--no-flip"], "--flip and --no-flip contradict each other"),
    (["--no-adapt", "--adapt"], "--adapt and --no-adapt contradict each other"),
    (["--flip", "--augment", "none"], "--flip/--no-flip trains a student: --augment none (SIDP) has none"),
    (["--warmup", "3", "--augment", "none"], "--warmup trains a student: --augment none (SIDP) has none"),
    (["--students", "17"], "--students must be from 1 to 16"),
    (["--students", "2", "--augment", "none"], "--students train a student: --augment none (SIDP) has none"),
])
def test_an_unbounded_or_contradictory_option_is_one_line_before_anything_is_sent(
        tmp_path: Path, extra: list[str], words: str) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        res = invoke(label_args(folder, srv.model_url, tmp_path, *extra))
        assert res.exit_code == EXIT_USAGE, res.output
        assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert srv.usage()["total"]["images"] == 0 and charged_images(tmp_path) == 0


@pytest.mark.parametrize(("line", "words"), [
    ("warmup = true", "warmup must be an integer, got true"),
    ("epochs = 2.5", "epochs must be an integer, got 2.5"),
    ("adapt = 1", "adapt must be true or false, got 1"),
    ("price = true", "price must be a number, got true"),
])
def test_config_values_of_the_wrong_kind_are_refused(tmp_path: Path, line: str, words: str) -> None:
    config = tmp_path / "ldp.toml"
    config.write_text(line + "\n")
    res = invoke(["label", str(private_folder(tmp_path)), "--teacher", "http://127.0.0.1:9/v2/models/x", "--config",
                str(config)])
    assert res.exit_code == EXIT_USAGE and words in res.stderr, res.output


def test_the_dry_run_shows_the_warm_up_rows(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        res = invoke(label_args(folder, srv.model_url, tmp_path, "--warmup", "3", "--dry-run", "--json"))
        assert res.exit_code == 0, res.output
        student = json.loads(res.stdout)["plan"]["student"]
        assert student["warmup_epochs"] == 3 and student["warmup_rows"] == 36


# ---------------------------------------------------------------- Ctrl-C never pays twice


def test_ctrl_c_lets_the_request_in_flight_finish_and_records_it(tmp_path: Path) -> None:
    """The issue's case: 74 images billed for 70 planned; the interrupted request was dropped and sent again on
    resume. Now what the teacher billed at the stop is exactly what the journal recorded."""
    import os
    import signal

    from support.cli_runs import cli_command, wait_for_images

    folder = private_folder(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with mock_teacher(latency=0.4) as srv:
        args = label_args(folder, srv.model_url, tmp_path, "--queries", "40", "--batch-size", "4")
        proc = __import__("subprocess").Popen(cli_command(*args), env=env, stdout=-1, stderr=-1, text=True)
        wait_for_images(srv, 8, proc)
        srv.wait_in_flight()  # the next batch is in flight (0.4 s on the server)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "paid twice" not in err
        srv.wait_idle()
        billed = srv.usage()["total"]["images"]
        with sqlite3.connect(tmp_path / "state" / "journal.sqlite") as db:
            recorded = db.execute("SELECT COALESCE(SUM(n), 0) FROM batches").fetchone()[0]
        assert billed == recorded and 8 < billed < 40
        done = invoke(label_args(folder, srv.model_url, tmp_path, "--queries", "40", "--batch-size", "4", "--json"))
        assert done.exit_code == 0, done.output
        assert srv.usage()["total"]["images"] == 40  # nothing paid twice over the two runs


# ---------------------------------------------------------------- one meaning of epsilon


def test_a_library_call_must_name_what_epsilon_counts() -> None:
    """The issue's case: `laplace(100, reduction=4)` was 100 per element, 4,900 per image, while `--epsilon 100`
    is per image."""
    from ldpclient.privacy import gaussian, laplace, make_mechanism, tldp_laplace

    for call in (lambda: laplace(100, reduction=4), lambda: gaussian(10, 1e-6), lambda: tldp_laplace(1.0),
                 lambda: make_mechanism("laplace", epsilon=100)):
        with pytest.raises(ValueError, match="name the unit of epsilon: per='record'"):
            call()
    assert laplace(100, per="record", reduction=4).guarantee((1, 28, 28)).epsilon_record == pytest.approx(100)
    assert laplace(100, per="element", reduction=4).guarantee((1, 28, 28)).epsilon_record == pytest.approx(4900)


def test_a_schema_3_ledgers_four_print_fingerprints_still_find_copies_after_its_migration(tmp_path: Path) -> None:
    """Schema 4 adds a luma print to each fingerprint; the ones a schema-3 ledger stored are read as they are."""
    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import Ledger
    from ldpclient.privacy.ledger import fingerprint as fp

    images = torch.from_numpy(np.stack(_smooth(6, 11))).float()[:, None] / 255
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.release(laplace(5.0, per="record"), images, scope="t")
    with sqlite3.connect(path) as db:  # as schema 3 stored them: four prints each
        db.execute("UPDATE fingerprints SET print = substr(print, 1, ?)", (len(fp.CROPS) * fp.SIZE,))
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with Ledger(path) as ledger:
        found = ledger.private_copies(images.flip(-1) * 0.9)
    assert sorted(found) == list(range(6)) and all("near copy" in why for why in found.values())
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("5",)
        assert db.execute("SELECT value FROM meta WHERE key = 'migrated_from_3'").fetchone() is not None
