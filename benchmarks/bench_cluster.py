"""Local Ray against in-process for the stages ``--cluster`` distributes (issue 48): the release (noise and charge
every image in the ledger) and the student's pass over every image, on ``--records`` 28x28 images.

Measured in one run, on this machine: the release in process into the SQLite file (what a run without the
options does), in process into PostgreSQL (``--state``), and on a local Ray (``ray.init(num_cpus=2)``, actors at
half a CPU) into PostgreSQL, with the driver's read-back of the stored releases timed apart; then ``small_cnn``'s
softmax on every image in process and on the Ray actors. Ray's start and each stage's actor start are counted in
the stage (a run pays them). The PostgreSQL server is a throwaway one (``tests/postgres_server.py``, fsync on).
Laplace at epsilon 100 per image, in blocks of ``release_chunk`` images, each image its own source.

    .venv/bin/python benchmarks/bench_cluster.py --records 100000 --out benchmarks/results/cluster.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))


class _Images:
    """``n`` random 28x28 grey images (a RecordSource), each with its own source id."""

    def __init__(self, n: int) -> None:
        self.values = torch.rand((n, 1, 28, 28), generator=torch.Generator().manual_seed(0))
        self.record_shape = (1, 28, 28)
        self.has_source_ids = True

    def __len__(self) -> int:
        return len(self.values)

    def read(self, idx):
        return self.values[torch.as_tensor(np.asarray(idx))]

    def source_ids(self, idx):
        return [f"image-{int(i)}" for i in idx]


def _release_here(location: str, key: str, images: _Images) -> float:
    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import Ledger
    from ldpclient.transfer.stages.release import release_in_chunks

    mech = laplace(100.0, per="record")
    start = time.perf_counter()
    with Ledger(location, key_file=key) as led:
        for _ in release_in_chunks(images, lambda r, ids: led.release(mech, r, scope="teacher", sources=ids)):
            pass
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    import postgres_server

    from ldpclient.transfer.student import build_student, predict_proba

    torch.set_num_threads(2)
    images = _Images(a.records)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    server = postgres_server.start(fsync=True)
    row: dict = {"records": a.records}
    try:
        row["release_here_sqlite_s"] = _release_here(str(tmp / "ledger.sqlite"), str(tmp / "file.key"), images)
        row["release_here_postgresql_s"] = _release_here(server.database("here"), str(tmp / "here.key"), images)
        url, key = server.database("cluster"), str(tmp / "cluster.key")
        from ldpclient.privacy import laplace
        from ldpclient.privacy.ledger import Ledger

        with Ledger(url, key_file=key):
            pass
        t = time.perf_counter()
        import ray

        from ldpclient.cluster.engine import Cluster
        from ldpclient.cluster.ray_engine import RayEngine

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        engine = RayEngine()
        row["ray_init_s"] = time.perf_counter() - t
        cluster = Cluster(engine, url, key, None)
        t = time.perf_counter()
        fresh = cluster.release(laplace(100.0, per="record"), "teacher", images, lambda _n: None)
        row["release_ray_postgresql_s"] = time.perf_counter() - t
        assert fresh.all()
        row["read_back_postgresql_s"] = _release_here(url, key, images)  # every release stored: read, not noised
        model = build_student("small_cnn", in_channels=1, num_classes=10, image_size=28)
        t = time.perf_counter()
        here = predict_proba(model, images)
        row["predict_here_s"] = time.perf_counter() - t
        t = time.perf_counter()
        there = cluster.predict_proba(model, images)
        row["predict_ray_s"] = time.perf_counter() - t
        assert torch.allclose(here, there, atol=1e-5)
        engine.close()
        ray.shutdown()
    finally:
        server.stop()
    row = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}
    print(json.dumps(row), flush=True)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
