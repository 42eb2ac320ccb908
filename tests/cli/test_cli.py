"""`ldpclient label`, `noise`, `budget`, `serve-mock` against the real mock teacher on 127.0.0.1.

Tiny on purpose: 12 private 8x8 images, a trivial (rule-based) mock teacher, tens of
queries, one training epoch. The subprocess tests kill or interrupt a real run and
check that the re-run resumes without sending an answered batch again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ldpclient.cli.errors import EXIT_MONEY_CAP, EXIT_PRIVACY_CAP, EXIT_TEACHER
from ldpclient.report.label_files import read_labels
from support.cli_runs import cli_command, invoke, label_args, mock_teacher, private_folder, stop_after

TOKEN = "sekret-token-7f3a9c"
REPORT_KEYS = {
    "schema", "command", "ok", "private_dir", "teacher", "mechanism", "guarantee", "augment", "postprocess",
    "plan", "counts", "queries", "cost", "ledger", "student", "baseline", "timings", "skipped", "outputs", "versions",
}


def test_label_happy_path_json_schema_then_resume(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--json", "--baseline"))
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert REPORT_KEYS <= set(report)
        assert report["ok"] is True and report["counts"]["labelled"] == 12
        g = report["guarantee"]
        # per element eps 4 over 16 released elements (8x8 pooled by 2): per record 64
        assert g["per_element"]["epsilon"] == pytest.approx(4.0)
        assert g["per_record"]["epsilon"] == pytest.approx(64.0)
        assert g["elements_per_record"] == 16
        assert report["queries"]["sent"] == 24 and report["queries"]["from_journal"] == 0
        assert report["cost"]["spent_run"] == pytest.approx(0.48)  # 24 private + 24 baseline queries
        assert report["baseline"]["queries_sent"] == 24 and report["baseline"]["student"] == "small_cnn"
        # 24 pairs of 12 images: an image no pair uses is neither released nor charged (about 1 run in 20)
        unused = report["counts"]["not_released"]
        assert report["ledger"]["fresh"] == 12 - unused and unused <= 1
        assert report["ledger"]["spent_this_run_max_epsilon"] == pytest.approx(64.0)
        assert report["ledger"]["max_spent_epsilon"] == pytest.approx(64.0)
        assert report["skipped"] == [{"path": "broken.png", "reason": "not a readable image (unknown format)"}]
        assert set(report["timings"]) >= {"connect", "loading", "noising", "querying", "training", "labelling"}
        rows = read_labels(tmp_path / "out" / "labels.csv")
        assert [r.path for r in rows] == sorted(r.path for r in rows) and len(rows) == 12
        assert all(0 <= r.label < 10 and 0.0 <= r.confidence <= 1.0 for r in rows)
        on_disk = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        assert on_disk == report
        first_usage = srv.usage()["total"]["images"]

        # same command again: nothing re-noised, nothing sent or paid again
        again = invoke(label_args(folder, srv.model_url, tmp_path, "--json", "--baseline"))
        assert again.exit_code == 0, again.output
        rep2 = json.loads(again.stdout)
        assert rep2["queries"]["sent"] == 0 and rep2["queries"]["from_journal"] == 24
        assert rep2["ledger"]["fresh"] == 0 and rep2["ledger"]["reused"] == 12 - unused
        assert rep2["ledger"]["spent_this_run_max_epsilon"] == 0.0
        assert rep2["ledger"]["max_spent_epsilon"] == pytest.approx(64.0)
        assert rep2["cost"]["spent_run"] == 0.0
        assert srv.usage()["total"]["images"] == first_usage
        assert [r.label for r in read_labels(tmp_path / "out" / "labels.csv")] == [r.label for r in rows]

        # human-readable summary names both epsilons and the money
        human = invoke(label_args(folder, srv.model_url, tmp_path, "--output", str(tmp_path / "h.jsonl")))
        assert human.exit_code == 0, human.output
        assert "per record epsilon 64" in human.stderr and "per element epsilon 4" in human.stderr
        assert json.loads((tmp_path / "h.jsonl").read_text().splitlines()[0]).keys() == {
            "path", "label", "label_name", "confidence"
        }

        budget = invoke(["budget", "--state-dir", str(tmp_path / "state"), "--json"])
        assert budget.exit_code == 0, budget.output
        b = json.loads(budget.stdout)
        assert b["records"] == 12 - unused and b["epsilon"]["max"] == pytest.approx(64.0)


def test_without_a_price_the_money_is_not_counted_and_the_summary_says_so_with_what_the_teacher_billed(
        tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    args = label_args(folder, "", tmp_path)
    del args[args.index("--price"):args.index("--price") + 2]  # the teacher bills 0.01 an image; the user gave no price
    with mock_teacher() as srv:
        args[args.index("--teacher") + 1] = srv.model_url
        res = invoke(args)
        assert res.exit_code == 0, res.output
        assert srv.usage()["total"]["images"] == 24
    assert "not counted: no --price given; the teacher billed 24 image(s) this run" in " ".join(res.stderr.split())
    assert "0 this run" not in res.stderr  # "0" would read as free
    report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
    assert report["cost"]["price_per_query"] == 0.0 and report["cost"]["billing"]["billed_units"] == 24


def test_secrets_never_reach_any_output(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher(tokens=(TOKEN,)) as srv:
        ok = invoke(label_args(folder, srv.model_url, tmp_path, "--json"), env={"LDPCLIENT_TOKEN": TOKEN})
        assert ok.exit_code == 0, ok.output
        wrong = invoke(label_args(folder, srv.model_url, tmp_path / "w", "--token", TOKEN + "-wrong"))
        assert wrong.exit_code == EXIT_TEACHER
        assert "401" in wrong.output or "auth" in wrong.output.lower()
        noise = invoke(["noise", str(folder), "--out", str(tmp_path / "noised"), "--teacher", srv.model_url,
                      "--state-dir", str(tmp_path / "state"), "--reduce", "2", "--token", TOKEN])
        assert noise.exit_code == 0, noise.output
    texts = [ok.output, wrong.output, noise.output]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert TOKEN.encode() not in data, path
    for text in texts:
        assert TOKEN not in text


def test_money_cap_is_refused_before_anything_is_sent_and_a_larger_one_runs(tmp_path: Path) -> None:
    """(A cap crossed mid-run by what could not be foreseen, and its resume: tests/cli/test_caps_and_verdict_cli.py.)"""
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        capped = invoke(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.1"))
        assert capped.exit_code == EXIT_MONEY_CAP, capped.output
        assert "refused: --money-cap 0.1" in capped.stderr and "Traceback" not in capped.output
        assert srv.usage()["total"]["images"] == 0  # the 24 queries would cost 0.24: none is sent
        assert not (tmp_path / "out" / "labels.report.json").exists()  # nothing happened: no stop report
        resumed = invoke(label_args(folder, srv.model_url, tmp_path, "--money-cap", "1", "--json"))
        assert resumed.exit_code == 0, resumed.output
        rep = json.loads(resumed.stdout)
        assert rep["queries"]["from_journal"] == 0 and rep["queries"]["sent"] == 24
        assert rep["ledger"]["fresh"] == 12 - rep["counts"]["not_released"]
        assert srv.usage()["total"]["images"] == 24


def test_privacy_cap_refuses_before_noising(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "10"))
        assert result.exit_code == EXIT_PRIVACY_CAP, result.output
        assert "refused: --privacy-cap 10 is below one release" in result.stderr and "Traceback" not in result.output
        assert srv.usage()["total"]["images"] == 0
        assert not (tmp_path / "out" / "labels.report.json").exists()  # refused before anything: no stop report
        # per record epsilon 64 fits a cap of 100 once, but not twice under a new mechanism
        quiet = invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "100", "--quiet"))
        assert quiet.exit_code == 0 and quiet.output == ""  # --quiet: nothing but errors
        again = invoke(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "100", "--epsilon", "3"))
        assert again.exit_code == EXIT_PRIVACY_CAP


def test_an_absurd_epsilon_is_refused_before_anything_is_noised_or_charged(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--epsilon", "1e-300"))
        assert result.exit_code == 2 and "choose a larger --epsilon" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
        assert srv.usage()["total"]["images"] == 0
    assert not (tmp_path / "state" / "ledger.sqlite").exists() or invoke(
        ["budget", "--state-dir", str(tmp_path / "state"), "--json"]).stdout.count('"records": 0') == 1


def test_unreachable_and_misbehaving_teachers(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    unreachable = invoke(label_args(folder, "http://127.0.0.1:9/v2/models/digits", tmp_path))
    assert unreachable.exit_code == EXIT_TEACHER
    assert unreachable.stderr.strip().splitlines()[-1].startswith("error: teacher error")
    with mock_teacher(malformed_rate=1.0, malformed_kind="out_of_range") as srv:
        bad = invoke(label_args(folder, srv.model_url, tmp_path))
        assert bad.exit_code == EXIT_TEACHER, bad.output
        assert "Traceback" not in bad.output and "error: teacher error" in bad.stderr
    with mock_teacher() as srv:
        wrong_model = invoke(label_args(folder, srv.url + "/v2/models/nosuchmodel", tmp_path))
        assert wrong_model.exit_code == EXIT_TEACHER, wrong_model.output
        assert "nosuchmodel" in wrong_model.stderr


def test_noise_writes_copies_and_preview_and_label_reuses_them(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        out = tmp_path / "noised"
        result = invoke(
            [
                "noise",
                str(folder),
                "--out",
                str(out),
                "--teacher",
                srv.model_url,
                "--reduce",
                "2",
                "--epsilon",
                "4",
                "--epsilon-unit",
                "element",
                "--state-dir",
                str(tmp_path / "state"),
                "--json",
            ]
        )
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["counts"]["noised"] == 12 and doc["counts"]["fresh"] == 12
        copies = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png") if p.name != "preview.png")
        assert copies == sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.png"))
        preview = Image.open(out / "preview.png")
        assert preview.size[0] > preview.size[1]  # 3 rows, 8 columns
        assert srv.usage()["total"]["images"] == 0  # noise never contacts the teacher with data
        label = invoke(label_args(folder, srv.model_url, tmp_path, "--json"))
        assert label.exit_code == 0, label.output
        assert json.loads(label.stdout)["ledger"]["fresh"] == 0  # what `noise` showed is what was sent


def test_serve_mock_is_registered() -> None:
    result = invoke(["serve-mock", "--help"])
    assert result.exit_code == 0
    assert "--port" in result.output


def test_serve_mock_prints_the_model_address_label_takes() -> None:
    """The address printed is the one `label --teacher` needs: the model's metadata answers there."""
    import requests

    proc = subprocess.Popen(cli_command("serve-mock", "--port", "0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        listening = proc.stdout.readline()
        assert listening.startswith("mock teacher listening on http://127.0.0.1:"), listening
        lines = []
        while not any("/v2/models/" in line for line in lines):
            lines.append(proc.stderr.readline())
            assert lines[-1], lines  # the server said nothing more
        address = next(line for line in lines if "/v2/models/" in line).split(" at ", 1)[1].split(" ", 1)[0]
        assert address.startswith(listening.split(" on ", 1)[1].strip() + "/v2/models/")
        meta = requests.get(address, timeout=10)
        assert meta.status_code == 200 and meta.json()["name"] == address.rsplit("/", 1)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------ subprocess: kill, Ctrl-C, resume


def test_killed_then_interrupted_run_resumes_without_resending(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with mock_teacher(latency=0.2) as srv:
        args = label_args(folder, srv.model_url, tmp_path, "--queries", "40", "--batch-size", "4")
        code, _ = stop_after(srv, args, env, 8, signal.SIGKILL)
        assert code == -signal.SIGKILL
        after_kill = srv.usage()["total"]["images"]
        assert 8 <= after_kill < 40

        # Ctrl-C on the resumed run: clean stop, exit 130, says how to resume, no traceback
        code, err = stop_after(srv, args, env, after_kill + 8, signal.SIGINT)
        assert code == 130, err
        assert "interrupted" in err and "re-run the same command to resume" in err
        assert "Traceback" not in err
        before = srv.usage()["total"]["images"]
        assert after_kill + 8 <= before < 40 + 8

        done = subprocess.run(cli_command(*args, "--json"), env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        rep = json.loads(done.stdout)
        sent, journal = rep["queries"]["sent"], rep["queries"]["from_journal"]
        assert sent + journal == 40
        assert rep["ledger"]["fresh"] == 0  # the releases made before the stops were reused
        after = srv.usage()["total"]["images"]
        assert after - before == sent  # the last run sent only what it reports sending
        # at most the batch in flight at each stop (4 queries) was answered but not journaled
        assert journal >= before - 2 * 4
        assert after <= 40 + 2 * 4


@pytest.mark.parametrize(
    "mechanism, extra",
    [
        ("laplace", ["--epsilon-unit", "record", "--epsilon", "32"]),
        ("gaussian", ["--delta", "1e-6"]),
        ("tldp-laplace", []),
        ("tldp-gaussian", []),
        ("tldp-weighted", []),
        ("discrete-tldp", ["--epsilon", "6"]),
    ],
)
def test_every_mechanism_runs_through_label_sidp(tmp_path: Path, mechanism: str, extra: list[str]) -> None:
    folder = private_folder(tmp_path, n=4)
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--mechanism", mechanism, "--augment", "none",
                            "--json", *extra))
        assert result.exit_code == 0, result.output
        rep = json.loads(result.stdout)
        g = rep["guarantee"]
        if "gaussian" in mechanism:  # composed more tightly than the plain sum
            assert g["per_element"]["epsilon"] < g["per_record"]["epsilon"]
            assert g["per_record"]["epsilon"] <= g["per_element"]["epsilon"] * g["elements_per_record"] + 1e-9
        else:  # pure epsilon-LDP per element (or epsilon + point mass for TLDP): basic composition
            assert g["per_record"]["epsilon"] == pytest.approx(g["per_element"]["epsilon"] * g["elements_per_record"])
        assert g["elements_per_record"] == 16  # 8x8 pooled by 2
        assert rep["queries"]["sent"] == 4 and rep["student"]["model"] is None  # SIDP: no student
        if mechanism == "laplace":
            assert g["per_record"]["epsilon"] == pytest.approx(32.0)
        if mechanism == "discrete-tldp":
            assert g["domain"] == {"low": 0, "high": 255, "integer": True}
        # what reached the teacher lies in its value range [0, 1] (clipped/rescaled post-processing)
        assert srv.usage()["total"]["images"] == 4


def test_a_file_name_that_is_not_utf8_is_labelled_and_named_in_the_report(tmp_path: Path) -> None:
    """A name of bytes that are not UTF-8 is labelled and named (escaped) in the report: no failure at the very end
    ('surrogates not allowed') after budget and money were spent."""
    folder = private_folder(tmp_path, n=8)
    odd = os.path.join(os.fsencode(folder / "dogs"), b"caf\xe9-\xff.png")  # Latin-1 bytes: not UTF-8
    rng = np.random.default_rng(5)
    Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(os.fsdecode(odd))
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--quiet"))
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "labels.report.json").read_text(encoding="utf-8"))
    assert report["escaped_names"] == ["dogs/caf\\xe9-\\xff.png"]
    rows = read_labels(tmp_path / "out" / "labels.csv")
    assert len(rows) == 9 and "dogs/caf\\xe9-\\xff.png" in {r.path for r in rows}


def test_adaptation_says_which_image_changes_the_student_kept_its_labels_under(tmp_path: Path) -> None:
    folder = private_folder(tmp_path, n=16, size=16)
    with mock_teacher(image_size=16) as srv:
        run = invoke(label_args(folder, srv.model_url, tmp_path, "--json"))
        assert run.exit_code == 0, run.output
        adaptation = json.loads(run.stdout)["adaptation"]
        changes = adaptation["image_changes"]
        assert changes["images"] == 16 and set(changes["shares"]) == {"mirror", "invert"}  # grey: no colour ones
        assert set(changes["kept"]) <= {"mirror", "invert"} and 0.0 <= changes["shift"] <= 1.0
        assert adaptation["label_views"] == 5 + len(changes["kept"])  # as it is, four one-pixel shifts, the kept
        viewed = adaptation["labelled_through_views"]  # the images the adapted student was unsure of
        assert 0 <= viewed <= 16
        human = invoke(label_args(folder, srv.model_url, tmp_path / "human"))
        assert human.exit_code == 0, human.output
        said = " ".join(human.stderr.split())
        assert "also shown" in said or "no larger change kept the student's labels" in said
        views = f"the adapted student was unsure of labelled by the mean over {adaptation['label_views']} views"
        assert (views in said) == (viewed > 0), said


def test_sampling_path_is_secure_by_default_and_reported(tmp_path: Path) -> None:
    folder = private_folder(tmp_path, n=4)
    with mock_teacher() as srv:
        secure = invoke(label_args(folder, srv.model_url, tmp_path, "--augment", "none", "--json"))
        assert secure.exit_code == 0, secure.output
        rep = json.loads(secure.stdout)
        assert rep["guarantee"]["sampling"].startswith("secure") and rep["mechanism"]["config"]["secure"] is True
        human = invoke(label_args(folder, srv.model_url, tmp_path / "f", "--augment", "none", "--no-secure",
                           "--mechanism", "gaussian", "--delta", "1e-6"))
        assert human.exit_code == 0, human.output
        assert "sampling" in human.stderr and "float64" in human.stderr


def test_a_large_delta_is_refused_unless_forced_and_delta_above_one_over_n_warns(tmp_path: Path) -> None:
    folder = private_folder(tmp_path, n=4)
    with mock_teacher() as srv:
        refused = invoke(label_args(folder, srv.model_url, tmp_path, "--mechanism", "gaussian", "--delta", "0.5"))
        assert refused.exit_code == 2
        assert "--allow-large-delta" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        assert srv.usage()["total"]["images"] == 0
        forced = invoke(label_args(folder, srv.model_url, tmp_path, "--mechanism", "gaussian", "--delta", "0.3",
                            "--allow-large-delta", "--augment", "none"))
        assert forced.exit_code == 0, forced.output
        assert "warning: per-record delta 0.3 exceeds 1/n = 0.25 for 4 records" in forced.stderr


def test_adaptation_is_on_by_default_writes_the_unadapted_labels_and_can_be_turned_off(tmp_path: Path) -> None:
    folder = private_folder(tmp_path, n=8)
    with mock_teacher() as srv:
        on = invoke(label_args(folder, srv.model_url, tmp_path, "--json"))
        assert on.exit_code == 0, on.output
        rep = json.loads(on.stdout)
        assert rep["adaptation"]["selected"] and "must not leave the device" in rep["adaptation"]["note"]
        assert len(read_labels(Path(rep["outputs"]["unadapted_labels"]))) == 8
        off = invoke(label_args(folder, srv.model_url, tmp_path / "off", "--json", "--no-adapt"))
        assert off.exit_code == 0, off.output
        rep_off = json.loads(off.stdout)
        assert rep_off["adaptation"] is None and "unadapted_labels" not in rep_off["outputs"]


def test_privacy_cap_is_per_image_across_teachers_of_other_shapes(tmp_path: Path) -> None:
    """One image sent to teachers of three input sizes: the cap adds the three releases up."""
    folder = private_folder(tmp_path)
    runs = []
    for size in (8, 6, 4):
        with mock_teacher(image_size=size) as srv:
            result = invoke(label_args(folder, srv.model_url, tmp_path, "--epsilon", "50", "--epsilon-unit", "record",
                                "--privacy-cap", "120"))
            runs.append((result.exit_code, srv.usage()["total"]["images"]))
    assert runs[0][0] == 0 and runs[1][0] == 0, runs
    assert runs[2] == (EXIT_PRIVACY_CAP, 0)  # 50 + 50 + 50 > 120: refused before anything was sent
    budget = json.loads(invoke(["budget", "--state-dir", str(tmp_path / "state"), "--json"]).stdout)
    # each run's 24 pairs may leave one of the 12 images out (never released, never charged)
    assert budget["records"] >= 11 and budget["epsilon"]["max"] == pytest.approx(100.0)
    assert 22 <= budget["releases"] <= 24 and budget["legacy_records"] == 0


def test_an_epsilon_above_the_ceiling_needs_allow_weak_privacy_and_is_said_in_words(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        for eps in ("1e300", "1e308", "600"):
            result = invoke(label_args(folder, srv.model_url, tmp_path, "--epsilon", eps, "--epsilon-unit", "record",
                                "--no-secure", "--augment", "none", "--reduce", "1", "--postprocess", ""))
            assert result.exit_code == 2, (eps, result.output)
            assert "above the ceiling 500" in result.stderr and "--allow-weak-privacy" in result.stderr
            assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
        huge = invoke(label_args(folder, srv.model_url, tmp_path, "--epsilon", "1e308", "--epsilon-unit", "element",
                          "--allow-weak-privacy"))
        assert huge.exit_code == 2 and "too large to calibrate" in huge.stderr, huge.output
        assert srv.usage()["total"]["images"] == 0
        weak = invoke(label_args(folder, srv.model_url, tmp_path, "--epsilon", "600", "--epsilon-unit", "record",
                          "--allow-weak-privacy"))
        assert weak.exit_code == 0, weak.output
        assert "WEAK PRIVACY" in weak.output
        report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        assert "WEAK PRIVACY" in report["guarantee_note"]


def test_a_pixel_release_is_post_processed_by_the_dct_band_from_two_per_pixel(tmp_path: Path) -> None:
    """The resolved post-processing reaches the report: the paper's 2 per pixel at reduce 1 (16x16: 256 pixels,
    more than the band's 64) gets ``lowpass:64,clip``; 0.1 per pixel keeps the blur."""
    folder = private_folder(tmp_path, size=16)
    with mock_teacher(image_size=16) as srv:
        paper = invoke(label_args(folder, srv.model_url, tmp_path, "--json", "--epsilon", "2", "--reduce", "1",
                           "--allow-weak-privacy", "--no-adapt"))
        assert paper.exit_code == 0, paper.output
        assert json.loads(paper.stdout)["postprocess"] == "lowpass:64,clip"
        noisy = invoke(label_args(folder, srv.model_url, tmp_path, "--json", "--epsilon", "0.1", "--reduce", "1",
                           "--no-adapt", "--output", str(tmp_path / "noisy.csv")))
        assert noisy.exit_code == 0, noisy.output
        assert json.loads(noisy.stdout)["postprocess"] == "blur:1.14,clip"  # 16 px / 14
