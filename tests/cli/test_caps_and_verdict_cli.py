"""Caps speak before they bite, and every run ends with a verdict on its labels, through the command
line against the real mock teacher on 127.0.0.1.

Tiny on purpose (12 private 8x8 images, the rule-based mock teacher, 24 queries, one epoch): what is checked is
what was charged, sent and written, not the accuracy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldpclient.cli.commands import app
from ldpclient.cli.errors import EXIT_MONEY_CAP, EXIT_PRIVACY_CAP, EXIT_USAGE
from ldpclient.report.label_files import read_labels
from ldpclient.run.demo import write_demo_folder
from support.cli_runs import charged_images, label_args, mock_teacher, paid_batches, private_folder


def _run(args: list[str]):
    return CliRunner().invoke(app, args)


def test_a_money_cap_the_run_would_cross_is_refused_before_anything_is_noised_or_sent(tmp_path: Path) -> None:
    """The README's case: the cap is smaller than what the run's queries cost (24 at 0.01 = 0.24)."""
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        dry = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.1", "--dry-run"))
        assert dry.exit_code == EXIT_MONEY_CAP, dry.output
        assert "the smallest cap that would do is 0.24" in dry.stderr
        refused = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.1"))
        assert refused.exit_code == EXIT_MONEY_CAP, refused.output
        line = refused.stderr.strip().splitlines()[-1]  # after the loading bar: the images were read, not noised
        assert line.startswith("error: refused: --money-cap 0.1: the run would send 24 queries")
        assert "nothing was noised, sent or charged; the smallest cap that would do is 0.24" in line
        assert srv.usage()["total"]["images"] == 0 and charged_images(tmp_path) == 0 and paid_batches(tmp_path) == 0
        assert not (tmp_path / "out" / "labels.report.json").exists()  # no stop report: nothing happened
        done = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.24", "--json"))
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["cost"]["spent_run"] == pytest.approx(0.24)


def test_the_old_readme_command_on_the_demo_folder_is_refused_before_anything_is_charged(tmp_path: Path) -> None:
    """`--money-cap 5 --baseline` on the demo's 359 images (7,180 private and 7,180 baseline queries at 0.001: 14.36)
    is refused before any image is charged epsilon or any query is sent, not stopped at the cap half-way."""
    write_demo_folder(tmp_path / "out", count=None)  # all 359
    with mock_teacher(image_size=28, price_per_image=0.001, max_batch_size=256) as srv:
        res = _run(["label", str(tmp_path / "out" / "private"), "--teacher", srv.model_url, "--price", "0.001",
                    "--money-cap", "5", "--privacy-cap", "200", "--baseline", "--state-dir", str(tmp_path / "state"),
                    "--output", str(tmp_path / "labels.csv")])
        assert res.exit_code == EXIT_MONEY_CAP, res.output
        assert "14360 queries" in res.stderr and "the smallest cap that would do is 14.36" in res.stderr
        assert srv.usage()["total"]["images"] == 0 and charged_images(tmp_path) == 0 and paid_batches(tmp_path) == 0


def test_a_money_cap_only_the_baseline_would_cross_is_refused_before_the_private_run(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        refused = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.3", "--baseline"))
        assert refused.exit_code == EXIT_MONEY_CAP, refused.output
        assert "48 queries" in refused.stderr and "smallest cap that would do is 0.48" in refused.stderr
        assert srv.usage()["total"]["images"] == 0 and charged_images(tmp_path) == 0


def test_a_resumed_run_is_checked_against_what_the_journal_has_not_answered(tmp_path: Path) -> None:
    """After a finished run, the same command with the same cap pays nothing and is not refused; a baseline added
    later costs only its own queries."""
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        assert _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.24")).exit_code == 0
        again = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.24", "--json"))
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["queries"]["from_journal"] == 24
        more = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.4", "--baseline"))
        assert more.exit_code == EXIT_MONEY_CAP and "24 queries not yet answered" in more.stderr
        assert "0.24 already spent" in more.stderr and "would do is 0.48" in more.stderr
        dry = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.3", "--dry-run"))
        assert dry.exit_code == 0 and "journal has answers from this teacher" in dry.stderr  # an upper bound only


def test_a_cap_crossed_by_what_could_not_be_foreseen_still_stops_at_the_batch_and_resumes(tmp_path: Path) -> None:
    """Dropped answers may have been billed: they count against the cap as they happen, so the run stops at the
    batch that would cross it (a stop report, nothing lost) and the re-run pays nothing twice."""
    folder = private_folder(tmp_path)
    with mock_teacher(drop_rate=0.5, fault_seed=1) as srv:
        stopped = _run(label_args(folder, srv.model_url, tmp_path, "--money-cap", "0.24", "--max-retry-time", "30"))
        assert stopped.exit_code == EXIT_MONEY_CAP, stopped.output
        assert "money cap reached" in stopped.stderr and "refused" not in stopped.stderr
        stop = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        assert stop["ok"] is False and stop["stopped"]["reason"] == "money cap"
        answered = paid_batches(tmp_path)
        resumed = _run(
            label_args(folder, srv.model_url, tmp_path, "--money-cap", "5", "--json", "--max-retry-time", "30")
        )
        assert resumed.exit_code == 0, resumed.output
        assert json.loads(resumed.stdout)["queries"]["from_journal"] == 8 * answered


def test_a_privacy_cap_below_one_release_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        for extra in ((), ("--dry-run",)):
            refused = _run(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "10", *extra))
            assert refused.exit_code == EXIT_PRIVACY_CAP, refused.output
            assert "refused: --privacy-cap 10 is below one release of an image (epsilon 64 per image)" in refused.stderr
            assert "the smallest cap that would do is 64" in refused.stderr
        assert srv.usage()["total"]["images"] == 0 and charged_images(tmp_path) == 0


def test_a_privacy_cap_earlier_spend_would_cross_is_refused_before_anything_is_noised(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        assert _run(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "100")).exit_code == 0
        sent, charged = srv.usage()["total"]["images"], charged_images(tmp_path)
        refused = _run(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "100", "--epsilon", "3"))
        assert refused.exit_code == EXIT_PRIVACY_CAP, refused.output
        # each run's 24 pairs may leave one of the 12 images out (never released): 10 to 12 of 11 or 12 are over
        over = re.search(r"(\d+) of the (\d+) images this run would noise", refused.stderr)
        assert over is not None and 10 <= int(over[1]) <= int(over[2]) and int(over[2]) >= 11, refused.stderr
        assert "the smallest cap that would do is 112" in refused.stderr  # 64 spent + 48 for the new mechanism
        assert charged >= 11 and charged_images(tmp_path) == charged and srv.usage()["total"]["images"] == sent
        reused = _run(label_args(folder, srv.model_url, tmp_path, "--privacy-cap", "64", "--json"))  # stored: free
        assert reused.exit_code == 0, reused.output


def test_a_money_cap_without_a_price_is_a_one_line_error(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    args = [a for a in label_args(folder, "http://127.0.0.1:9/v2/models/m", tmp_path, "--money-cap", "5")]
    at = args.index("--price")
    del args[at:at + 2]
    res = _run(args)
    assert res.exit_code == EXIT_USAGE and "--money-cap needs the price of a query: give --price" in res.stderr


def test_every_run_ends_with_a_verdict_scored_on_the_check_set(tmp_path: Path) -> None:
    """The check set's score is the labels written against the hand labels; the summary, the JSON, the report
    and the page all carry the verdict; the hand labels are never sent (the query log has no trace of them)."""
    folder = private_folder(tmp_path)
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.png"))
    check = tmp_path / "check.csv"
    check.write_text("file,label\n" + "".join(f"{n},{k % 2}\n" for k, n in enumerate(names[:10])), encoding="utf-8")
    with mock_teacher() as srv:
        res = _run(label_args(folder, srv.model_url, tmp_path, "--check", str(check), "--baseline", "--html"))
        assert res.exit_code == 0, res.output
        assert "  verdict " in res.stderr and "on the check set" in res.stderr
        assert "data-free (epsilon 0 per record), student small_cnn:" in " ".join(res.stderr.split())
        report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        verdict = report["verdict"]
        labels = {row.path: row.label for row in read_labels(tmp_path / "out" / "labels.csv")}
        right = sum(labels[n] == k % 2 for k, n in enumerate(names[:10]))
        assert verdict["check"]["images"] == 10 and verdict["check"]["correct"] == right
        assert verdict["level"] in ("usable", "doubtful", "not worth having")
        assert verdict["headline"].startswith(verdict["level"])
        assert verdict["check"]["baseline"]["images"] == 10
        page = (tmp_path / "out" / "labels.html").read_text(encoding="utf-8")
        assert page.index("What the labels are worth") < page.index("The guarantee, in plain words")
        assert f"The labels are {verdict['level']}." in page
        as_json = _run(label_args(folder, srv.model_url, tmp_path, "--check", str(check), "--json"))
        assert json.loads(as_json.stdout)["verdict"]["check"]["images"] == 10


def test_a_check_file_naming_an_image_not_in_the_folder_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    check = tmp_path / "check.csv"
    check.write_text("file,label\nnot-there.png,1\n", encoding="utf-8")
    with mock_teacher() as srv:
        for extra in ((), ("--dry-run",)):
            res = _run(label_args(folder, srv.model_url, tmp_path, "--check", str(check), *extra))
            assert res.exit_code == EXIT_USAGE, res.output
            assert "1 of its 1 images are not among the private images (e.g. 'not-there.png')" in res.stderr
        assert srv.usage()["total"]["images"] == 0 and charged_images(tmp_path) == 0
