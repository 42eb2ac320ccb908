"""A client killed with SIGKILL mid-run and restarted sends no journaled batch again,
pays nothing twice and ends with the labels of an uninterrupted run (real mock teacher)."""

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

mock_server = pytest.importorskip("mock_server")

from ldpclient.teachers import Journal  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
N_BATCHES, SIZE, WORKERS, PRICE = 16, 8, 2, 0.25

CHILD = textwrap.dedent(
    f"""
    import json, sys
    import numpy as np, torch
    torch.set_num_threads(1)
    from ldpclient.privacy import Domain, Guarantee
    from ldpclient.privacy.release import _RELEASE_TOKEN, Release
    from ldpclient.teachers import CostMeter, QueryClient, connect
    from ldpclient.teachers.http import RetryPolicy

    url, journal, out = sys.argv[1:4]
    g = torch.Generator().manual_seed(7)
    vals = torch.rand({N_BATCHES * SIZE}, 1, 28, 28, generator=g)
    n_el = 28 * 28
    rel = Release(vals, Guarantee("laplace", 1.0, 0.0, n_el, 0.0, n_el, Domain()), (1, 28, 28), _token=_RELEASE_TOKEN)
    plan = [(f"q{{k:04d}}", rel[k * {SIZE}:(k + 1) * {SIZE}]) for k in range({N_BATCHES})]
    teacher = connect(url, retry=RetryPolicy(initial_wait=0.01, max_wait=0.05))
    client = QueryClient(teacher, workers={WORKERS}, journal=journal, cost=CostMeter(price_per_query={PRICE}))
    labels = {{}}
    for bid, lab in client.label_batches(plan):
        labels[bid] = lab.tolist()
        print("done", bid, flush=True)
    json.dump({{"labels": labels, "sent": client.stats.batches_sent, "from_journal": client.stats.batches_from_journal,
               "spent_run": client.cost.spent_run, "spent_total": client.cost.spent_total}}, open(out, "w"))
    print("finished", flush=True)
    """
)


def run_child(script, url, journal, out, *, kill_after=None, kill_delay=None):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, str(script), url, str(journal), str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO),
    )
    done = 0
    try:
        if kill_delay is not None:
            for line in proc.stdout:  # wait until it is really sending, then kill at an arbitrary moment
                if line.startswith("done"):
                    break
            time.sleep(kill_delay)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return None
        for line in proc.stdout:
            if line.startswith("done"):
                done += 1
                if kill_after is not None and done >= kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(30)
                    return None
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:]
        return json.loads(Path(out).read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_killed_client_resumes_without_resending_or_double_charging(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    # uninterrupted reference run against its own server
    with mock_server.serve(model="trivial", latency=0.02) as ref_srv:
        ref = run_child(script, f"oip+{ref_srv.url}/digits", tmp_path / "ref.sqlite", tmp_path / "ref.json")
    assert ref["sent"] == N_BATCHES

    log = tmp_path / "queries.jsonl"
    journal = tmp_path / "journal.sqlite"
    with mock_server.serve(model="trivial", latency=0.05, query_log=str(log)) as srv:
        url = f"oip+{srv.url}/digits"
        assert run_child(script, url, journal, tmp_path / "a.json", kill_after=4) is None
        with Journal(journal) as j:
            answered_1 = set(j.batch_ids(j_scope := f"oip:{srv.url}/v2/models/digits"))
        assert len(answered_1) >= 4
        assert run_child(script, url, journal, tmp_path / "b.json", kill_delay=0.15) is None
        with Journal(journal) as j:
            answered_2 = set(j.batch_ids(j_scope))
        assert answered_1 <= answered_2
        final = run_child(script, url, journal, tmp_path / "c.json")
        usage = srv.usage()["total"]

    # same labels as the uninterrupted run
    assert final["labels"] == ref["labels"]
    assert final["from_journal"] == len(answered_2) and final["sent"] == N_BATCHES - len(answered_2)
    # what the server received: every batch at least once; journaled batches never again
    sent = collections.Counter(meta["request_id"] for meta, _ in mock_server.read_query_log(log))
    assert set(sent) == set(ref["labels"])
    for bid in answered_1:
        assert sent[bid] == 1, bid
    resent = {b for b, c in sent.items() if c > 1}
    # only requests in flight at a kill (answered or not, never journaled) may be repeated
    assert resent.isdisjoint(answered_1)
    assert len(resent) <= 2 * WORKERS
    # every batch journaled once; the money counted covers everything the server billed, the requests
    # in flight at each kill included (booked before they were sent), and no more than those
    assert usage["images"] == sum(sent.values()) * SIZE
    with Journal(journal) as j:
        assert j.count(j_scope) == N_BATCHES
        counted = j.total_spend(j_scope)
    assert usage["cost"] <= counted + 1e-9
    assert counted <= (N_BATCHES + 2 * WORKERS) * SIZE * PRICE + 1e-9
    assert final["spent_total"] == pytest.approx(counted)
