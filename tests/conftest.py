"""Shared test configuration."""

import os
import shutil
import signal
import tempfile

import torch

# Two cores on CI: keep each test process from oversubscribing them.
torch.set_num_threads(1)

# Library defaults write state (ledger, journal, remembered wire formats) to the user's state
# directory; tests that do not pass their own get a throw-away one instead of the user's.
os.environ.setdefault("LDPCLIENT_STATE_DIR", tempfile.mkdtemp(prefix="ldpclient-tests-"))

# A test run started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every child that the Ctrl-C tests start: the signal they send would do nothing.
# A caught handler here is reset to the default in each child at exec, as in a run from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


import itertools  # noqa: E402

import pytest  # noqa: E402

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the whole session (tests/postgres_server.py); skips with the reason
    where PostgreSQL or psycopg is missing (LDPCLIENT_REQUIRE_POSTGRES=1 fails instead, as in .ci/run)."""
    from support import postgres_server as pg

    try:
        server = pg.start()
    except pg.Unavailable as exc:
        if os.environ.get("LDPCLIENT_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required here: {exc}")
        pytest.skip(str(exc))
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
