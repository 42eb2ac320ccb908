"""The client against the mock teacher in strict-spec mode, which behaves like a stock server.

Strict mode (``serve(strict_spec=True)``, CLI ``--strict-spec``): empty health bodies, no custom
metadata ``parameters`` (no num_classes, value_range, class names or batch limit), no binary
tensor extension (a binary body gets a 500, as from MLServer), and optionally a fresh response id
(``fresh_response_id=True``, as KServe's examples answer). These are the ways real servers broke
the first release; each test below would have caught one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
import torch
from typer.testing import CliRunner

import mock_server
from ldpclient.cli.commands import app
from ldpclient.cli.errors import EXIT_TEACHER, EXIT_USAGE
from ldpclient.privacy import laplace
from ldpclient.report.label_files import read_labels
from ldpclient.run.facts import WIRE_CHOICES
from ldpclient.teachers import QueryClient, connect
from ldpclient.teachers.http import RetryPolicy
from ldpclient.teachers.wire import WIRE_FORMATS, WireMemory
from support.image_folders import random_png_folder

SIZE = 8


def fast() -> RetryPolicy:
    return RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.02, jitter=0.0, max_total=5, sleep=lambda s: None)


def _private(tmp_path: Path, n: int = 12) -> Path:
    return random_png_folder(tmp_path / "private", seed=1, n=n, size=SIZE)


def _strict(**kw):
    opts = dict(model="trivial", image_size=SIZE, channels=1, strict_spec=True, price_per_image=0.01)
    opts.update(kw)
    return mock_server.serve(**opts)


def _label(folder: Path, url: str, tmp_path: Path, *extra: str):
    return CliRunner().invoke(
        app,
        [
            "label",
            str(folder),
            "--teacher",
            url,
            "--state-dir",
            str(tmp_path / "state"),
            "--output",
            str(tmp_path / "out" / "labels.csv"),
            "--epsilon",
            "4",
            "--epsilon-unit",
            "element",
            "--reduce",
            "2",
            "--queries",
            "24",
            "--batch-size",
            "8",
            "--epochs",
            "1",
            "--price",
            "0.01",
            "--max-retry-time",
            "0",
            "--quiet",
            *extra,
        ],
    )


def test_strict_mode_looks_like_a_stock_server():
    with _strict() as srv:
        health = requests.get(f"{srv.url}/v2/health/ready", timeout=5)
        assert health.status_code == 200 and health.content == b""
        meta = requests.get(f"{srv.url}/v2/models/digits", timeout=5).json()
        assert "parameters" not in meta and meta["inputs"][0]["shape"] == [-1, 1, SIZE, SIZE]
        assert requests.get(f"{srv.url}/v2", timeout=5).json()["extensions"] == []
        binary = requests.post(f"{srv.url}/v2/models/digits/infer", data=b'{"inputs":[]}',
                               headers={"Inference-Header-Content-Length": "13"}, timeout=5)
        assert binary.status_code == 500
        assert srv.usage()["total"]["images"] == 0  # an error answer is not billed


def test_label_against_a_stock_like_server_needs_only_what_it_cannot_publish(tmp_path):
    folder = _private(tmp_path)
    with _strict(fresh_response_id=True) as srv:
        url = f"{srv.url}/v2/models/digits"
        res = _label(folder, url, tmp_path)
        assert res.exit_code == EXIT_TEACHER
        assert "--num-classes" in res.output and "Traceback" not in res.output

        res = _label(folder, url, tmp_path, "--num-classes", "10")
        assert res.exit_code == 0, res.output
        report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        assert report["teacher"]["wire"] == "json"  # binary failed once, JSON answered: switched
        assert any("value_range [0, 1]" in a for a in report["teacher"]["assumed"])
        usage = srv.usage()["total"]
        # the failed binary probe was not billed, and the client counted each answered query once
        assert usage["images"] == report["queries"]["sent"] == 24
        assert report["cost"]["spent_run"] == pytest.approx(usage["cost"])
        assert usage["rejected"] == 1  # exactly one probe
        assert WireMemory(tmp_path / "state").get(url) == "json"
        assert len(read_labels(tmp_path / "out" / "labels.csv")) == 12

        # a fresh run of another configuration does not probe again: remembered in the state dir
        res = _label(folder, url, tmp_path, "--num-classes", "10", "--queries", "30")
        assert res.exit_code == 0, res.output
        assert srv.usage()["total"]["rejected"] == 1


def test_summary_says_what_was_assumed(tmp_path):
    folder = _private(tmp_path)
    with _strict() as srv:
        res = CliRunner().invoke(app, [
            "label", str(folder), "--teacher", f"{srv.url}/v2/models/digits", "--state-dir", str(tmp_path / "s"),
            "--output", str(tmp_path / "labels.csv"), "--queries", "24", "--epochs", "1", "--num-classes", "10",
            "--max-retry-time", "0",
        ])
    assert res.exit_code == 0, res.output
    assumed = [line for line in res.output.splitlines() if line.strip().startswith("assumed")]
    assert len(assumed) == 1 and "value_range [0, 1]" in assumed[0]


def test_supplied_facts_reach_the_report_and_contradictions_are_refused(tmp_path):
    folder = _private(tmp_path)
    names = tmp_path / "names.txt"
    names.write_text("\n".join(f"class-{k}" for k in range(10)) + "\n")
    with _strict() as srv:
        url = f"{srv.url}/v2/models/digits"
        res = _label(folder, url, tmp_path, "--class-names", str(names), "--value-range", "0,1",
                     "--input-shape", f"1,{SIZE},{SIZE}", "--wire", "json", "--format", "jsonl",
                     "--output", str(tmp_path / "out" / "labels.jsonl"))
        assert res.exit_code == 0, res.output
        report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        assert report["teacher"]["assumed"] == [] and report["teacher"]["num_classes"] == 10
        assert report["teacher"]["wire"] == "json" and srv.usage()["total"]["rejected"] == 0  # no probe
        rows = [json.loads(line) for line in (tmp_path / "out" / "labels.jsonl").read_text().splitlines()]
        assert all(r["label_name"] == f"class-{r['label']}" for r in rows)

        res = _label(folder, url, tmp_path, "--num-classes", "10", "--input-shape", "1,9,9")
        assert res.exit_code == EXIT_USAGE and "input shape" in res.output
    with mock_server.serve(model="trivial", image_size=SIZE) as srv:  # publishes num_classes 10
        res = _label(folder, f"{srv.url}/v2/models/digits", tmp_path, "--num-classes", "7")
        assert res.exit_code == EXIT_USAGE and "publishes num_classes 10" in res.output


@pytest.mark.parametrize("args, needle", [
    (["--value-range", "1,0"], "--value-range"),
    (["--input-shape", "1,28"], "--input-shape"),
    (["--num-classes", "1"], "--num-classes"),
    (["--wire", "xml"], "--wire"),
])
def test_bad_fact_options_are_one_line_errors(tmp_path, args, needle):
    folder = _private(tmp_path, n=3)
    res = _label(folder, "http://127.0.0.1:9/v2/models/m", tmp_path, *args)
    assert res.exit_code == EXIT_USAGE and needle in res.output


def test_python_api_against_a_stock_like_server(tmp_path):
    """connect() takes the same facts; a JSON fallback is warned about once and billed once."""
    g = torch.Generator().manual_seed(0)
    release = laplace(3.0, per="element").release(torch.rand(20, 1, SIZE, SIZE, generator=g), generator=g)
    with _strict(fresh_response_id=True) as srv:
        teacher = connect(f"{srv.url}/v2/models/digits", num_classes=10, state_dir=tmp_path, retry=fast())
        client = QueryClient(teacher, batch_size=5, workers=2)
        labels = client.label(release)
        assert labels.shape == (20,) and teacher.binary is False
        assert srv.usage()["total"]["images"] == 20 and srv.usage()["total"]["rejected"] == 1
        assert teacher.metadata().assumed and client.stats.queries_sent == 20
    with _strict() as srv:  # wire="binary" on a server without the extension: a clear teacher error
        teacher = connect(f"{srv.url}/v2/models/digits", num_classes=10, wire="binary", retry=fast())
        with pytest.raises(Exception, match="HTTP 500"):
            teacher.classify(release)


def test_wire_choices_are_one_list():
    assert WIRE_CHOICES == WIRE_FORMATS


def test_model_facts_come_from_the_config_file_too(tmp_path):
    folder = _private(tmp_path)
    config = tmp_path / "ldpclient.toml"
    config.write_text('[label]\nnum-classes = 10\nvalue-range = "0,1"\nwire = "json"\n')
    with _strict() as srv:
        res = _label(folder, f"{srv.url}/v2/models/digits", tmp_path, "--config", str(config))
        assert res.exit_code == 0, res.output
        report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
        assert report["teacher"]["assumed"] == [] and report["teacher"]["wire"] == "json"
        assert srv.usage()["total"]["rejected"] == 0
