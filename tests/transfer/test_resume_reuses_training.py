"""A re-run that sends nothing also trains nothing: the trained and adapted student and its labels are
kept in the run state under what they were trained on, and a run on the same records, releases, answers and
settings takes them; any change trains anew. Through the command line against the real mock teacher."""

from __future__ import annotations

import json
from pathlib import Path

from ldpclient.report.label_files import read_labels
from support.cli_runs import invoke, label_args, mock_teacher, private_folder


def _label(folder: Path, url: str, tmp_path: Path, *extra: str) -> dict:
    res = invoke([*label_args(folder, url, tmp_path, "--json", "--baseline", *extra)])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _labels(tmp_path: Path, name: str = "labels.csv") -> list[int]:
    return [r.label for r in read_labels(tmp_path / "out" / name)]


def test_a_rerun_that_sends_nothing_trains_nothing_and_writes_the_same_labels(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        first = _label(folder, srv.model_url, tmp_path)
        labels, baseline = _labels(tmp_path), _labels(tmp_path, "labels.baseline.csv")
        billed = srv.usage()["total"]["images"]
        again = _label(folder, srv.model_url, tmp_path)
        assert srv.usage()["total"]["images"] == billed and again["queries"]["sent"] == 0
        assert _labels(tmp_path) == labels and _labels(tmp_path, "labels.baseline.csv") == baseline
        changed = _label(folder, srv.model_url, tmp_path, "--epochs", "2")  # a setting changed: trained anew
    assert not first["student"]["reused"] and "training" in first["timings"]
    assert again["student"]["reused"] and "training" not in again["timings"] and "adapting" not in again["timings"]
    assert "baseline training" not in again["timings"]  # the data-free run's too
    assert again["verdict"]["level"] == first["verdict"]["level"]
    assert again["student"]["val_accuracy"] == first["student"]["val_accuracy"]
    assert not changed["student"]["reused"] and "training" in changed["timings"]
    kept = list((tmp_path / "state" / "students").iterdir())
    assert kept and all(p.stat().st_mode & 0o077 == 0 for p in kept)  # this user's only


def test_a_damaged_kept_result_is_trained_anew(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        _label(folder, srv.model_url, tmp_path)
        labels = _labels(tmp_path)
        for kept in (tmp_path / "state" / "students").glob("*.result.pt"):
            kept.write_bytes(b"not a result")
        again = _label(folder, srv.model_url, tmp_path)
    assert not again["student"]["reused"] and "training" in again["timings"]
    assert _labels(tmp_path) == labels  # the same seeds, releases and answers: the same labels
