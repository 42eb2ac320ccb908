"""Shared test configuration."""

import os
import shutil
import signal
import tempfile
from pathlib import Path

import torch

from ldpclient.io.folders import available_cores  # noqa: E402

# Two cores on CI, shared by the test processes (make test runs one per core: pytest-xdist): each computes on one
# thread, and every process it starts on its share of the cores (torch and the commands read OMP_NUM_THREADS). Two
# test processes whose commands computed on two threads each took the suite twice as long (806 s against 393 s).
# Both are set, not defaulted: pytest-xdist's workers inherit the environment of the process that started them,
# which ran this file too.
torch.set_num_threads(1)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ["OMP_NUM_THREADS"] = str(max(1, available_cores() // _WORKERS))

# Library defaults write state (ledger, journal, remembered wire formats) to the user's state directory; tests that do
# not pass their own get a throw-away one instead of the user's, one per test (:func:`own_state_dir`), where the mock
# teachers find the weights this test process trained (:data:`TEACHER_WEIGHTS`).
TEACHER_WEIGHTS = Path(tempfile.mkdtemp(prefix="ldpclient-tests-")) / "mock_teacher"
TEACHER_WEIGHTS.mkdir()
os.environ["LDPCLIENT_STATE_DIR"] = str(TEACHER_WEIGHTS.parent)

# A test run started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every child that the Ctrl-C tests start: the signal they send would do nothing.
# A caught handler here is reset to the default in each child at exec, as in a run from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


import itertools  # noqa: E402

import pytest  # noqa: E402

_databases = itertools.count()

#: Tests that must not run beside each other on one machine, by where they live: ``make test`` runs the suite on
#: every core (pytest-xdist, ``--dist loadgroup``), and each group here runs on one worker, one test at a time. The
#: cluster tests each start a local Ray (one per machine at a time); the demo's listen on port 8080 when it is free.
EXCLUSIVE_GROUPS = {"cluster/": "ray", "cli/test_cli_demo.py": "demo-port"}


#: The tests that take longest (each a few label runs, or a local Ray), by where they live: run first, so that the
#: workers end together rather than one waiting on the other's last long test.
LONGEST = ("test_docs.py::test_the_example_runs", "test_readme_new_shell.py", "cluster/",
           "cli/test_cli_cloud_teachers.py", "state/test_storage_faults.py::test_killed_at")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        where = item.path.relative_to(tests).as_posix()
        for prefix, group in EXCLUSIVE_GROUPS.items():
            if where.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: not Path(item.nodeid).as_posix().startswith(
        tuple(f"tests/{prefix}" for prefix in LONGEST)))


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's default state directory (``$LDPCLIENT_STATE_DIR``): empty but for the mock teachers' weights
    (:data:`TEACHER_WEIGHTS`, shared), so that no test reads what another left (a ledger, a remembered wire format)."""
    state = tmp_path_factory.mktemp("state")
    (state / TEACHER_WEIGHTS.name).symlink_to(TEACHER_WEIGHTS, target_is_directory=True)
    monkeypatch.setenv("LDPCLIENT_STATE_DIR", str(state))
    return state


@pytest.fixture(scope="session")
def teacher_cache() -> Path:
    """Where the mock teachers keep their trained weights (``mock_server.serve(..., state_dir=...)``, under
    ``mock_teacher/``): the state directory whose ``mock_teacher`` folder every test's default state directory shares
    (:func:`own_state_dir`), so that each teacher is trained once per test process for every test that serves it."""
    return TEACHER_WEIGHTS.parent


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the whole session (tests/postgres_server.py); skips with the reason
    where PostgreSQL or psycopg is missing (LDPCLIENT_REQUIRE_POSTGRES=1 fails instead, as in .ci/run)."""
    from support import postgres_server as pg

    server = pg.start_for_tests()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty database on the session's PostgreSQL server: its URL."""
    return postgres_server.database(f"t{os.getpid()}_{next(_databases)}")


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray for the test module (``start_local_ray(num_cpus=2)``: stages ask 0.5 CPU per actor), shut down
    after it:
    a Ray left running slowed every later test by about 15 % (its threads in this process, its idle workers); skips
    with the reason
    where Ray is missing (LDPCLIENT_REQUIRE_RAY=1 fails instead, as in .ci/run)."""
    try:
        import ray
    except ImportError:
        if os.environ.get("LDPCLIENT_REQUIRE_RAY") == "1":
            pytest.fail("Ray required here: pip install 'ldpclient[cluster]'")
        pytest.skip("Ray is not installed (pip install 'ldpclient[cluster]')")
    from ldpclient.cluster.ray_engine import start_local_ray

    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    session = start_local_ray(num_cpus=2)  # on loopback only, as a run's own
    yield ray
    ray.shutdown()
    shutil.rmtree(session, ignore_errors=True)
