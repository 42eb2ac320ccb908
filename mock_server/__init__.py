"""Bundled offline mock teacher: a real HTTP server speaking the Open Inference Protocol v2.

Start it with ``python -m mock_server`` (or ``ldpclient serve-mock``), or in tests::

    from mock_server import serve
    with serve(model="trivial") as srv:       # 127.0.0.1, free port, background thread
        ...  # srv.url, srv.port, srv.model_name, srv.usage(), srv.stop()

It bills per API key, injects seeded faults on request, and can keep an
honest-but-curious log of every query tensor it receives (``querylog``).
"""

from .config import ServerConfig
from .querylog import read_query_log
from .runner import LISTENING_PREFIX, RunningServer, main, serve, start
from .teacher import TeacherModel, build_teacher, load_checkpoint, save_checkpoint

__all__ = [
    "LISTENING_PREFIX", "RunningServer", "ServerConfig", "TeacherModel", "build_teacher", "load_checkpoint",
    "main", "read_query_log", "save_checkpoint", "serve", "start",
]
