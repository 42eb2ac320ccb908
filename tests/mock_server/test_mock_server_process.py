"""`python -m mock_server` as a real process: listening line, auth via env, graceful SIGTERM/SIGINT, bad options."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
import requests

from mock_server import LISTENING_PREFIX, main, serve


def test_subprocess_server_with_token_and_sigterm():
    with serve(subprocess=True, model="trivial", image_size=8, tokens=["proc-token"], price_per_image=2.0) as srv:
        assert srv.process is not None and srv.url.startswith("http://127.0.0.1:")
        # the token travels in the environment, never on the command line
        assert "proc-token" not in " ".join(srv.process.args)
        auth = {"Authorization": "Bearer proc-token"}
        body = {"id": "p", "inputs": [{"name": "input", "shape": [2, 1, 8, 8], "datatype": "FP32",
                                       "data": [0.0] * 64 + [1.0] * 64}]}
        assert requests.post(f"{srv.model_url}/infer", json=body).status_code == 401  # no key: not counted
        r = requests.post(f"{srv.model_url}/infer", json=body, headers=auth)
        assert r.json()["outputs"][0]["data"] == [0, 9]
        assert srv.usage()["total"] == {"requests": 1, "images": 2, "cost": 4.0, "rejected": 0}
    assert srv.returncode == 0  # stop() sent SIGTERM
    err = srv.stderr_text()
    assert "teacher trivial" in err and "stopped after 1 billed requests, 2 images" in err
    assert "proc-token" not in err


def test_module_cli_prints_url_and_stops_on_sigint():
    proc = subprocess.Popen([sys.executable, "-m", "mock_server", "--port", "0", "--model", "trivial"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        timer = threading.Timer(120, proc.kill)
        timer.start()
        line = proc.stdout.readline()
        timer.cancel()
        assert line.startswith(LISTENING_PREFIX), line
        url = line[len(LISTENING_PREFIX):].strip()
        with requests.Session() as s:  # an idle keep-alive connection must not block shutdown
            assert s.get(f"{url}/v2/health/ready").json() == {"ready": True}
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 0
        assert "stopped after 0 billed requests" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("args,match", [
    (["--error-rate-500", "2"], "error_rate_500 must be a probability"),
    (["--model", "folder"], "needs train_folder"),
    (["--checkpoint", "/nonexistent/teacher.pt"], "does not exist"),
    (["--train-folder", "/nonexistent/imgs"], "not a directory"),
])
def test_bad_options_exit_2_with_a_clear_message(args, match, capsys):
    try:
        code = main(["--port", "0", *args])
    except SystemExit as exc:  # argparse-level errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and match in err and out == ""
