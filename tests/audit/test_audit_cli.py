"""The audit on a real query log: mock server logs what the OIP client sent; the CLI traces and attacks it."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import typer
from PIL import Image
from typer.testing import CliRunner

from ldpclient.audit import load_plan, load_query_log, run_audit, sources_from_plan
from ldpclient.cli.audit import audit
from ldpclient.cli.groups import with_groups
from ldpclient.io.folders import load_private_folder
from ldpclient.privacy import laplace
from ldpclient.teachers import connect
from ldpclient.teachers.client import QueryClient
from ldpclient.transfer.augment import QueryPlan
from mock_server import serve

N, SIZE = 24, 12


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Private PNG folder, a Sup plan, and the query log of a real server that answered it."""
    root = tmp_path_factory.mktemp("audit")
    folder = root / "private"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(N):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE), dtype=np.uint8), mode="L").save(folder / f"{k:03d}.png")
    records = load_private_folder(folder, (1, SIZE, SIZE)).records
    mech = laplace(2.0, per="element")
    release = mech.release(records, generator=torch.Generator().manual_seed(1))
    plan = QueryPlan("sup", N, num_queries=90, seed=5, batch_size=32)
    log = root / "queries.jsonl"
    # max_batch_size 20 < plan batch 32: the client splits batches, request ids get a "/k" suffix
    with serve(model="trivial", image_size=SIZE, query_log=str(log), max_batch_size=20) as srv:
        client = QueryClient(connect(srv.url + "/v2/models/digits"))
        answered = list(client.label_batches(plan.batches(release)))
    assert len(answered) == plan.num_batches
    plan_file = root / "plan.json"
    plan_file.write_text(json.dumps({"plan": dataclasses.asdict(plan)}))
    return {"root": root, "folder": folder, "records": records, "release": release, "plan": plan,
            "plan_file": plan_file, "log": log, "mech": mech}


def test_logged_queries_are_traced_to_their_records(logged):
    q, segments = load_query_log(logged["log"])
    plan = load_plan(logged["plan_file"])
    assert plan == logged["plan"]
    src = sources_from_plan(plan, segments)
    assert q.shape == (90, 1, SIZE, SIZE) and (src >= 0).all()
    rel = logged["release"].values
    # the OIP wire encoding clips FP32 queries to the value range [0, 1]
    assert torch.allclose(q, ((rel[src[:, 0]] + rel[src[:, 1]]) / 2).clamp(0, 1), atol=1e-6)


def test_run_audit_on_the_log(logged, tmp_path):
    rep = run_audit(logged["records"], queries=logged["log"], plan=logged["plan_file"], mechanism=logged["mech"],
                    cnn_steps=0, empirical=False, rme=False, out_dir=tmp_path)
    row = rep["summary"][0]
    assert row["augment"] == "sup" and rep["logged"]["traced"] == 90
    assert row["linkage_top1"] > 5 * row["linkage_chance"]  # random-noise records are very identifiable
    assert (tmp_path / "audit.json").is_file() and (tmp_path / "audit_reconstructions.png").is_file()
    with pytest.raises(ValueError, match="plan"):
        run_audit(logged["records"], queries=logged["log"], mechanism=logged["mech"], empirical=False, rme=False)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(with_groups(audit))
    return app


def test_cli_json_report(logged, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(_app(), [
        "--private", str(logged["folder"]), "--queries", str(logged["log"]), "--plan", str(logged["plan_file"]),
        "--epsilon", "2", "--epsilon-unit", "element", "--cnn-steps", "0", "--out", str(out), "--json",
    ])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert set(rep) >= {"summary", "logged", "empirical_epsilon", "rme", "files", "flags"}
    assert rep["summary"][0]["epsilon_record"] == pytest.approx(2.0 * SIZE * SIZE)
    assert rep["empirical_epsilon"]["client"]["violated"] is False
    assert json.loads((out / "audit.json").read_text())["num_records"] == N


def test_cli_bad_inputs(logged, tmp_path):
    runner = CliRunner()
    res = runner.invoke(_app(), ["--private", str(logged["folder"]), "--queries", str(logged["log"])])
    assert res.exit_code == 2 and "--epsilon" in res.output
    res = runner.invoke(_app(), ["--private", str(tmp_path / "missing"), "--sweep", "1"])
    assert res.exit_code == 2 and "missing" in res.output
    res = runner.invoke(_app(), ["--private", str(logged["folder"])])
    assert res.exit_code == 2 and "nothing to audit" in res.output
    res = runner.invoke(_app(), ["--private", str(logged["folder"]), "--sweep", "1", "--teacher", "http://x/y"])
    assert res.exit_code == 2 and "local" in res.output


def test_module_entry_point_reports_errors_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ldpclient.cli", "audit", "--private", str(tmp_path / "nope"),
                           "--sweep", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr


def _grey_folder(tmp_path, seed):
    """N random SIZE x SIZE grey PNGs in tmp_path/private."""
    folder = tmp_path / "private"
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for k in range(N):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE), dtype=np.uint8), mode="L").save(folder / f"{k:03d}.png")
    return folder


def test_audit_of_a_real_label_run_reads_settings_and_plan_from_its_report(tmp_path):
    """`ldpclient label` against the mock teacher with a query log, then `ldpclient audit --run REPORT`."""
    from ldpclient.cli.commands import app

    folder = _grey_folder(tmp_path, seed=3)
    log = tmp_path / "queries.jsonl"
    out = tmp_path / "labels.csv"
    with serve(model="trivial", image_size=SIZE, query_log=str(log), max_batch_size=16) as srv:
        res = CliRunner().invoke(
            app,
            [
                "label",
                str(folder),
                "--teacher",
                srv.url + "/v2/models/digits",
                "--state-dir",
                str(tmp_path / "state"),
                "--output",
                str(out),
                "--epsilon",
                "3",
                "--epsilon-unit",
                "element",
                "--reduce",
                "2",
                "--queries",
                "60",
                "--batch-size",
                "16",
                "--epochs",
                "1",
                "--max-retry-time",
                "0",
                "--quiet",
            ],
        )
    assert res.exit_code == 0, res.output
    report_path = out.with_name("labels.report.json")
    recorded = json.loads(report_path.read_text())
    assert recorded["plan"]["kind"] == "sup" and recorded["plan"]["n"] == N
    res = CliRunner().invoke(_app(), [
        "--run", str(report_path), "--queries", str(log), "--private", str(folder),
        "--cnn-steps", "0", "--no-empirical", "--no-rme", "--out", str(tmp_path / "audit"), "--json",
    ])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["logged"]["traced"] == 60  # every logged query mapped to its two records through the run's plan
    row = rep["summary"][0]
    assert row["augment"] == "sup"
    # the run's settings were used: 3 per element on the 2x2-reduced record
    assert row["epsilon_record"] == pytest.approx(3.0 * (SIZE // 2) ** 2)
    res = CliRunner().invoke(_app(), ["--run", str(log), "--queries", str(log), "--private", str(folder)])
    assert res.exit_code == 2 and "--run" in res.output
    # an explicit option wins over the run report
    res = CliRunner().invoke(_app(), [
        "--run", str(report_path), "--queries", str(log), "--private", str(folder), "--epsilon", "1",
        "--cnn-steps", "0", "--no-empirical", "--no-rme", "--out", str(tmp_path / "audit1"), "--json",
    ])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["summary"][0]["epsilon_record"] == pytest.approx(1.0 * (SIZE // 2) ** 2)


def _serve_mock(*args: str) -> tuple[subprocess.Popen, str]:
    """`ldpclient serve-mock ARGS` as a real process; (process, base URL) once it listens."""
    import threading

    from mock_server import LISTENING_PREFIX

    proc = subprocess.Popen([sys.executable, "-c", "from ldpclient.cli.commands import app; app()", "serve-mock",
                             "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(120, proc.kill)
    timer.start()
    line = proc.stdout.readline()
    timer.cancel()
    assert line.startswith(LISTENING_PREFIX), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line[len(LISTENING_PREFIX):].strip()


def test_ldpclient_audit_on_what_label_and_serve_mock_query_log_wrote(tmp_path):
    """The issue's command line: `ldpclient audit --run labels.report.json --queries queries.jsonl --private DIR`
    on a `label` run against `ldpclient serve-mock --query-log`; the partial report of a run stopped at the
    money cap is refused, and once the run is finished (resumed) its report audits both runs' queries. (The cap
    is one the run could foresee only without the answers the teacher drops: each one that may have been billed
    counts against it, so the run stops partway.)"""
    import signal

    from ldpclient.cli.commands import app
    from ldpclient.cli.errors import EXIT_MONEY_CAP
    from ldpclient.report.run_report import RunReport

    folder = _grey_folder(tmp_path, seed=4)
    log = tmp_path / "queries.jsonl"
    report_path = tmp_path / "labels.report.json"
    audit_args = ["audit", "--run", str(report_path), "--queries", str(log), "--private", str(folder),
                  "--cnn-steps", "0", "--no-empirical", "--no-rme", "--out", str(tmp_path / "audit"), "--json"]
    proc, url = _serve_mock("--model", "trivial", "--image-size", str(SIZE), "--max-batch-size", "16",
                            "--price-per-image", "0.01", "--query-log", str(log), "--drop-rate", "0.3",
                            "--fault-seed", "1")
    try:
        label = ["label", str(folder), "--teacher", url + "/v2/models/digits", "--state-dir", str(tmp_path / "state"),
                 "--output", str(tmp_path / "labels.csv"), "--epsilon", "3", "--epsilon-unit", "element",
                 "--reduce", "2", "--queries", "40", "--batch-size", "8", "--price", "0.01", "--epochs", "1",
                 "--max-retry-time", "30", "--quiet"]
        capped = CliRunner().invoke(app, [*label, "--money-cap", "0.4"])
        assert capped.exit_code == EXIT_MONEY_CAP, capped.output
        res = CliRunner().invoke(app, audit_args)
        assert res.exit_code == 2
        assert "stopped early" in res.output and "money cap" in res.output and "Traceback" not in res.output
        done = CliRunner().invoke(app, [*label, "--money-cap", "10"])
        assert done.exit_code == 0, done.output
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
    run = RunReport.read(report_path)
    assert run.plan is not None and run.plan["kind"] == "sup" and run.queries.from_journal == 24
    res = CliRunner().invoke(app, audit_args)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    # the capped run's 24 queries and the resumed run's 16 through one plan, and the 16 whose answers were dropped
    # and which were sent again: the teacher saw them twice
    assert rep["logged"]["traced"] == 56
    row = rep["summary"][0]
    assert row["augment"] == "sup" and row["epsilon_record"] == pytest.approx(3.0 * (SIZE // 2) ** 2)


def test_audit_refuses_a_bad_run_report_in_one_line(tmp_path):
    folder = tmp_path / "private"
    folder.mkdir()
    stop = tmp_path / "stop.report.json"
    stop.write_text(json.dumps({"schema": 1, "command": "label", "ok": False,
                                "stopped": {"reason": "privacy cap", "message": "privacy cap reached"}}))
    newer = tmp_path / "newer.report.json"
    newer.write_text(json.dumps({"schema": 99, "command": "label", "ok": True}))
    cases = [(tmp_path / "missing.json", "does not exist"), (stop, "stopped early (privacy cap: privacy cap reached)"),
             (newer, "schema 99 is not supported")]
    for path, match in cases:
        res = CliRunner().invoke(_app(), ["--run", str(path), "--sweep", "1", "--private", str(folder)])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --run: run report") and match in lines[0], res.output


def test_the_audit_leaves_the_global_rng_alone(logged, tmp_path):
    """The empirical-epsilon test draws its event sample from a generator of its own, not the global RNG."""
    before = torch.random.get_rng_state().clone()
    run_audit(logged["records"], queries=logged["log"], plan=logged["plan_file"], mechanism=logged["mech"],
              cnn_steps=2, empirical=True, rme=False, out_dir=tmp_path)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_rme_audit_works_with_a_reducing_mechanism(logged, tmp_path):
    """RME read the noise scale from a guarantee of 7x7 feature vectors, which a reduction cannot pool:
    every audit of a default run (reduction 4 at 28x28) failed."""
    mech = laplace(50.0, per="record", reduction=2)
    report = run_audit(logged["records"], mechanism=mech, cnn_steps=0, empirical=False, rme=True, out_dir=tmp_path)
    assert report["rme"]


@pytest.mark.parametrize("mechanism", ["tldp-weighted", "gaussian"])
def test_the_audit_builds_every_mechanism_as_label_does(logged, tmp_path, mechanism):
    """The audit had its own mechanism builder without tldp-weighted's weights: auditing such a run crashed.
    It now builds the mechanism through the one builder label uses."""
    res = CliRunner().invoke(_app(), ["--private", str(logged["folder"]), "--sweep", "50", "--epsilon-unit", "record",
                                      "--mechanism", mechanism, "--out", str(tmp_path / "a"), "--json",
                                      "--cnn-steps", "0", "--no-empirical", "--no-rme", "--max-queries", "8"])
    assert res.exit_code == 0, res.output


def test_old_option_spellings_are_hidden_aliases(logged, tmp_path):
    """One name per concept: --epsilon-unit and --reduce as in label; --per and --reduction still work, unlisted."""
    runner = CliRunner()
    help_text = runner.invoke(_app(), ["--help"]).output
    assert "--epsilon-unit" in help_text and "--per " not in help_text and "--reduction" not in help_text
    base = ["--private", str(logged["folder"]), "--sweep", "50", "--mechanism", "laplace", "--json",
            "--cnn-steps", "0", "--no-empirical", "--no-rme", "--max-queries", "8", "--out", str(tmp_path / "a")]
    res = runner.invoke(_app(), [*base, "--per", "record", "--reduction", "1"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(_app(), [*base, "--epsilon-unit", "record", "--per", "element"])
    assert res.exit_code == 2 and "disagree" in res.output
