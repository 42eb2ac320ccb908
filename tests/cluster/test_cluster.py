"""The release and the student's passes on a Ray cluster (``ldpclient.cluster``), against a local Ray (conftest
``ray_local``) and the throwaway PostgreSQL (``postgres_url``).

Checked: an actor SIGKILLed after its block committed is replaced and the block run again with nothing charged twice;
the workers' releases are the ledger's (each image charged once, a second pass charges nothing, the driver reads back
what they stored); the workers' predictions are the local ones; ``label --cluster auto`` labels a
folder whose releases and answers a run without the cluster then finds stored (nothing noised or sent again);
``--cluster`` without a shared ``--state``, or with ``--seed``, is refused in one line; a label run hands its release
and every pass of its student (adaptation's included) to the engine (an in-process one, counting them), and no key
from the environment among what the workers receive.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ldpclient.cli.errors import EXIT_USAGE
from ldpclient.cluster.engine import Cluster, LocalEngine
from ldpclient.cluster.ray_engine import RayEngine
from ldpclient.cluster.stages import ReleaseStage
from ldpclient.io.records import TensorRecords
from ldpclient.privacy import laplace
from ldpclient.privacy.ledger import Ledger
from ldpclient.transfer.student import predict_proba
from support.cli_runs import cli_command, invoke, label_args, mock_teacher, private_folder, stop_after

#: Seconds a Ray test may take. Idle here the longest takes 15 s; with two CPU-bound processes on the 2 cores, Ray's
#: actor pools slowed them 10-20x (262 s the longest, alone), so the suite's 300 s would not be 3 times a busy run's.
RAY_TIMEOUT = 900
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(RAY_TIMEOUT)]


class KilledAfterCommit(ReleaseStage):
    """The release stage, but the actor that first commits the block at ``start`` SIGKILLs itself before answering."""

    def __init__(self, *, marker: str, start: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marker, self.start = marker, start

    def committed(self, block) -> None:
        if int(block["start"]) == self.start and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)


class CountingEngine(LocalEngine):
    """The in-process engine, keeping the name of every stage a run hands it."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.shipped: list[bytes] = []  # what a worker would receive: the stage's arguments and its blocks

    def map_blocks(self, stage, kwargs, blocks):
        self.stages.append(stage.__name__)
        self.shipped.append(pickle.dumps(kwargs))

        def kept(blocks):
            for block in blocks:
                self.shipped.append(pickle.dumps(block))
                yield block

        yield from super().map_blocks(stage, kwargs, kept(blocks))


def _records(n: int = 600) -> TensorRecords:
    return TensorRecords(torch.rand((n, 1, 28, 28), generator=torch.Generator().manual_seed(5)))


def test_workers_charge_each_image_once_even_when_an_actor_is_killed_after_its_commit(
    ray_local, postgres_url: str, tmp_path: Path
) -> None:
    """The release on the workers with an actor SIGKILLed right after its block committed: Ray replaces it and runs
    the block again, which finds its releases stored (nothing charged twice, none over the cap). Then the driver's
    release pass (``Cluster.release``) finds every release stored and charges nothing, and what the driver reads
    back is what the workers stored."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    key = str(tmp_path / "ledger.key")
    mech = laplace(10.0, per="record")
    records = _records()
    x = records.read(np.arange(len(records)))
    with Ledger(postgres_url, key_file=key):
        pass
    chunk = 200
    blocks = [{"start": s, "records": x[s:s + chunk].numpy(), "sources": None} for s in range(0, len(x), chunk)]
    marker = tmp_path / "killed"
    kwargs = {"ledger": postgres_url, "key_file": key, "cap_epsilon": 15.0, "mechanism": mech, "scope": "teacher",
              "marker": str(marker), "start": 200}
    engine = RayEngine()
    results = list(engine.map_blocks(KilledAfterCommit, kwargs, blocks))
    assert marker.exists()  # the kill happened, after the block's commit
    by_start = {r["start"]: r["fresh"] for r in results}
    assert sorted(by_start) == [0, 200, 400]
    assert by_start[0].all() and by_start[400].all()
    assert not by_start[200].any()  # the retried block found its releases stored
    with Ledger(postgres_url, key_file=key) as led:
        spent = led.spent(x).epsilon
        assert spent.tolist() == [10.0] * len(x)  # every image charged once, none over the cap of 15
        assert led.summary()["releases"] == len(x) and led.verify() == []
    done: list[int] = []
    again = Cluster(engine, postgres_url, key, 15.0).release(mech, "teacher", records, done.append)
    assert not again.any() and sum(done) == len(records)  # every release found stored: nothing noised or charged
    with Ledger(postgres_url, key_file=key) as led:
        assert led.release(mech, x, scope="teacher").reused.all()  # the driver reads back the stored releases
        assert led.spent(x).epsilon.tolist() == [10.0] * len(x)


def test_the_workers_predictions_are_the_local_ones(ray_local) -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    records = _records(5000)
    there = Cluster(RayEngine(), "unused", None, None).predict_proba(model, records)
    assert torch.allclose(there, predict_proba(model, records), atol=1e-6)


def test_a_label_run_hands_its_release_and_every_student_pass_to_the_engine(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--cluster`` with the engine in this process: the release and every pass of the student over the images
    (adaptation's included) go through the engine, and the run's figures are those of a run without it. (The
    Ray tests below run the same stages on actors, without adaptation: each pass there starts an actor pool.)"""
    engine = CountingEngine()
    monkeypatch.setattr("ldpclient.cluster.engine.open_engine", lambda address, **_: engine)
    key = "sk-cluster-secret-0123456789"
    monkeypatch.setenv("LDPCLIENT_TOKEN", key)  # a key in the environment never goes to the workers
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        done = invoke(
            [
                *label_args(folder, srv.model_url, tmp_path, "--json"),
                "--cluster",
                "auto",
                "--state",
                postgres_url,
                "--ledger-key-file",
                str(tmp_path / "k"),
            ]
        )
    assert done.exit_code == 0, done.output
    rep = json.loads(done.stdout)
    assert rep["ledger"]["fresh"] == 12 - rep["counts"]["not_released"] and rep["counts"]["labelled"] == 12
    assert engine.stages.count("ReleaseStage") == 1
    assert engine.stages.count("PredictStage") >= 2 and set(engine.stages) == {"ReleaseStage", "PredictStage"}
    assert engine.shipped and not any(key.encode() in shipped for shipped in engine.shipped)


def test_label_on_the_cluster_then_here_finds_everything_stored(ray_local, postgres_url: str, tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    state = ["--state", postgres_url, "--ledger-key-file", str(tmp_path / "k")]
    with mock_teacher() as srv:
        refused = invoke([*label_args(folder, srv.model_url, tmp_path), "--cluster", "auto", "--seed", "1", *state])
        assert refused.exit_code == EXIT_USAGE and "--cluster refuses --seed" in refused.stderr
        alone = invoke([*label_args(folder, srv.model_url, tmp_path), "--cluster", "auto"])
        assert alone.exit_code == EXIT_USAGE and "--cluster needs --state" in alone.stderr
        on_cluster = invoke(
            [*label_args(folder, srv.model_url, tmp_path, "--json", "--no-adapt"), "--cluster", "auto", *state]
        )
        assert on_cluster.exit_code == 0, on_cluster.output
        rep = json.loads(on_cluster.stdout)
        assert rep["ledger"]["fresh"] == 12 - rep["counts"]["not_released"] and rep["counts"]["labelled"] == 12
        assert rep["queries"]["sent"] == 24
        here = invoke([*label_args(folder, srv.model_url, tmp_path, "--json", "--no-adapt"), *state])
        assert here.exit_code == 0, here.output
        rep2 = json.loads(here.stdout)
        assert rep2["ledger"]["fresh"] == 0 and rep2["queries"]["sent"] == 0 and rep2["queries"]["from_journal"] == 24


def test_the_driver_killed_mid_run_and_the_command_run_again(ray_local, postgres_url: str, tmp_path: Path) -> None:
    """The driver (the command) SIGKILLed while it queries; the same command again resumes from the database:
    nothing noised again, at most the batch in flight sent twice. Both join the session's Ray by its address
    (``--cluster ADDRESS``), as a command joins an existing cluster."""
    folder = private_folder(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    address = ray_local.get_runtime_context().gcs_address
    with mock_teacher(latency=0.2) as srv:
        # --no-adapt: the student's passes on the workers are the other tests' (each pass starts an actor pool)
        args = [*label_args(folder, srv.model_url, tmp_path, "--queries", "40", "--batch-size", "4", "--no-adapt"),
                "--cluster", address,
                "--state", postgres_url, "--ledger-key-file", str(tmp_path / "k")]
        code, _ = stop_after(srv, args, env, 8, signal.SIGKILL, timeout=RAY_TIMEOUT)
        assert code == -signal.SIGKILL
        before = srv.usage()["total"]["images"]
        assert 8 <= before < 40
        done = subprocess.run(cli_command(*args, "--json"), env=env, capture_output=True, text=True,
                              timeout=RAY_TIMEOUT)
        assert done.returncode == 0, done.stderr
        rep = json.loads(done.stdout)
        assert rep["ledger"]["fresh"] == 0  # the workers' releases, committed before the kill, were reused
        sent, journal = rep["queries"]["sent"], rep["queries"]["from_journal"]
        assert sent + journal == 40 and journal >= before - 4
        assert srv.usage()["total"]["images"] - before == sent




def test_a_cap_lowered_on_another_host_binds_the_workers_and_ends_the_run_in_one_line(
    ray_local, postgres_url: str, tmp_path: Path
) -> None:
    """The issue's race on the cluster: a run settled its cap at 100, another host lowers it to 5 (budget --set-cap);
    the workers' next charges (10 each) are refused under the lowered cap, and the driver gets the ledger's one-line
    refusal, not a traceback blaming a cap nobody gave."""
    from ldpclient.privacy.ledger import BudgetExceeded

    key = str(tmp_path / "ledger.key")
    mech = laplace(10.0, per="record")
    with Ledger(postgres_url, key_file=key, cap_epsilon=100.0):
        pass
    with Ledger(postgres_url, key_file=key) as other_host:
        other_host.set_caps(5.0, origin="budget --set-cap")
    with pytest.raises(BudgetExceeded) as info:
        Cluster(RayEngine(), postgres_url, key, 100.0).release(mech, "teacher", _records(400), lambda n: None)
    message = str(info.value)
    assert "\n" not in message and "epsilon cap 5" in message and "lowered on this state" in message, message
    with Ledger(postgres_url, key_file=key) as led:
        assert led.summary()["releases"] == 0  # nothing charged past the lowered cap
